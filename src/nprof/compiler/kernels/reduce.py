"""Reductions and softmax: rows on partitions, the reduced dims on the free axis.

Contract:
* `reduce_kernel(em, out, src, dims, op, scale=1.0)`: ``out`` (the kept dims, any keepdim size-1 dims
  squeezed out) = ``scale * reduce_op(src over dims)`` with op "add" or "max". Kept dims go on partitions,
  reduced dims are the free dims of each tile (VectorE TENSOR_REDUCE); when a row does not fit one tile the
  partial results accumulate in a pinned SBUF tile. A reduction to a single value puts the reduced elements
  on partitions, reduces each partition, transposes the column on TensorE and reduces again.
* `softmax_kernel(em, out, src, dim, log)`: softmax / log_softmax along `dim` (at most `FREE_MAX`
  elements): VectorE row max (negated), ScalarE exp with the -max bias and a fused row sum, then VectorE
  reciprocal and scale (softmax) or ScalarE log and one VectorE subtract (log_softmax).
"""

from __future__ import annotations

from collections.abc import Sequence

from nprof.arch.isa import Access
from nprof.compiler.emit import Emitter, Tile
from nprof.compiler.kernels.matmul import sum_rows_kernel
from nprof.compiler.views import FREE_MAX, TileSpec, View, numel, row_tiles, view_access
from nprof.errors import UnsupportedOpError

_ALU = {"add": "add", "max": "maximum", "min": "minimum"}  # combining partial results


def _reduce_free(em: Emitter, src: Tile, op: str) -> Tile:
    out = em.sbuf(src.p, 1)
    em.tensor_reduce(out, src, op, tuple(range(1, len(src.shape))))
    return out


def reduce_kernel(em: Emitter, out: View, src: View, dims: Sequence[int], op: str, scale: float = 1.0) -> None:
    nd = len(src.shape)
    red = sorted({d % nd for d in dims}) if dims else list(range(nd))
    kept = [d for d in range(nd) if d not in red]
    if all(src.shape[d] == 1 for d in kept):
        _reduce_all(em, out, src, op, scale)
        return
    if op == "add" and red == list(range(len(red))):  # leading dims: a ones-vector matmul on TensorE
        rows = src.reshape([numel(src.shape[d] for d in red), numel(src.shape[d] for d in kept)])
        flat_out = out.reshape([1, rows.shape[1]]) if rows is not None else None
        if rows is not None and flat_out is not None and rows.strides[1] == 1:
            sum_rows_kernel(em, flat_out, rows, scale)
            return
    perm = src.permute(kept + red)
    out_strides = tuple(out.strides[i] if i < len(kept) else 0 for i in range(nd))
    out_full = View(out.tensor, out.dtype, perm.shape, out_strides, out.offset)
    col_dims = list(range(len(kept), nd))
    partial: dict[tuple[int, int], tuple[Tile, TileSpec]] = {}
    for spec in row_tiles(perm.shape, [out_full.strides, perm.strides], col_dims):
        tile = em.load(spec.access(1, perm))
        r = _reduce_free(em, tile, op)
        key = (spec.offsets[0], spec.partitions)
        if key in partial:
            acc, _ = partial[key]
            em.tensor_tensor(acc, acc, r, _ALU[op])
        else:
            acc = em.sbuf(spec.partitions, 1, pin=True)
            em.tensor_copy(acc, r)
            partial[key] = (acc, spec)
    for acc, spec in partial.values():
        if scale != 1.0:
            em.tensor_scalar(acc, acc, "multiply", scale)
        a = spec.access(0, out_full)
        em.store(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride), acc)
    em.release_pins()


def _reduce_all(em: Emitter, out: View, src: View, op: str, scale: float) -> None:
    acc = em.sbuf(1, 1, pin=True)
    first = True
    for spec in row_tiles(src.shape, [src.strides]):
        tile = em.load(spec.access(0, src))
        col = _reduce_free(em, tile, op)
        if col.p > 1:
            row = em.psum(1, col.p)
            em.nc_transpose(row, col)
            col = _reduce_free(em, row, op)
        if first:
            em.tensor_copy(acc, col)
            first = False
        else:
            em.tensor_tensor(acc, acc, col, _ALU[op])
    if scale != 1.0:
        em.tensor_scalar(acc, acc, "multiply", scale)
    em.store(view_access(View(out.tensor, out.dtype, (1,), (0,), out.offset), None, (0,), (1,), (0,)), acc)
    em.release_pins()


def softmax_kernel(em: Emitter, out: View, src: View, dim: int, log: bool) -> None:
    nd = len(src.shape)
    dim %= max(nd, 1)
    if src.shape[dim] > FREE_MAX:
        raise UnsupportedOpError(f"softmax over {src.shape[dim]} elements (at most {FREE_MAX} per row)")
    order = [d for d in range(nd) if d != dim] + [dim]
    s = src.permute(order)
    o = out.permute(order)
    for spec in row_tiles(s.shape, [o.strides, s.strides], [nd - 1]):
        x = em.load(spec.access(1, s))
        negmax = em.sbuf(x.p, 1)
        em.tensor_reduce(negmax, x, "max", tuple(range(1, len(x.shape))), negate=True)
        e = em.sbuf(*x.shape)
        total = em.sbuf(x.p, 1)
        em.activation(e, x, "exp", bias=negmax, reduce_op="add", reduce_out=total)
        res = em.sbuf(*x.shape)
        if log:
            logsum = em.sbuf(x.p, 1)
            em.activation(logsum, total, "log")
            em.tensor_scalar(res, x, "add", negmax, op1="subtract", operand1=logsum)
        else:
            recip = em.sbuf(x.p, 1)
            em.reciprocal(recip, total)
            em.tensor_scalar(res, e, "multiply", recip)
        em.store(spec.access(0, o), res)
