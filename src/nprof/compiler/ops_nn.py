"""Lowerings of the compute-heavy ATen ops: matmuls, reductions, softmax, layer norm, embedding, nll_loss.

Contract: importing this module registers its lowerings in `nprof.compiler.ops.LOWERINGS` (same function
signature as there); each one allocates its result tensors with the lowerer and runs one NKI kernel from
`nprof.compiler.kernels` through `lw.em.call`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nprof.compiler import graphinfo
from nprof.compiler.conv_check import check_kernel
from nprof.compiler.kernels import elementwise as ew
from nprof.compiler.kernels.matmul import bmm_kernel, matmul_kernel
from nprof.compiler.kernels.norm import batch_norm_backward_kernel, batch_norm_kernel, layer_norm_kernel
from nprof.compiler.kernels.onehot import (
    embedding_backward_kernel,
    embedding_kernel,
    nll_loss_backward_kernel,
    nll_loss_kernel,
    scatter_kernel,
)
from nprof.compiler.kernels.reduce import argmax_kernel, reduce_kernel, softmax_kernel
from nprof.compiler.lower import Const, Lowerer, as_operand
from nprof.compiler.ops import LOWERINGS, as_contiguous, elementwise_op, materialize_const, register, view_of
from nprof.compiler.packing import RNG_PREFIX
from nprof.compiler.views import View, numel
from nprof.errors import UnsupportedOpError
from nprof.nki import isa as nisa

__all__ = ["LOWERINGS"]


# ----- matmul -----
def _output_through_transposes(lw: Lowerer) -> tuple[Any, bool]:
    """If the current node reaches a graph output through a chain of single-user 2-D transposes, return that
    output node and whether the chain transposes (odd length); else (None, False)."""
    node, flipped = lw.node, False
    while len(node.users) == 1:
        u = next(iter(node.users))
        is_t = str(u.target) == "aten.t.default" or (
            str(u.target) == "aten.permute.default" and list(u.args[1]) == [1, 0]
        )
        if not is_t:
            break
        node, flipped = u, not flipped
    if node is lw.node or node.name not in lw.output_tensor:
        return None, False
    return node, flipped


@register("mm.default")
def _mm(lw: Lowerer, a: Any, b: Any) -> View:
    av, bv = view_of(lw, a), view_of(lw, b)
    final, flipped = _output_through_transposes(lw)
    if final is not None:  # write straight into the graph output's layout; (a @ b).T = b.T @ a.T
        phys = lw.new_tensor(node=final)
        if flipped:
            lw.em.call(matmul_kernel, phys, bv.permute((1, 0)), av.permute((1, 0)))
            return phys.permute((1, 0))
        lw.em.call(matmul_kernel, phys, av, bv)
        return phys
    out = lw.new_tensor()
    lw.em.call(matmul_kernel, out, av, bv)
    return out


@register("addmm.default")
def _addmm(lw: Lowerer, bias: Any, a: Any, b: Any, *, beta: float = 1.0, alpha: float = 1.0) -> View:
    out = lw.new_tensor()
    bias_v = as_operand(lw, lw.value(bias), out.shape)
    if not isinstance(bias_v, View):
        bias_v = materialize_const(lw, Const(float(bias_v), out.shape, "float32"))
    lw.em.call(matmul_kernel, out, view_of(lw, a), view_of(lw, b), bias_v, float(alpha), float(beta))
    return out


@register("bmm.default")
def _bmm(lw: Lowerer, a: Any, b: Any) -> View:
    out = lw.new_tensor()
    lw.em.call(bmm_kernel, out, view_of(lw, a), view_of(lw, b))
    return out


# ----- reductions, softmax, norms -----
def _reduce(lw: Lowerer, x: Any, dims: Any, keepdim: bool, op: str, mean: bool = False) -> View:
    src = view_of(lw, x)
    nd = len(src.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = list(range(nd))
    elif isinstance(dims, int):
        dims = [dims]
    red = sorted({d % nd for d in dims}) if nd else []
    out = lw.new_tensor()
    kept_view = out.squeeze(red) if keepdim else out
    scale = 1.0 / max(numel([src.shape[d] for d in red]), 1) if mean else 1.0
    lw.em.call(reduce_kernel, kept_view, src, red, op, scale)
    return out


@register("sum.dim_IntList")
def _sum(lw: Lowerer, x: Any, dims: Any = None, keepdim: bool = False, **_: Any) -> View:
    return _reduce(lw, x, dims, keepdim, "add")


@register("sum.default")
def _sum_all(lw: Lowerer, x: Any, **_: Any) -> View:
    return _reduce(lw, x, None, False, "add")


@register("mean.dim")
def _mean(lw: Lowerer, x: Any, dims: Any = None, keepdim: bool = False, **_: Any) -> View:
    return _reduce(lw, x, dims, keepdim, "add", mean=True)


@register("mean.default")
def _mean_all(lw: Lowerer, x: Any, **_: Any) -> View:
    return _reduce(lw, x, None, False, "add", mean=True)


@register("amax.default", "any.dim", "any.dims")
def _amax(lw: Lowerer, x: Any, dims: Any = None, keepdim: bool = False) -> View:
    return _reduce(lw, x, dims, keepdim, "max")


@register("amin.default")
def _amin(lw: Lowerer, x: Any, dims: Any = None, keepdim: bool = False) -> View:
    return _reduce(lw, x, dims, keepdim, "min")


@register("_softmax.default", "_log_softmax.default")
def _softmax(lw: Lowerer, x: Any, dim: int, half_to_float: bool = False) -> View:
    out = lw.new_tensor()
    lw.em.call(softmax_kernel, out, view_of(lw, x), dim, log="log_softmax" in str(lw.node.target))
    return out


@register("native_layer_norm.default")
def _layer_norm(lw: Lowerer, x: Any, normalized_shape: Sequence[int], weight: Any, bias: Any, eps: float) -> tuple:
    src = view_of(lw, x)
    out, mean, rstd = lw.new_tensor(index=0), lw.new_tensor(index=1), lw.new_tensor(index=2)
    w = view_of(lw, weight) if weight is not None else None
    b = view_of(lw, bias) if bias is not None else None
    lw.em.call(layer_norm_kernel, out, mean, rstd, src, len(normalized_shape), w, b, float(eps))
    return out, mean, rstd


@register("_native_batch_norm_legit_functional.default")
def _batch_norm(lw: Lowerer, x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool,
                momentum: float, eps: float) -> tuple:  # fmt: skip
    """Training batch norm as one kernel (`kernels.norm.batch_norm_kernel`): (out, save_mean, save_rstd, new
    running_mean, new running_var)."""
    if not training:
        raise UnsupportedOpError("_native_batch_norm_legit_functional with training=False")
    src = view_of(lw, x)
    if src.dtype != "float32" or len(src.shape) < 2:
        raise UnsupportedOpError(f"batch norm of a {src.dtype} tensor of shape {list(src.shape)} (fp32, [N, C, ...])")
    src = src if src.is_contiguous and src.offset == 0 else as_contiguous(lw, src)
    outs = tuple(lw.new_tensor(index=k) for k in range(5))
    w, b = (view_of(lw, v) if v is not None else None for v in (weight, bias))
    running = (view_of(lw, running_mean), view_of(lw, running_var))
    lw.em.call(batch_norm_kernel, outs, src, w, b, running, float(momentum), float(eps))
    return outs


@register("native_batch_norm_backward.default")
def _batch_norm_backward(lw: Lowerer, grad: Any, x: Any, weight: Any, running_mean: Any, running_var: Any,
                         save_mean: Any, save_invstd: Any, train: bool, eps: float,
                         mask: Sequence[bool]) -> tuple:  # fmt: skip
    """Batch-norm backward as one kernel (`kernels.norm.batch_norm_backward_kernel`): (grad_input,
    grad_weight, grad_bias), None where `mask` does not ask."""
    src, g = view_of(lw, x), view_of(lw, grad)
    if src.dtype != "float32" or g.dtype != "float32" or len(src.shape) < 2:
        raise UnsupportedOpError(f"batch norm backward of a {src.dtype} tensor of shape {list(src.shape)}")
    src, g = (v if v.is_contiguous and v.offset == 0 else as_contiguous(lw, v) for v in (src, g))
    stats = (save_mean, save_invstd) if train else (running_mean, running_var)
    if any(s is None for s in stats):
        raise UnsupportedOpError("batch norm backward without its statistics")
    grads = tuple(lw.new_tensor(index=k) if mask[k] else None for k in range(3))
    w = view_of(lw, weight) if weight is not None else None
    lw.em.call(batch_norm_backward_kernel, grads, g, src, w, tuple(view_of(lw, s) for s in stats), bool(train),
               float(eps))  # fmt: skip
    return grads


# ----- index-driven ops -----
def _flat_index(lw: Lowerer, idx: Any) -> View:
    v = view_of(lw, idx)
    r = v.reshape([numel(v.shape)])
    return r if r is not None else as_contiguous(lw, v).reshape([numel(v.shape)])  # type: ignore[return-value]


def _arange_rows(lw: Lowerer, rows: int) -> tuple[int, int] | None:
    """(start, count) when the running node's index argument is ``arange(start, start + count)`` with step 1
    (a position embedding's), rows within the table's `rows`; else None."""
    node = lw.node.args[1] if len(lw.node.args) > 1 else None
    if getattr(node, "op", None) != "call_function" or not str(node.target).startswith("aten.arange."):  # type: ignore[union-attr]
        return None
    if node.kwargs.keys() & {"start", "end", "step"}:  # type: ignore[union-attr]
        return None
    nums = [a for a in node.args if isinstance(a, (int, float))]  # type: ignore[union-attr]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (*nums[:2], nums[2] if len(nums) > 2 else 1)
    if not all(isinstance(x, int) for x in (start, end, step)) or step != 1 or not 0 <= start < end <= rows:
        return None
    return int(start), int(end - start)


@register("embedding.default")
def _embedding(lw: Lowerer, weight: Any, idx: Any, padding_idx: int = -1, *_: Any) -> View:
    """Rows of the table by a one-hot matmul; rows ``start .. start + n`` of it (a view, no kernel) when the
    indices are ``arange(start, start + n)``."""
    w = view_of(lw, weight)
    span = _arange_rows(lw, w.shape[0])
    if span is not None:
        return View(w.tensor, w.dtype, (span[1], w.shape[1]), w.strides, w.offset + span[0] * w.strides[0])
    flat = _flat_index(lw, idx)
    out = lw.new_tensor()
    out2d = out.reshape([flat.shape[0], w.shape[1]])
    assert out2d is not None
    lw.em.call(embedding_kernel, out2d, w, flat)
    return out


@register("embedding_dense_backward.default")
def _embedding_backward(
    lw: Lowerer, grad: Any, idx: Any, num_weights: int, padding_idx: int, scale_grad_by_freq: bool
) -> View:
    if scale_grad_by_freq:
        raise UnsupportedOpError(lw.unsupported_message("embedding backward with scale_grad_by_freq=True"))
    flat = _flat_index(lw, idx)
    g = view_of(lw, grad)
    g2d = g.reshape([flat.shape[0], g.shape[-1]]) or as_contiguous(lw, g).reshape([flat.shape[0], g.shape[-1]])
    out = lw.new_tensor()
    lw.em.call(embedding_backward_kernel, out, g2d, flat, int(padding_idx))
    return out


def _check_nll(lw: Lowerer, logp: View, weight: Any) -> None:
    if weight is not None:
        raise UnsupportedOpError(lw.unsupported_message("nll_loss with class weights"))
    if len(logp.shape) != 2:
        raise UnsupportedOpError(lw.unsupported_message(f"nll_loss on a {len(logp.shape)}-d input (2-d only)"))


@register("nll_loss_forward.default")
def _nll_loss(lw: Lowerer, x: Any, target: Any, weight: Any, reduction: int, ignore_index: int) -> tuple:
    logp = view_of(lw, x)
    _check_nll(lw, logp, weight)
    loss, total = lw.new_tensor(index=0), lw.new_tensor(index=1)
    lw.em.call(nll_loss_kernel, loss, total, logp, _flat_index(lw, target), int(reduction), int(ignore_index))
    return loss, total


@register("nll_loss_backward.default")
def _nll_loss_backward(
    lw: Lowerer, grad: Any, x: Any, target: Any, weight: Any, reduction: int, ignore_index: int, total_weight: Any
) -> View:
    logp = view_of(lw, x)
    _check_nll(lw, logp, weight)
    out = lw.new_tensor()
    lw.em.call(nll_loss_backward_kernel, out, view_of(lw, grad), logp, _flat_index(lw, target), int(reduction),
                             int(ignore_index), view_of(lw, total_weight))  # fmt: skip
    return out


# ----- dropout (training mode) -----
@register("native_dropout.default")
def _native_dropout(lw: Lowerer, x: Any, p: float, train: bool | None) -> tuple:
    """Training-mode dropout with eager PyTorch's mask: the virtual device has no RNG engine, so the keep mask
    (0/1 in the input's dtype) enters the program as the input ``rng.<node>``, which the runtime draws on every
    execution exactly as eager CPU dropout does (``torch.empty_like(x).bernoulli_(1 - p)`` from torch's
    generator, in graph order: `runtime.draw_rng`); out = (x * mask) * (1 / (1 - p)), the scale divided in
    float32 as eager's ``noise.div_(1 - p)`` does, so the output has eager's bits for the same seed."""
    src = view_of(lw, x)
    if not train or p == 0.0:
        return src, Const(1.0, src.shape, "bool")
    if p >= 1.0:
        return Const(0.0, src.shape, "float32"), Const(0.0, src.shape, "bool")
    name = f"{RNG_PREFIX}{lw.node.name}"
    lw.em.hbm_tensor(name, src.shape, "float32", "input")
    lw.rng_draws[name] = {"bernoulli": 1.0 - float(p), "dtype": graphinfo.torch_dtype_name(lw.meta(x).dtype)}
    keep = View.whole(name, "float32", src.shape)
    mask, out = lw.new_tensor(index=1), lw.new_tensor(index=0)
    scale = float(np.float32(1.0) / np.float32(1.0 - float(p)))
    lw.em.call(ew.map_kernel, mask, [keep], ew.scalar_body("is_ge", 0.5))
    lw.em.call(ew.map_kernel, out, [src, keep], ew.binary_body("multiply", scale))
    return out, mask


# ----- prims left by torch's decompositions (var, log1p, expm1) -----
@register("prims.log1p.default")
def _log1p(lw: Lowerer, x: Any) -> Any:
    return elementwise_op(lw, [x], ew.activation_body("log", bias=1.0), lambda a: float(np.log1p(a)))


@register("prims.expm1.default")
def _expm1(lw: Lowerer, x: Any) -> Any:
    def body(ins: list[ew.Value], shape: tuple[int, ...]) -> Any:
        return nisa.tensor_scalar(nisa.activation(op="exp", data=ins[0]), "subtract", 1.0)

    return elementwise_op(lw, [x], body, lambda a: float(np.expm1(a)))


@register("prims.var.default")
def _prims_var(lw: Lowerer, x: Any, dims: Any, correction: float = 1.0, **_: Any) -> View:
    """var = sum((x - mean)^2) / (n - correction): a row mean, a squared difference, a scaled row sum."""
    src = view_of(lw, x)
    nd = len(src.shape)
    red = sorted({d % nd for d in dims}) if dims else list(range(nd))
    n = numel(src.shape[d] for d in red)
    kept_shape = tuple(1 if d in red else s for d, s in enumerate(src.shape))
    mean = lw.temp_tensor(kept_shape, "float32")
    lw.em.call(reduce_kernel, mean.squeeze(red), src, red, "add", 1.0 / n)
    sq = lw.temp_tensor(src.shape, "float32")
    centred = [src, as_operand(lw, mean, src.shape)]
    lw.em.call(ew.map_kernel, sq, centred, _squared_difference)
    out = lw.new_tensor()
    lw.em.call(reduce_kernel, out, sq, red, "add", 1.0 / max(n - float(correction), 1e-30))
    # a non-finite variance runs the call eagerly: the squares overflow float32 from |x - mean| > 1.8e19, where
    # eager's (float64) sums do not (std = sqrt(var) of values near 1e30 is finite in eager)
    lw.em.call(check_kernel, as_contiguous(lw, out), "nonfinite_check")
    return out


def _squared_difference(ins: list[ew.Value], shape: tuple[int, ...]) -> Any:
    d = ew.binary_body("subtract")(ins, shape)
    return nisa.activation(op="square", data=d)


_squared_difference.accepts_columns = True  # type: ignore[attr-defined]


@register("max.dim", "argmax.default")
def _max_dim(lw: Lowerer, x: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    src = view_of(lw, x)
    if dim is None:  # argmax over the flattened tensor
        flat = as_contiguous(lw, src).reshape([numel(src.shape)])
        assert flat is not None
        src, dim = flat, 0
    dim %= max(len(src.shape), 1)

    def kept(v: View) -> View:
        return v.squeeze([dim]) if keepdim and len(v.shape) == len(src.shape) else v

    if "argmax" in str(lw.node.target):
        idx = lw.new_tensor()
        lw.em.call(argmax_kernel, None, kept(idx), src, dim)
        return idx
    values, idx = lw.new_tensor(index=0), lw.new_tensor(index=1)
    lw.em.call(argmax_kernel, kept(values), kept(idx), src, dim)
    return values, idx


@register("split_with_sizes.default", "split.Tensor")
def _split(lw: Lowerer, x: Any, sizes: Any, dim: int = 0) -> tuple:
    v = view_of(lw, x)
    dim %= len(v.shape)
    total = v.shape[dim]
    if isinstance(sizes, int):
        sizes = [min(sizes, total - start) for start in range(0, total, sizes)]
    parts, start = [], 0
    for size in sizes:
        parts.append(v.slice(dim, start, start + int(size)))
        start += int(size)
    return tuple(parts)


@register("scatter.src", "scatter.value")
def _scatter(lw: Lowerer, base: Any, dim: int, index: Any, src: Any) -> View:
    """Scatter with one index per row along `dim` (what max/argmax backward and one-hot targets produce)."""
    out = lw.new_tensor()
    dim %= len(out.shape)
    idx = view_of(lw, index)
    if idx.shape[dim] != 1 or any(
        a != b for d, (a, b) in enumerate(zip(idx.shape, out.shape, strict=True)) if d != dim
    ):
        raise UnsupportedOpError(lw.unsupported_message("scatter with more than one index per row"))
    base_v = as_operand(lw, lw.value(base), out.shape)
    src_v = lw.value(src)
    src_op = float(src_v.value) if isinstance(src_v, Const) else src_v
    if isinstance(src_op, View):
        src_op = src_op.expand(idx.shape) if src_op.shape != idx.shape else src_op
    elif not isinstance(src_op, float):
        src_op = float(src_op)
    lw.em.call(scatter_kernel, out, base_v, idx, src_op, dim)
    return out


# ----- prims reductions and casts (left by torch's batch-norm / pooling decompositions) -----
@register("prims.sum.default")
def _prims_sum(lw: Lowerer, x: Any, dims: Any, **_: Any) -> View:
    return _reduce(lw, x, list(dims) if dims is not None else None, False, "add")


@register("prims.amax.default")
def _prims_amax(lw: Lowerer, x: Any, dims: Any, **_: Any) -> View:
    return _reduce(lw, x, list(dims) if dims is not None else None, False, "max")


@register("prims.convert_element_type.default")
def _convert(lw: Lowerer, x: Any, dtype: Any) -> Any:
    from nprof.compiler.ops import to_copy

    return to_copy(lw, x, dtype=dtype)
