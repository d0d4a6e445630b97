"""Fused (flash) attention on the virtual NeuronCore (NKI): forward with log-sum-exp, and its backward.

Contract (one batch x head slice per call; the lowering loops over them):
* `flash_fwd_kernel(out[L, D], lse[L], q[L, D], k[S, D], v[S, D], mask, causal, scale)`: ``out =
  softmax(scale * q @ k.T + mask) @ v`` and ``lse = logsumexp(scale * q @ k.T + mask)`` per query row — the
  statistics torch's CPU flash kernel saves (`aten._scaled_dot_product_flash_attention_for_cpu`). `mask` is
  an additive [L, S] View (broadcast allowed) or None; `causal` keeps key j for query i iff j <= i
  (top-left aligned, as torch). The online softmax runs per 128-row query tile over 128-column key tiles:
  S on TensorE into PSUM, the running row max on VectorE, exp with the -max bias and the fused row sum on
  ScalarE, the rescaled accumulator on VectorE, P.T (TensorE transpose) @ V on TensorE. Key tiles wholly
  above the causal diagonal are skipped; the diagonal tile is masked with GpSimdE affine_select.
* `flash_bwd_kernel(dq, dk, dv, do, q, k, v, out, lse, mask, causal, scale)`: the gradients, recomputing
  ``P = exp(scale * q @ k.T + mask - lse)`` tile by tile (no [L, S] matrix in HBM): per key tile dV and dK
  accumulate in PSUM over the query tiles, dQ accumulates in SBUF; ``dS = P * (dO @ V.T - rowsum(dO * O))``.
Head size D <= 128 (one partition tile). Reference: the FlashAttention-2 algorithm (Dao, 2023,
arXiv:2307.08691), the structure of aws-neuron/nki-samples' flash attention kernels.
"""

from __future__ import annotations

from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.matmul import load_tile
from nprof.compiler.regather_check import nonfinite_checked
from nprof.compiler.views import View, view_access
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

Q_TILE = 128
K_TILE = 128
# floor of the running max: -FLT_MAX, below every finite score, so only a row whose scores are all -inf (fully
# masked) is floored, and stays finite. A mask of torch.finfo(float32).min (Hugging Face's) is finite: such a
# row softmaxes uniformly, as torch's does.
NEG_BIG = -3.4028234663852886e38


def _t(v: View) -> View:
    return v.permute((1, 0))


def _column(v: View, r0: int, rt: int) -> NkiTensor:
    return load(view_access(v, 0, (r0,), (rt,), ()))


def _scores(
    q_t: NkiTensor, k: View, mask: View | None, causal: bool, scale: float, q0: int, qt: int, k0: int, kt: int
) -> NkiTensor:
    """SBUF [qt, kt] = scale * q @ k.T + mask (causal: -inf above the diagonal)."""
    d = k.shape[1]
    s = nisa.tensor_scalar(nisa.nc_matmul(q_t, load_tile(_t(k), 0, d, k0, kt)), "multiply", scale)
    if mask is not None:
        s = nisa.tensor_tensor(s, load(view_access(mask, 0, (q0, k0), (qt, kt), (1,))), "add")
    if causal and k0 + kt - 1 > q0:  # the tile crosses the diagonal
        i_p, i_f = nl.arange(qt)[:, None], nl.arange(kt)[None, :]
        s = nisa.affine_select(i_p - i_f + (q0 - k0) >= 0, s, float("-inf"))
    return s


def _key_tiles(s_len: int, q0: int, causal: bool) -> list[tuple[int, int]]:
    """Key tiles (k0, kt) a query tile starting at q0 attends to."""
    last = s_len if not causal else min(s_len, q0 + Q_TILE)
    return [(k0, min(K_TILE, s_len - k0)) for k0 in range(0, last, K_TILE)]


def flash_fwd_kernel(
    out: View, lse: View, q: View, k: View, v: View, mask: View | None, causal: bool, scale: float
) -> None:
    length, d = q.shape
    for q0 in range(0, length, Q_TILE):
        qt = min(Q_TILE, length - q0)
        q_t = load_tile(_t(q), 0, d, q0, qt)  # [D, qt]: the stationary operand
        row_max: NkiTensor | None = None
        row_sum: NkiTensor | None = None
        acc: NkiTensor | None = None
        for k0, kt in _key_tiles(k.shape[0], q0, causal):
            if causal and k0 > q0 + qt - 1:
                continue
            s = _scores(q_t, k, mask, causal, scale, q0, qt, k0, kt)
            tile_max = nisa.tensor_reduce("max", s, axis=1, keepdims=True)
            new_max = nisa.tensor_scalar(tile_max, "maximum", NEG_BIG)
            if row_max is not None:
                new_max = nisa.tensor_tensor(row_max, new_max, "maximum")
            tile_sum = nl.ndarray((qt, 1), dtype=nl.float32, buffer=nl.sbuf)
            p = nisa.activation(op="exp", data=s, bias=nisa.tensor_scalar(new_max, "multiply", -1.0),
                                reduce_op="add", reduce_res=tile_sum)  # fmt: skip
            p_t = nisa.tensor_copy(nisa.nc_transpose(p))  # [kt, qt]
            pv = nisa.nc_matmul(p_t, load_tile(v, k0, kt, 0, d))  # [qt, D] in PSUM
            if acc is None or row_max is None or row_sum is None:
                acc, row_sum = nisa.tensor_copy(pv), tile_sum
            else:
                alpha = nisa.activation(op="exp", data=nisa.tensor_tensor(row_max, new_max, "subtract"))
                row_sum = nisa.tensor_scalar(row_sum, "multiply", alpha, op1="add", operand1=tile_sum)
                acc = nisa.tensor_tensor(nisa.tensor_scalar(acc, "multiply", alpha), pv, "add")
            row_max = new_max
        assert acc is not None and row_sum is not None and row_max is not None
        _store_rows(out, lse, q0, qt, acc, row_max, row_sum)


