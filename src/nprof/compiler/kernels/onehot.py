"""Index-driven kernels built from GpSimdE iota: embedding (gather), its backward, nll_loss, arange.

Contract:
* `embedding_kernel(em, out[N, D], weight[V, D], idx[N])`: one-hot rows ``(iota == idx)`` built on
  GpSimdE/VectorE, transposed by construction (V on partitions), multiplied with the table on TensorE.
* `embedding_backward_kernel(em, out[V, D], grad[N, D], idx[N], padding_idx)`: ``onehot.T @ grad`` on
  TensorE (N on partitions, accumulated in PSUM); the padding row is zeroed with GpSimdE affine_select.
* `nll_loss_kernel(em, loss, total_weight, logp[N, C], target[N], reduction, ignore_index)`: picked
  log-probabilities by one-hot mask and row reduce; the sums over rows by a ones-vector matmul on TensorE.
  `nll_loss_backward_kernel` writes ``-mask * valid * grad / total_weight`` (mean) or ``-mask * valid * grad``.
* `iota_kernel(em, out[n], start, step)`: ``aten.arange``.
Indices are compared exactly in fp32 (exact below 2**24).
"""

from __future__ import annotations

from nprof.compiler.emit import Emitter, Tile
from nprof.compiler.kernels.matmul import K_TILE, M_TILE, N_TILE
from nprof.compiler.views import View, broadcast_rows, row_tiles, view_access

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2


def _index_col(em: Emitter, idx: View, n0: int, nt: int) -> Tile:
    return em.load(view_access(idx, 0, (n0,), (nt,), ()))


def embedding_kernel(em: Emitter, out: View, weight: View, idx: View) -> None:
    n = idx.shape[0]
    v, d = weight.shape
    for n0 in range(0, n, M_TILE):
        nt = min(M_TILE, n - n0)
        for d0 in range(0, d, N_TILE):
            dt = min(N_TILE, d - d0)
            acc = em.psum(nt, dt, pin=True)
            for i, v0 in enumerate(range(0, v, K_TILE)):
                vt = min(K_TILE, v - v0)
                ramp = em.sbuf(vt, nt)
                em.iota(ramp, v0, 1, (0,))
                ids = em.load(broadcast_rows(idx, vt, (n0,), (nt,), (0,)))
                onehot_t = em.sbuf(vt, nt)
                em.tensor_tensor(onehot_t, ramp, ids, "is_equal")
                table = em.load(view_access(weight, 0, (v0, d0), (vt, dt), (1,)))
                em.nc_matmul(acc, onehot_t, table, accumulate=i > 0)
            res = em.sbuf(nt, dt)
            em.tensor_copy(res, acc)
            em.unpin(acc)
            em.store(view_access(out, 0, (n0, d0), (nt, dt), (1,)), res)


def embedding_backward_kernel(em: Emitter, out: View, grad: View, idx: View, padding_idx: int) -> None:
    n, d = grad.shape
    v = out.shape[0]
    for v0 in range(0, v, M_TILE):
        vt = min(M_TILE, v - v0)
        for d0 in range(0, d, N_TILE):
            dt = min(N_TILE, d - d0)
            acc = em.psum(vt, dt, pin=True)
            for i, n0 in enumerate(range(0, n, K_TILE)):
                nt = min(K_TILE, n - n0)
                ids = _index_col(em, idx, n0, nt)
                ramp = em.sbuf(nt, vt)
                em.iota(ramp, v0, 0, (1,))
                onehot = em.sbuf(nt, vt)
                em.tensor_scalar(onehot, ramp, "is_equal", ids)
                g = em.load(view_access(grad, 0, (n0, d0), (nt, dt), (1,)))
                em.nc_matmul(acc, onehot, g, accumulate=i > 0)
            res = em.sbuf(vt, dt)
            em.tensor_copy(res, acc)
            em.unpin(acc)
            if padding_idx >= 0 and v0 <= padding_idx < v0 + vt:
                em.affine_select(res, res, v0 - padding_idx, 1, (0,), "ne", 0.0)
            em.store(view_access(out, 0, (v0, d0), (vt, dt), (1,)), res)


