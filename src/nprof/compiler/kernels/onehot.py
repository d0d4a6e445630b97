"""Index-driven kernels (NKI) built from GpSimdE iota: embedding (gather), its backward, nll_loss, arange.

Contract:
* `embedding_kernel(out[N, D], weight[V, D], idx[N])`: one-hot columns ``(v == idx)`` (V on partitions,
  an iota per partition compared with the indices broadcast to every partition) times the table on TensorE.
* `embedding_backward_kernel(out[V, D], grad[N, D], idx[N], padding_idx)`: ``onehot.T @ grad`` on TensorE
  (N on partitions, accumulated in PSUM); the padding row is zeroed with GpSimdE affine_select.
  Both are exact only for finite tables/gradients (0 x inf = NaN in other rows): their results leave PSUM
  through `regather_check.checked_copy`, whose check makes the backend run such a call eagerly.
* `nll_loss_kernel(loss, total_weight, logp[N, C], target[N], reduction, ignore_index)`: picked
  log-probabilities by one-hot mask (a VectorE select, so a -inf elsewhere in the row stays out) and row
  reduce; the sums over rows by a ones-vector matmul on TensorE.
  `nll_loss_backward_kernel` writes ``-mask * valid * grad / total_weight`` (mean) or ``-mask * valid * grad``.
* `iota_kernel(out, start, step)`: ``aten.arange``; `scatter_kernel`: scatter with one index per row.
Indices are compared exactly in fp32 (exact below 2**24).
"""

from __future__ import annotations

from nprof.arch.isa import Access
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.matmul import K_TILE, M_TILE, N_TILE
from nprof.compiler.regather_check import checked_copy
from nprof.compiler.views import View, broadcast_rows, row_tiles, view_access
from nprof.nki import isa as nisa
from nprof.nki import isa_ext
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2


def _index_col(idx: View, n0: int, nt: int) -> NkiTensor:
    return load(view_access(idx, 0, (n0,), (nt,), ()))


def _ramp(parts: int, size: int, base: int) -> NkiTensor:
    """[parts, size] tile whose every row is base, base+1, ... (GpSimdE iota)."""
    return nisa.iota(nl.arange(parts)[:, None] * 0 + nl.arange(size)[None, :] + base, dtype=nl.float32)


def embedding_kernel(out: View, weight: View, idx: View) -> None:
    n = idx.shape[0]
    v, d = weight.shape
    for n0 in range(0, n, M_TILE):
        nt = min(M_TILE, n - n0)
        for d0 in range(0, d, N_TILE):
            dt = min(N_TILE, d - d0)
            acc = nl.ndarray((nt, dt), dtype=nl.float32, buffer=nl.psum)
            for i, v0 in enumerate(range(0, v, K_TILE)):
                vt = min(K_TILE, v - v0)
                rows = nisa.iota(nl.arange(vt)[:, None] + v0, dtype=nl.float32)  # [vt, 1]: v0 + p
                ids = load(broadcast_rows(idx, vt, (n0,), (nt,), (0,)))  # the indices on every partition
                onehot_t = nisa.tensor_scalar(ids, "is_equal", rows)
                table = load(view_access(weight, 0, (v0, d0), (vt, dt), (1,)))
                if i == 0:
                    acc[...] = nisa.nc_matmul(onehot_t, table)
                else:
                    acc += nisa.nc_matmul(onehot_t, table)
            store(view_access(out, 0, (n0, d0), (nt, dt), (1,)), checked_copy(acc))  # an inf: NaN elsewhere


def embedding_backward_kernel(out: View, grad: View, idx: View, padding_idx: int) -> None:
    n, d = grad.shape
    v = out.shape[0]
    for v0 in range(0, v, M_TILE):
        vt = min(M_TILE, v - v0)
        for d0 in range(0, d, N_TILE):
            dt = min(N_TILE, d - d0)
            acc = nl.ndarray((vt, dt), dtype=nl.float32, buffer=nl.psum)
            for i, n0 in enumerate(range(0, n, K_TILE)):
                nt = min(K_TILE, n - n0)
                onehot = nisa.tensor_scalar(_ramp(nt, vt, v0), "is_equal", _index_col(idx, n0, nt))
                g = load(view_access(grad, 0, (n0, d0), (nt, dt), (1,)))
                if i == 0:
                    acc[...] = nisa.nc_matmul(onehot, g)
                else:
                    acc += nisa.nc_matmul(onehot, g)
            res = checked_copy(acc)  # an inf gradient puts 0 x inf = NaN in other rows: checked
            if padding_idx >= 0 and v0 <= padding_idx < v0 + vt:
                i_p = nl.arange(vt)[:, None]
                res = nisa.affine_select(i_p + (v0 - padding_idx) != 0, res, 0.0)
            store(view_access(out, 0, (v0, d0), (vt, dt), (1,)), res)


def _mask(target: View, n0: int, nt: int, c: int) -> tuple[NkiTensor, NkiTensor]:
    ids = _index_col(target, n0, nt)
    return ids, nisa.tensor_scalar(_ramp(nt, c, 0), "is_equal", ids)