def _store_rows(out: View, lse: View, q0: int, qt: int, acc: NkiTensor, row_max: NkiTensor,
                row_sum: NkiTensor) -> None:  # fmt: skip
    """out = acc / row_sum and lse = row_max + log(row_sum) for query rows q0..q0+qt. A fully masked row (every
    score -inf: row_sum 0) gets out 0 and lse 0, as torch's CPU flash kernel (its max taken as 0, its sum as
    1), so its backward's P = exp(-inf - 0) is 0, not NaN."""
    d = out.shape[1]
    empty = nisa.tensor_scalar(row_sum, "is_equal", 0.0, dtype=nl.float32)  # 1.0 on fully masked rows
    total = nisa.tensor_tensor(row_sum, empty, "add")
    peak = nisa.tensor_tensor(row_max, nisa.tensor_scalar(empty, "multiply", -1.0, op1="add", operand1=1.0),
                              "multiply")  # fmt: skip
    # a non-finite output or log-sum-exp (an inf or NaN in q, k or v always makes one) runs the call eagerly:
    # eager's kernel treats some of them its own way (a row with a NaN query is 0, its lse 0)
    store(view_access(out, 0, (q0, 0), (qt, d), (1,)), nonfinite_checked(acc, "multiply", nisa.reciprocal(total)))
    stats = nisa.tensor_tensor(peak, nisa.activation(op="log", data=total), "add")
    store(view_access(lse, 0, (q0,), (qt,), ()), nonfinite_checked(stats))


def flash_bwd_kernel(
    dq: View, dk: View, dv: View, do: View, q: View, k: View, v: View, out: View, lse: View,
    mask: View | None, causal: bool, scale: float,
) -> None:  # fmt: skip
    length, d = q.shape
    s_len = k.shape[0]
    q_tiles = [(q0, min(Q_TILE, length - q0)) for q0 in range(0, length, Q_TILE)]
    # per query tile: D_i = rowsum(dO * O) and -lse (the exp bias), loaded once
    delta, neg_lse = [], []
    for q0, qt in q_tiles:
        prod = nisa.tensor_tensor(load_tile(do, q0, qt, 0, d), load_tile(out, q0, qt, 0, d), "multiply")
        delta.append(nisa.tensor_reduce("add", prod, axis=1, keepdims=True))
        neg_lse.append(nisa.tensor_scalar(_column(lse, q0, qt), "multiply", -1.0))
    dq_acc: list[NkiTensor | None] = [None] * len(q_tiles)
    for k0 in range(0, s_len, K_TILE):
        kt = min(K_TILE, s_len - k0)
        k_rows, v_t = load_tile(k, k0, kt, 0, d), load_tile(_t(v), 0, d, k0, kt)
        dv_acc = nl.ndarray((kt, d), dtype=nl.float32, buffer=nl.psum)
        dk_acc = nl.ndarray((kt, d), dtype=nl.float32, buffer=nl.psum)
        first = True
        for i, (q0, qt) in enumerate(q_tiles):
            if causal and k0 > q0 + qt - 1:
                continue
            s = _scores(load_tile(_t(q), 0, d, q0, qt), k, mask, causal, scale, q0, qt, k0, kt)
            p = nisa.activation(op="exp", data=s, bias=neg_lse[i])  # [qt, kt]
            do_rows = load_tile(do, q0, qt, 0, d)
            dp = nisa.nc_matmul(load_tile(_t(do), 0, d, q0, qt), v_t)  # dO @ V.T: [qt, kt]
            ds = nisa.tensor_tensor(nisa.tensor_scalar(dp, "subtract", delta[i]), p, "multiply")
            if first:
                dv_acc[...] = nisa.nc_matmul(p, do_rows)  # P.T @ dO: [kt, D]
                dk_acc[...] = nisa.nc_matmul(ds, load_tile(q, q0, qt, 0, d))  # dS.T @ Q
            else:
                dv_acc += nisa.nc_matmul(p, do_rows)
                dk_acc += nisa.nc_matmul(ds, load_tile(q, q0, qt, 0, d))
            first = False
            dq_part = nisa.nc_matmul(nisa.tensor_copy(nisa.nc_transpose(ds)), k_rows)  # dS @ K: [qt, D]
            prev = dq_acc[i]
            dq_acc[i] = nisa.tensor_copy(dq_part) if prev is None else nisa.tensor_tensor(prev, dq_part, "add")
        if first:  # no query attends to this key tile
            zeros = nisa.memset((kt, d), 0.0, nl.float32)
            store(view_access(dv, 0, (k0, 0), (kt, d), (1,)), zeros)
            store(view_access(dk, 0, (k0, 0), (kt, d), (1,)), zeros)
            continue
        # checked: an inf in dO puts 0 x inf = NaN at keys the causal mask hides (eager's kernel skips them)
        store(view_access(dv, 0, (k0, 0), (kt, d), (1,)), nonfinite_checked(dv_acc))
        store(view_access(dk, 0, (k0, 0), (kt, d), (1,)), nonfinite_checked(dk_acc, "multiply", scale))
    for (q0, qt), acc in zip(q_tiles, dq_acc, strict=True):
        res = nisa.memset((qt, d), 0.0, nl.float32) if acc is None else nonfinite_checked(acc, "multiply", scale)
        store(view_access(dq, 0, (q0, 0), (qt, d), (1,)), res)
