"""Lowerings of the indexing ops Hugging Face models use: index.Tensor, index_select, gather, cumsum, copy,
embedding bags.

Contract: importing this module registers its lowerings in `nprof.compiler.ops.LOWERINGS`.
* ``index.Tensor`` (advanced indexing, e.g. attention-mask construction), ``index_select`` (Swin's bias table)
  and ``gather``: the flat element offset of every output element is computed on the device from the index
  tensors and the source view's strides (`kernels.gather.weighted_sum_kernel`), then the elements are gathered
  from the source's HBM tensor with the one-hot TensorE gather (`onehot.embedding_kernel`). Negative
  indices count from the end.
* ``index_put`` with accumulate=True (the backward of indexing): a one-hot scatter-add on TensorE.
* ``cumsum``: a doubling scan of shifted adds in SBUF (`kernels.reduce.scan_kernel`).
* ``flip``: a copy through negative strides.
* ``copy`` (functionalized in-place writes such as ``mask[:, -1] = 0``): src broadcast to dst's shape.
* ``_embedding_bag`` (modes sum and mean, no per-sample weights) and its backward: the [B, N] bag matrix
  (`kernels.gather.bag_matrix_kernel`) times the embedded rows; backward = bag matrix.T @ grad, then the
  embedding backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nprof.compiler.kernels.elementwise import binary_body, map_kernel
from nprof.compiler.kernels.gather import Term, bag_matrix_kernel, weighted_sum_kernel
from nprof.compiler.kernels.matmul import copy_kernel, matmul_kernel
from nprof.compiler.kernels.onehot import embedding_backward_kernel, embedding_kernel, iota_kernel
from nprof.compiler.kernels.reduce import scan_kernel
from nprof.compiler.lower import Const, Lowerer, as_operand
from nprof.compiler.ops import LOWERINGS, as_contiguous, register, view_of
from nprof.compiler.views import View, numel
from nprof.errors import UnsupportedOpError

__all__ = ["LOWERINGS"]


def _coord(lw: Lowerer, shape: Sequence[int], dim: int) -> View:
    """A View of `shape` whose value is the coordinate along `dim` (an iota, broadcast)."""
    ramp = lw.temp_tensor((shape[dim],), "float32")
    lw.em.call(iota_kernel, ramp, 0.0, 1.0)
    strides = tuple(1 if d == dim else 0 for d in range(len(shape)))
    return View(ramp.tensor, ramp.dtype, tuple(shape), strides, 0)


def _gather_flat(lw: Lowerer, src: View, terms: list[Term], shape: tuple[int, ...]) -> View:
    """out[shape] = flat(src.tensor)[src.offset + sum(terms)]: offsets on the device, one-hot gather."""
    if not terms:
        raise UnsupportedOpError(lw.unsupported_message("indexing without index tensors"))
    lin = lw.temp_tensor(shape, "float32")
    lw.em.call(weighted_sum_kernel, lin, terms, float(src.offset))
    total = numel(lw.em.tensors[src.tensor].shape)
    table = View(src.tensor, src.dtype, (total, 1), (1, 0), 0)
    out = lw.new_tensor()
    out2d = out.reshape([numel(shape), 1])
    flat = lin.reshape([numel(shape)])
    assert out2d is not None and flat is not None
    lw.em.call(embedding_kernel, out2d, table, flat)
    return out


def _index_terms(lw: Lowerer, src: View, indices: Sequence[Any], shape: tuple[int, ...]) -> list[Term]:
    """The flat-offset terms of ``src[indices]`` (result `shape`), torch's advanced-indexing rules: the
    broadcast index dims replace the indexed dims in place when those are adjacent, else they go first."""
    given = [k for k, i in enumerate(indices) if i is not None]
    bshape = tuple(np.broadcast_shapes(*(tuple(indices[k].meta["val"].shape) for k in given)))
    adjacent = given == list(range(given[0], given[-1] + 1))
    first = given[0] if adjacent else 0  # where the broadcast index dims land in the result
    nb = len(bshape)
    terms: list[Term] = []
    for k in given:
        idx = as_operand(lw, lw.value(indices[k]), bshape)
        if not isinstance(idx, View):
            idx = _const_view(lw, idx, bshape)
        full = View(idx.tensor, idx.dtype, shape,
                    (0,) * first + idx.strides + (0,) * (len(shape) - first - nb), idx.offset)  # fmt: skip
        terms.append((full, float(src.strides[k]), int(src.shape[k])))
    for d in range(len(src.shape)):  # the dims taken whole (None or trailing), in order
        if d in given:
            continue
        if adjacent:
            out_dim = d if d < first else d - len(given) + nb
        else:
            out_dim = nb + len([e for e in range(d) if e not in given])
        terms.append((_coord(lw, shape, out_dim), float(src.strides[d]), 0))
    return terms


@register("index.Tensor")
def _index(lw: Lowerer, x: Any, indices: Sequence[Any]) -> View:
    src = view_of(lw, x)
    shape = tuple(int(s) for s in lw.meta().shape)
    return _gather_flat(lw, src, _index_terms(lw, src, indices, shape), shape)


@register("index_select.default")
def _index_select(lw: Lowerer, x: Any, dim: int, index: Any) -> View:
    """``x.index_select(dim, index)``: ``index.Tensor`` with the (1-D) index at `dim`, the other dims whole."""
    src = view_of(lw, x)
    if len(index.meta["val"].shape) != 1:
        raise UnsupportedOpError(lw.unsupported_message("index_select by a 0-d index"))
    indices = [None] * (int(dim) % len(src.shape)) + [index]
    shape = tuple(int(s) for s in lw.meta().shape)
    return _gather_flat(lw, src, _index_terms(lw, src, indices, shape), shape)


@register("index_put.default")
def _index_put(lw: Lowerer, x: Any, indices: Sequence[Any], values: Any, accumulate: bool = False) -> View:
    """``x.index_put(indices, values, accumulate=True)`` (the backward of indexing): a one-hot scatter-add
    on TensorE (`onehot.embedding_backward_kernel`) into a zero tensor, plus x."""
    if not accumulate:
        raise UnsupportedOpError(lw.unsupported_message("index_put without accumulate (indexed assignment)"))
    out = lw.new_tensor()
    shape = tuple(int(s) for s in values.meta["val"].shape) if hasattr(values, "meta") else ()
    shape = tuple(np.broadcast_shapes(shape, _indexed_shape(x, indices)))
    return _scatter_add(lw, out, x, _index_terms(lw, out, indices, shape), values, shape)


@register("scatter_add.default")
def _scatter_add_op(lw: Lowerer, x: Any, dim: int, index: Any, src: Any) -> View:
    """``x.scatter_add(dim, index, src)`` (the backward of gather)."""
    out = lw.new_tensor()
    idx = view_of(lw, index)
    dim %= len(out.shape)
    shape = tuple(idx.shape)
    terms: list[Term] = [(idx, float(out.strides[dim]), int(out.shape[dim]))]
    terms += [(_coord(lw, shape, d), float(out.strides[d]), 0) for d in range(len(shape)) if d != dim]
    return _scatter_add(lw, out, x, terms, src, shape)


def _scatter_add(lw: Lowerer, out: View, x: Any, terms: list[Term], values: Any, shape: tuple[int, ...]) -> View:
    """out (contiguous) = x + the `values` (broadcast to `shape`) added at the flat offsets `terms`."""
    lin = lw.temp_tensor(shape, "float32")
    lw.em.call(weighted_sum_kernel, lin, terms, 0.0)
    vals = as_operand(lw, lw.value(values), shape)
    if not isinstance(vals, View):
        vals = _const_view(lw, vals, shape)
    vals2d = as_contiguous(lw, vals).reshape([numel(shape), 1])
    added = lw.temp_tensor((numel(out.shape), 1), "float32")
    flat = lin.reshape([numel(shape)])
    assert vals2d is not None and flat is not None
    lw.em.call(embedding_backward_kernel, added, vals2d, flat, -1)
    base = as_operand(lw, lw.value(x), out.shape)
    lw.em.call(map_kernel, out, [base, added.reshape(list(out.shape))], binary_body("add"))
    return out


def _indexed_shape(x: Any, indices: Sequence[Any]) -> tuple[int, ...]:
    """The shape of ``x[indices]`` (from the fake tensors)."""
    import torch

    val = x.meta["val"]
    probe = torch.empty(tuple(val.shape), device="meta")
    idx = [None if i is None else torch.zeros(tuple(i.meta["val"].shape), dtype=torch.long, device="meta")
           for i in indices]  # fmt: skip
    return tuple(int(s) for s in probe[tuple(slice(None) if i is None else i for i in idx)].shape)


def _const_view(lw: Lowerer, value: float, shape: tuple[int, ...]) -> View:
    from nprof.compiler.ops import materialize_const

    return materialize_const(lw, Const(float(value), shape, "float32"))


@register("gather.default")
def _gather(lw: Lowerer, x: Any, dim: int, index: Any, sparse_grad: bool = False) -> View:
    src = view_of(lw, x)
    idx = view_of(lw, index)
    dim %= len(src.shape)
    shape = tuple(idx.shape)
    terms: list[Term] = [(idx, float(src.strides[dim]), int(src.shape[dim]))]
    terms += [(_coord(lw, shape, d), float(src.strides[d]), 0) for d in range(len(shape)) if d != dim]
    return _gather_flat(lw, src, terms, shape)


@register("cumsum.default")
def _cumsum(lw: Lowerer, x: Any, dim: int, dtype: Any = None) -> View:
    """`kernels.reduce.scan_kernel`: a doubling scan in SBUF, exact for inf/NaN (a matmul by the triangular ones
    matrix put 0 x inf = NaN before an inf) and for integers below 2**24."""
    src = view_of(lw, x)
    out = lw.new_tensor()
    if not src.shape:
        lw.em.call(copy_kernel, out, src)
        return out
    lw.em.call(scan_kernel, out, src, dim)
    return out


@register("flip.default")
def _flip(lw: Lowerer, x: Any, dims: Sequence[int]) -> View:
    """x reversed along `dims`: one copy of `x` read through negative strides (DMA), exact for every value
    (an anti-identity matmul would spread an inf or NaN as 0 x inf = NaN over its whole row)."""
    src = view_of(lw, x)
    nd = len(src.shape)
    strides, offset = list(src.strides), src.offset
    for d in sorted({d % nd for d in dims}):
        if src.shape[d] > 1:
            offset += (src.shape[d] - 1) * strides[d]
            strides[d] = -strides[d]
    out = lw.new_tensor()
    lw.em.call(copy_kernel, out, View(src.tensor, src.dtype, src.shape, tuple(strides), offset))
    return out


@register("copy.default")
def _copy(lw: Lowerer, dst: Any, src: Any, non_blocking: bool = False) -> View:
    out = lw.new_tensor()
    lw.em.call(copy_kernel, out, as_operand(lw, lw.value(src), out.shape))
    return out


@register("new_empty_strided.default", "empty_strided.default", "new_empty.default")
def _empty(lw: Lowerer, *_: Any, **__: Any) -> Const:
    val = lw.meta()
    return Const(0.0, tuple(int(s) for s in val.shape), str(val.dtype).removeprefix("torch."))


def _check_bag(lw: Lowerer, mode: int, per_sample_weights: Any, idx: View) -> None:
    if mode not in (0, 1):
        raise UnsupportedOpError(lw.unsupported_message("embedding_bag with mode='max'"))
    if per_sample_weights is not None:
        raise UnsupportedOpError(lw.unsupported_message("embedding_bag with per_sample_weights"))
    if len(idx.shape) != 1:
        raise UnsupportedOpError(lw.unsupported_message("embedding_bag with 2-D indices (pass offsets)"))


def _bags(lw: Lowerer, offsets: View, n: int, bags: int, last: bool, mean: bool) -> View:
    """The [bags, n] bag matrix (a temporary, as are the bag sizes it writes)."""
    a = lw.temp_tensor((bags, n), "float32")
    size = lw.temp_tensor((bags,), "float32")
    lw.em.call(bag_matrix_kernel, a, size, None, offsets, n, last, mean)
    return a


@register("_embedding_bag.default", "_embedding_bag_forward_only.default")
def _embedding_bag(
    lw: Lowerer, weight: Any, indices: Any, offsets: Any, scale_grad_by_freq: bool = False, mode: int = 0,
    sparse: bool = False, per_sample_weights: Any = None, include_last_offset: bool = False, padding_idx: int = -1,
) -> tuple:  # fmt: skip
    w, idx, off = view_of(lw, weight), view_of(lw, indices), view_of(lw, offsets)
    _check_bag(lw, mode, per_sample_weights, idx)
    n = idx.shape[0]
    out = lw.new_tensor(index=0)
    bags = out.shape[0]
    rows = lw.temp_tensor((n, w.shape[1]), "float32")
    lw.em.call(embedding_kernel, rows, w, idx)
    if padding_idx >= 0:
        raise UnsupportedOpError(lw.unsupported_message("embedding_bag with padding_idx"))
    o2b_val = lw.meta()[1]
    o2b = lw.new_tensor(index=1) if numel(o2b_val.shape) else None
    a = lw.temp_tensor((bags, n), "float32")
    size = lw.new_tensor(index=2)
    lw.em.call(bag_matrix_kernel, a, size, o2b.reshape([1, n]) if o2b is not None else None, off, n,
               bool(include_last_offset), mode == 1)  # fmt: skip
    lw.em.call(matmul_kernel, out, a, rows)
    return out, (o2b if o2b is not None else Const(0.0, (0,), "int64")), size, size


@register("_embedding_bag_backward.default", "_embedding_bag_dense_backward.default")
def _embedding_bag_backward(lw: Lowerer, grad: Any, indices: Any, offsets: Any, *args: Any, **kwargs: Any) -> View:
    # (offset2bag, bag_size, max_indices, num_weights, scale_grad_by_freq, mode, [sparse,] psw, [padding_idx])
    dense = "dense" in str(lw.node.target)
    scale_grad, mode = args[4], args[5]
    psw = args[6] if dense else args[7]
    rest = list(args[7:] if dense else args[8:])
    padding_idx = int(kwargs.get("padding_idx", rest[0] if rest else -1))
    idx, off, g = view_of(lw, indices), view_of(lw, offsets), view_of(lw, grad)
    _check_bag(lw, int(mode), psw, idx)
    if scale_grad:
        raise UnsupportedOpError(lw.unsupported_message("embedding_bag backward with scale_grad_by_freq=True"))
    n, bags = idx.shape[0], g.shape[0]
    last = off.shape[0] == bags + 1
    a = _bags(lw, off, n, bags, last, int(mode) == 1)
    per_index = lw.temp_tensor((n, g.shape[1]), "float32")
    lw.em.call(matmul_kernel, per_index, a.permute((1, 0)), g)
    out = lw.new_tensor()
    lw.em.call(embedding_backward_kernel, out, per_index, idx, padding_idx)
    return out