def nll_loss_kernel(
    loss: View, total_weight: View, logp: View, target: View, reduction: int, ignore_index: int
) -> None:
    n, c = logp.shape
    acc = nl.ndarray((1, 2), dtype=nl.float32, buffer=nl.psum)
    for i, n0 in enumerate(range(0, n, K_TILE)):
        nt = min(K_TILE, n - n0)
        ids, mask = _mask(target, n0, nt, c)
        x = load(view_access(logp, 0, (n0, 0), (nt, c), (1,)))
        # selected, not multiplied by the 0/1 masks: a -inf log-probability off the target (a masked logit) would
        # make 0 x -inf = NaN where eager picks a finite value
        picked = nl.ndarray((nt, 1), dtype=nl.float32, buffer=nl.sbuf)
        isa_ext.select_reduce(dst=nl.ndarray((nt, c), dtype=nl.float32, buffer=nl.sbuf), predicate=mask,
                              on_true=x, on_false=0.0, reduce_res=picked, reduce_op="add")  # fmt: skip
        pv = nl.ndarray((nt, 2), dtype=nl.float32, buffer=nl.sbuf)  # (picked where valid, valid) per row
        pv[:, 1:2] = nisa.tensor_scalar(ids, "not_equal", float(ignore_index))
        isa_ext.select_reduce(dst=pv[:, 0:1], predicate=pv[:, 1:2], on_true=picked, on_false=0.0)
        if reduction == REDUCTION_NONE:
            store(view_access(loss, 0, (n0,), (nt,), ()), nisa.tensor_scalar(pv[:, 0:1], "multiply", -1.0))
        ones = nisa.memset((nt, 1), 1.0, nl.float32)
        if i == 0:
            acc[...] = nisa.nc_matmul(ones, pv)
        else:
            acc += nisa.nc_matmul(ones, pv)
    sums = nisa.tensor_copy(acc)
    store(view_access(total_weight, None, (), (), ()), sums[:, 1:2])
    if reduction == REDUCTION_NONE:
        return
    if reduction == REDUCTION_MEAN:
        res = nisa.tensor_scalar(nisa.tensor_tensor(sums[:, 0:1], sums[:, 1:2], "divide"), "multiply", -1.0)
    else:
        res = nisa.tensor_scalar(sums[:, 0:1], "multiply", -1.0)
    store(view_access(loss, None, (), (), ()), res)


def nll_loss_backward_kernel(
    out: View, grad: View, logp: View, target: View, reduction: int, ignore_index: int, total_weight: View
) -> None:
    n, c = logp.shape
    for n0 in range(0, n, K_TILE):
        nt = min(K_TILE, n - n0)
        ids, mask = _mask(target, n0, nt, c)
        if reduction == REDUCTION_NONE:
            g = load(view_access(grad, 0, (n0,), (nt,), ()))
        else:
            g = load(broadcast_rows(grad, nt, (), (), ()))
        if reduction == REDUCTION_MEAN:
            scale = nisa.tensor_tensor(g, load(broadcast_rows(total_weight, nt, (), (), ())), "divide")
        else:
            scale = g
        valid = nisa.tensor_scalar(ids, "not_equal", float(ignore_index), op1="multiply", operand1=-1.0)
        scale = nisa.tensor_tensor(scale, valid, "multiply")
        store(view_access(out, 0, (n0, 0), (nt, c), (1,)), nisa.tensor_scalar(mask, "multiply", scale))


def iota_kernel(out: View, start: float, step: float) -> None:
    """out = start + step * (flat index); integral start and step."""
    for spec in row_tiles(out.shape, [out.strides]):
        parts = spec.partitions
        expr = nl.arange(parts)[:, None] * int(spec.part_strides[0] * step) + int(start + spec.offsets[0] * step)
        free = [size for _, size in spec.free]
        if len(free) != 1:
            raise AssertionError("arange output is 1-D: one free dim per tile")
        expr = expr + nl.arange(free[0])[None, :] * int(spec.free[0][0][0] * step)
        store(spec.access(0, out), nisa.iota(expr, dtype=nl.float32))


def scatter_kernel(out: View, base: View | float, index: View, src: View | float, dim: int) -> None:
    """out = base with out[.., index[.., 0, ..], ..] = src[.., 0, ..] along `dim` (index size 1 along `dim`):
    a GpSimdE iota along the row, is_equal against the per-row index, VectorE select."""
    nd = len(out.shape)
    order = [d for d in range(nd) if d != dim] + [dim]
    o = out.permute(order)
    cols = [index.permute(order)] + [v.permute(order) for v in (src,) if isinstance(v, View)]
    full_base = base.permute(order) if isinstance(base, View) else None
    views = [o, *cols] + ([full_base] if full_base is not None else [])
    for spec in row_tiles(o.shape, [v.strides for v in views], [nd - 1]):
        size = spec.free_sizes[0]
        col_access = [spec.access(1 + k, v) for k, v in enumerate(cols)]
        ids = load(_column(col_access[0]))
        value = load(_column(col_access[1])) if len(cols) > 1 else float(src)  # type: ignore[arg-type]
        ramp = _ramp(spec.partitions, size, 0)
        hit = nisa.tensor_scalar(ramp, "is_equal", ids)
        rest = load(spec.access(len(views) - 1, full_base)) if full_base is not None else float(base)  # type: ignore[arg-type]
        store(spec.access(0, o), nl.where(hit, value, rest))


def _column(a: Access) -> Access:
    return Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride)
