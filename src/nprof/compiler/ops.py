"""The op registry: which ATen ops the compiler lowers, and how.

Contract: `LOWERINGS` maps an ATen overload name (``"aten.addmm.default"``) to a function
``(lowerer, *node.args, **node.kwargs) -> value`` where value is a `View` (HBM tensor window), a `Const`, a
tuple of those (multi-output ops) or a Python scalar. `lookup(target)` finds the entry for an FX node target.
`DECOMPOSE_SKIP` lists ops kept whole although core-ATen decompositions exist (they have a better kernel
here). `supported_ops()` is the coverage table (sorted op names). Anything not here raises
`UnsupportedOpError` (see `lower.py`). The other lowerings live in `ops_nn`, `ops_conv`, `ops_pool`,
`ops_index`, `ops_attn` and `collectives`, which register into the same table; `nprof.compiler.lowerings`
imports them all (ask it, not this module, for a complete table).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nprof.compiler.kernels import elementwise as ew
from nprof.compiler.kernels.matmul import copy_kernel
from nprof.compiler.kernels.onehot import (
    iota_kernel,
)
from nprof.compiler.lower import Const, Lowerer, as_operand
from nprof.compiler.views import View
from nprof.errors import UnsupportedOpError
from nprof.nki import isa as nisa

Lowering = Callable[..., Any]
LOWERINGS: dict[str, Lowering] = {}

# ops outside the core-ATen set that torch knows how to decompose into ops lowered here
EXTRA_DECOMPOSITIONS = (
    "var", "var_mean", "linalg_vector_norm", "leaky_relu", "elu", "hardtanh", "log1p", "expm1",
    "_native_batch_norm_legit", "native_batch_norm",
    "_native_batch_norm_legit_no_training", "_adaptive_avg_pool2d",
)  # fmt: skip
DECOMPOSE_SKIP = (
    "split",
    "nll_loss_forward",
    "nll_loss_backward",
    "embedding_dense_backward",
    "slice_scatter",
    "select_scatter",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_native_batch_norm_legit_functional",  # training batch norm: one fused kernel (ops_nn, kernels.norm)
    "native_batch_norm_backward",  # and its backward
)


def register(*names: str) -> Callable[[Lowering], Lowering]:
    def deco(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name if name.startswith(("<", "_c10d_functional.", "prims.")) else f"aten.{name}"] = fn
        return fn

    return deco


def lookup(target: Any) -> Lowering | None:
    if target is operator.getitem:
        return _getitem
    return LOWERINGS.get(str(target))


def supported_ops() -> list[str]:
    return sorted(name.removeprefix("aten.") for name in LOWERINGS)


def _getitem(lw: Lowerer, value: Any, index: int) -> Any:
    return lw.value(value)[index]


def view_of(lw: Lowerer, x: Any) -> View:
    v = lw.value(x)
    if isinstance(v, Const):
        return materialize_const(lw, v)
    if not isinstance(v, View):
        raise UnsupportedOpError(lw.unsupported_message(f"a {type(v).__name__} operand"))
    return v


def materialize_const(lw: Lowerer, c: Const) -> View:
    out = lw.temp_tensor(c.shape, c.dtype)
    lw.em.call(ew.map_kernel, out, [float(c.value)], ew.copy_body)
    return out


def as_contiguous(lw: Lowerer, v: View) -> View:
    if v.is_contiguous:
        return v
    out = lw.temp_tensor(v.shape, v.dtype)  # program dtype names are torch dtype names too
    lw.em.call(copy_kernel, out, v)
    return out


# ----- views (metadata only) -----
@register("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default")
def _reshape(lw: Lowerer, x: Any, shape: Sequence[int]) -> Any:
    v = lw.value(x)
    if isinstance(v, Const):
        return Const(v.value, tuple(int(s) for s in lw.meta().shape), v.dtype)
    r = view_of(lw, x).reshape(shape)
    if r is None:
        r = as_contiguous(lw, view_of(lw, x)).reshape(shape)
    assert r is not None
    return r


@register("permute.default")
def _permute(lw: Lowerer, x: Any, dims: Sequence[int]) -> View:
    return view_of(lw, x).permute(dims)


@register("t.default")
def _t(lw: Lowerer, x: Any) -> View:
    v = view_of(lw, x)
    return v.permute((1, 0)) if len(v.shape) == 2 else v


@register("transpose.int")
def _transpose(lw: Lowerer, x: Any, d0: int, d1: int) -> View:
    v = view_of(lw, x)
    dims = list(range(len(v.shape)))
    d0, d1 = d0 % len(dims), d1 % len(dims)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return v.permute(dims)


@register("expand.default")
def _expand(lw: Lowerer, x: Any, shape: Sequence[int], implicit: bool = False) -> Any:
    v = lw.value(x)
    if isinstance(v, Const):
        return Const(v.value, tuple(int(s) for s in lw.meta().shape), v.dtype)
    return as_operand(lw, v, tuple(int(s) for s in lw.meta().shape))


@register("unsqueeze.default")
def _unsqueeze(lw: Lowerer, x: Any, dim: int) -> View:
    return view_of(lw, x).unsqueeze(dim)


@register("squeeze.default", "squeeze.dim", "squeeze.dims")
def _squeeze(lw: Lowerer, x: Any, dims: Any = None) -> View:
    if isinstance(dims, int):
        dims = [dims]
    return view_of(lw, x).squeeze(dims)


@register("select.int")
def _select(lw: Lowerer, x: Any, dim: int, index: int) -> View:
    return view_of(lw, x).select(dim, index)


@register("slice.Tensor")
def _slice(lw: Lowerer, x: Any, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1) -> View:
    v = view_of(lw, x)
    size = v.shape[dim]
    return v.slice(dim, 0 if start is None else start, size if end is None else min(end, size), step)


@register("alias.default", "detach.default", "clone.default", "lift_fresh_copy.default", "contiguous.default")
def _alias(lw: Lowerer, x: Any, **_: Any) -> Any:
    return lw.value(x)


@register("_to_copy.default")
def to_copy(lw: Lowerer, x: Any, **kwargs: Any) -> Any:
    v = lw.value(x)
    val = lw.meta()
    if isinstance(v, Const):
        return Const(v.value, tuple(int(s) for s in val.shape), str(val.dtype).removeprefix("torch."))
    src = view_of(lw, x)
    out = lw.new_tensor()
    if out.dtype == src.dtype and "dtype" not in kwargs:
        return src
    lw.em.call(copy_kernel, out, src)
    return out


@register("cat.default")
def _cat(lw: Lowerer, tensors: Sequence[Any], dim: int = 0) -> View:
    out = lw.new_tensor()
    dim %= len(out.shape)
    start = 0
    for t in tensors:
        shape = t.meta["val"].shape
        if 0 in shape:  # an empty tensor (torch's cat skips 1-D (0,) tensors of any rank)
            continue
        v = lw.value(t)
        n = int(shape[dim])
        dst = out.slice(dim, start, start + n)
        lw.em.call(copy_kernel, dst, as_operand(lw, v, dst.shape))
        start += n
    return out


@register("slice_scatter.default", "select_scatter.default")
def _scatter_into(lw: Lowerer, base: Any, src: Any, dim: int = 0, *args: Any) -> View:
    """A copy of `base` with `src` written into base[..., start:end:step, ...] (or base.select(dim, index))."""
    out = lw.new_tensor()
    lw.em.call(copy_kernel, out, as_operand(lw, lw.value(base), out.shape))
    if "select_scatter" in str(lw.node.target):
        dst = out.select(dim, int(args[0]))
    else:
        start, end, step = [*args, None, None, 1][:3]
        size = out.shape[dim % len(out.shape)]
        dst = out.slice(dim, 0 if start is None else start, size if end is None else min(end, size), step or 1)
    lw.em.call(copy_kernel, dst, as_operand(lw, lw.value(src), dst.shape))
    return out


# ----- constants -----
def _const(lw: Lowerer, value: Any) -> Const:
    val = lw.meta()
    return Const(float(value), tuple(int(s) for s in val.shape), str(val.dtype).removeprefix("torch."))


@register("full.default", "full_like.default", "new_full.default")
def _full(lw: Lowerer, *args: Any, **_: Any) -> Const:
    return _const(lw, args[-1])  # full(size, v), full_like(x, v), new_full(x, size, v)


@register("scalar_tensor.default")
def _scalar_tensor(lw: Lowerer, value: Any, **_: Any) -> Const:
    return _const(lw, value)


@register("zeros.default", "zeros_like.default", "new_zeros.default", "empty_like.default", "empty.memory_format")
def _zeros(lw: Lowerer, *_: Any, **__: Any) -> Const:
    return _const(lw, 0.0)


@register("ones.default", "ones_like.default", "new_ones.default")
def _ones(lw: Lowerer, *_: Any, **__: Any) -> Const:
    return _const(lw, 1.0)


@register("arange.default", "arange.start", "arange.start_step")
def _arange(lw: Lowerer, *args: Any, **_: Any) -> View:
    nums = [a for a in args if isinstance(a, (int, float))]
    start, step = (0.0, 1.0) if len(nums) == 1 else (float(nums[0]), float(nums[2]) if len(nums) > 2 else 1.0)
    out = lw.new_tensor()
    if float(start).is_integer() and float(step).is_integer():
        lw.em.call(iota_kernel, out, start, step)
    else:
        tmp = lw.temp_tensor(lw.meta().shape, "float32")
        lw.em.call(iota_kernel, tmp, 0.0, 1.0)
        lw.em.call(ew.map_kernel, out, [tmp], ew.scalar_body("multiply", step, "add", start))
    return out


# ----- elementwise -----
_NUMPY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "power": np.power, "is_equal": np.equal, "not_equal": np.not_equal,
    "is_ge": np.greater_equal, "is_gt": np.greater, "is_le": np.less_equal, "is_lt": np.less,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "mod": np.mod, "fmod": np.fmod,
}  # fmt: skip


def elementwise_op(lw: Lowerer, args: Sequence[Any], body: ew.Body, fold: Callable[..., float] | None = None) -> Any:
    val = lw.meta()
    shape = tuple(int(s) for s in val.shape)
    ops = [as_operand(lw, lw.value(a), shape) for a in args]
    if not any(isinstance(o, View) for o in ops):
        if fold is None:
            return _materialize_or_const(lw, ops, body)
        return _const(lw, fold(*ops))
    out = lw.new_tensor()
    lw.em.call(ew.map_kernel, out, ops, body)
    return out


def _materialize_or_const(lw: Lowerer, ops: list[Any], body: ew.Body) -> View:
    shape = tuple(int(s) for s in lw.meta().shape)
    src = lw.temp_tensor(shape, "float32")
    lw.em.call(ew.map_kernel, src, [float(ops[0])], ew.copy_body)
    out = lw.new_tensor()
    lw.em.call(ew.map_kernel, out, [src, *ops[1:]], body)
    return out


def _unary(name: str, func: str) -> None:
    def lower(lw: Lowerer, x: Any, *_: Any, **__: Any) -> Any:
        return elementwise_op(lw, [x], ew.activation_body(func))

    register(f"{name}.default", f"prims.{name}.default")(lower)


for _name, _func in ew.ACTIVATIONS.items():
    _unary(_name, _func)


def _sign_body(ins: list[Any], shape: tuple[int, ...]) -> Any:
    """(x > 0) - (x < 0): torch's sign, 0 for NaN (the Sign activation's numerics give NaN there)."""
    below = nisa.tensor_scalar(ins[0], "is_lt", 0.0)
    return nisa.scalar_tensor_tensor(data=ins[0], op0="is_gt", operand0=0.0, op1="subtract", operand1=below)


@register("sign.default", "prims.sign.default", "sgn.default")
def _sign(lw: Lowerer, x: Any) -> Any:
    return elementwise_op(lw, [x], _sign_body, lambda a: float((a > 0) - (a < 0)))


@register("gelu.default")
def _gelu(lw: Lowerer, x: Any, approximate: str = "none") -> Any:
    if approximate == "none":
        return elementwise_op(lw, [x], ew.gelu_body)  # eager's inf/NaN at +-inf and above FLT_MAX / 2
    return elementwise_op(lw, [x], ew.activation_body("gelu_apprx_tanh"))


@register("reciprocal.default")
def _reciprocal(lw: Lowerer, x: Any) -> Any:
    return elementwise_op(lw, [x], ew.reciprocal_body, lambda a: 1.0 / a)


@register("logical_not.default", "bitwise_not.default")
def _not(lw: Lowerer, x: Any) -> Any:
    return elementwise_op(lw, [x], ew.scalar_body("is_equal", 0.0), lambda a: float(a == 0))


@register("pow.Tensor_Scalar")
def _pow(lw: Lowerer, x: Any, exponent: float) -> Any:
    if exponent == 2:
        return elementwise_op(lw, [x], ew.activation_body("square"), lambda a: a * a)
    if exponent == 0.5:
        return elementwise_op(lw, [x], ew.activation_body("sqrt"), np.sqrt)
    if exponent == -0.5:
        return elementwise_op(lw, [x], ew.activation_body("rsqrt"), lambda a: a**-0.5)
    return elementwise_op(lw, [x], ew.scalar_body("power", float(exponent)), lambda a: a**exponent)


def _binary(name: str, alu: str) -> None:
    def lower(lw: Lowerer, a: Any, b: Any, *, alpha: float = 1.0, **_: Any) -> Any:
        body = ew.mod_body(alu) if alu in ("mod", "fmod") else ew.binary_body(alu, float(alpha))
        return elementwise_op(lw, [a, b], body, lambda x, y: float(_NUMPY[alu](x, alpha * y)))

    register(f"{name}.Tensor", f"{name}.Scalar", f"{name}.default", f"prims.{name}.default")(lower)


for _name, _alu in ew.BINARY.items():
    _binary(_name, _alu)


@register("rsub.Scalar", "rsub.Tensor")
def _rsub(lw: Lowerer, a: Any, b: Any, alpha: float = 1.0) -> Any:
    return elementwise_op(lw, [b, a], ew.binary_body("subtract", float(alpha)), lambda x, y: x - alpha * y)


@register("where.self", "prims.where.default")
def _where(lw: Lowerer, cond: Any, a: Any, b: Any) -> Any:
    return elementwise_op(lw, [cond, a, b], ew.where_body, lambda c, x, y: x if c else y)


@register("clamp.default", "clamp_min.default", "clamp_max.default")
def _clamp(lw: Lowerer, x: Any, lo: float | None = None, hi: float | None = None) -> Any:
    if "clamp_max" in str(lw.node.target):
        lo, hi = None, lo
    lo_f = None if lo is None else float(lo)
    hi_f = None if hi is None else float(hi)
    return elementwise_op(lw, [x], ew.clamp_body(lo_f, hi_f), lambda a: float(np.clip(a, lo_f, hi_f)))


@register("threshold_backward.default")
def _threshold_backward(lw: Lowerer, grad: Any, x: Any, threshold: float) -> Any:
    mask = elementwise_op(lw, [x], ew.scalar_body("is_gt", float(threshold)), lambda a: float(a > threshold))
    return elementwise_op(lw, [grad, mask], ew.binary_body("multiply"))


# ----- torch.distributed functional collectives (nprof.compiler.collectives) -----
def _register_collectives() -> None:
    from nprof.compiler.collectives import register_collectives

    register_collectives(LOWERINGS)


_register_collectives()


@register("prims.broadcast_in_dim.default")
def _broadcast_in_dim(lw: Lowerer, x: Any, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Any:
    v = lw.value(x)
    if isinstance(v, Const):
        return Const(v.value, tuple(int(s) for s in shape), v.dtype)
    src = view_of(lw, x)
    strides = [0] * len(shape)
    for k, d in enumerate(broadcast_dimensions):
        strides[d] = src.strides[k] if src.shape[k] == shape[d] else 0
    return View(src.tensor, src.dtype, tuple(int(s) for s in shape), tuple(strides), src.offset)


@register("constant_pad_nd.default")
def _constant_pad(lw: Lowerer, x: Any, pad: Sequence[int], value: float = 0.0) -> View:
    """A `value`-filled tensor with `x` copied into its interior (negative pads crop `x`)."""
    src = view_of(lw, x)
    out = lw.new_tensor()
    lw.em.call(ew.map_kernel, out, [float(value)], ew.copy_body)
    dst = out
    for k in range(len(pad) // 2):
        dim = len(src.shape) - 1 - k
        lo, hi = int(pad[2 * k]), int(pad[2 * k + 1])
        src = src.slice(dim, max(0, -lo), src.shape[dim] - max(0, -hi))
        dst = dst.slice(dim, max(0, lo), max(0, lo) + src.shape[dim])
    lw.em.call(copy_kernel, dst, src)
    return out