def _mask(em: Emitter, target: View, n0: int, nt: int, c: int) -> tuple[Tile, Tile]:
    ids = _index_col(em, target, n0, nt)
    ramp = em.sbuf(nt, c)
    em.iota(ramp, 0, 0, (1,))
    mask = em.sbuf(nt, c)
    em.tensor_scalar(mask, ramp, "is_equal", ids)
    return ids, mask


def nll_loss_kernel(
    em: Emitter, loss: View, total_weight: View, logp: View, target: View, reduction: int, ignore_index: int
) -> None:
    n, c = logp.shape
    acc = em.psum(1, 2, pin=True)
    for i, n0 in enumerate(range(0, n, K_TILE)):
        nt = min(K_TILE, n - n0)
        ids, mask = _mask(em, target, n0, nt, c)
        x = em.load(view_access(logp, 0, (n0, 0), (nt, c), (1,)))
        prod = em.sbuf(nt, c)
        em.tensor_tensor(prod, x, mask, "multiply")
        pv = em.sbuf(nt, 2)
        em.tensor_reduce(pv.cols(0, 1), prod, "add", (1,))
        em.tensor_scalar(pv.cols(1, 1), ids, "not_equal", float(ignore_index))
        em.tensor_tensor(pv.cols(0, 1), pv.cols(0, 1), pv.cols(1, 1), "multiply")
        if reduction == REDUCTION_NONE:
            neg = em.sbuf(nt, 1)
            em.tensor_scalar(neg, pv.cols(0, 1), "multiply", -1.0)
            em.store(view_access(loss, 0, (n0,), (nt,), ()), neg)
        ones = em.sbuf(nt, 1)
        em.memset(ones, 1.0)
        em.nc_matmul(acc, ones, pv, accumulate=i > 0)
    sums = em.sbuf(1, 2)
    em.tensor_copy(sums, acc)
    em.unpin(acc)
    em.store(view_access(total_weight, None, (), (), ()), sums.cols(1, 1))
    if reduction == REDUCTION_NONE:
        return
    res = em.sbuf(1, 1)
    if reduction == REDUCTION_MEAN:
        em.tensor_tensor(res, sums.cols(0, 1), sums.cols(1, 1), "divide")
        em.tensor_scalar(res, res, "multiply", -1.0)
    else:
        em.tensor_scalar(res, sums.cols(0, 1), "multiply", -1.0)
    em.store(view_access(loss, None, (), (), ()), res)


def nll_loss_backward_kernel(
    em: Emitter,
    out: View,
    grad: View,
    logp: View,
    target: View,
    reduction: int,
    ignore_index: int,
    total_weight: View,
) -> None:
    n, c = logp.shape
    for n0 in range(0, n, K_TILE):
        nt = min(K_TILE, n - n0)
        ids, mask = _mask(em, target, n0, nt, c)
        if reduction == REDUCTION_NONE:
            g = em.load(view_access(grad, 0, (n0,), (nt,), ()))
        else:
            g = em.load(broadcast_rows(grad, nt, (), (), ()))
        scale = em.sbuf(nt, 1)
        if reduction == REDUCTION_MEAN:
            tw = em.load(broadcast_rows(total_weight, nt, (), (), ()))
            em.tensor_tensor(scale, g, tw, "divide")
            em.tensor_scalar(scale, scale, "multiply", -1.0)
        else:
            em.tensor_scalar(scale, g, "multiply", -1.0)
        valid = em.sbuf(nt, 1)
        em.tensor_scalar(valid, ids, "not_equal", float(ignore_index))
        em.tensor_tensor(scale, scale, valid, "multiply")
        res = em.sbuf(nt, c)
        em.tensor_scalar(res, mask, "multiply", scale)
        em.store(view_access(out, 0, (n0, 0), (nt, c), (1,)), res)


def iota_kernel(em: Emitter, out: View, start: float, step: float) -> None:
    for spec in row_tiles(out.shape, [out.strides]):
        t = em.sbuf(spec.partitions, *spec.free_sizes)
        first = spec.offsets[0]
        pstride = spec.part_strides[0]
        steps = tuple(int(strides[0] * step) for strides, _ in spec.free)
        em.iota(t, int(start + first * step), int(pstride * step), steps)
        em.store(spec.access(0, out), t)
