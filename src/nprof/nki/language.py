"""`nprof.nki.language` (import as `nl`): the NKI language, traced into Program instructions.

Mirrors `neuronxcc.nki.language` so a kernel runs after changing its imports:
memory buffers (`nl.sbuf`, `nl.psum`, `nl.shared_hbm`, `nl.hbm`,
`nl.private_hbm`, `nl.par_dim`), dtypes, tile creation (`ndarray`, `zeros`,
`ones`, `full`, `empty`, `*_like`), index helpers (`arange`, `mgrid`),
loops (`affine_range`, `sequential_range`, `static_range` — all unrolled at
trace time, each affine/sequential iteration starting from the Python state
before the loop as NKI traces their body once (`nprof.nki.scopes`);
dependencies come from the data, so a sequential loop's carried values stay
ordered and an affine loop's iterations overlap), `load`/`store`
(DMA with affine indices and `mask=`), elementwise math (ScalarE activations,
VectorE arithmetic), free-axis reductions, `matmul`, `transpose`,
`softmax`, `copy`, `where`. Every function raises KernelError (with the
kernel's `file:line`) for invalid use. Elementwise ops default their result
dtype to the (promoted) input dtype.
"""

from __future__ import annotations

import math
import sys as _sys
from typing import Any

import numpy as np

from nprof.arch.isa import Engine, Opcode, Space
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.assign import assign
from nprof.nki.buffers import Buffer as _Buffer
from nprof.nki.dtypes import (  # noqa: F401  (re-exported as nl.<dtype>)
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from nprof.nki.index import IndexExpr, Predicate, arange, mgrid  # noqa: F401
from nprof.nki.masks import mark_operand, operand_box
from nprof.nki.scopes import Loop as _Loop
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, mask_box

sbuf = _Buffer("sbuf", Space.SBUF)
psum = _Buffer("psum", Space.PSUM)
hbm = _Buffer("hbm", Space.HBM)
shared_hbm = _Buffer("shared_hbm", Space.HBM)
private_hbm = _Buffer("private_hbm", Space.HBM)


class par_dim(int):
    """Marks the partition axis inside a tile shape: `(4, nl.par_dim(128), 512)`."""


class tile_size:
    """Hardware tile limits (NeuronCore-v2/v3)."""

    pmax = 128  # partitions of any tile
    psum_fmax = 512  # fp32 elements of one PSUM bank per partition
    gemm_stationary_fmax = 128  # free size of the matmul stationary operand
    gemm_moving_fmax = 512  # free size of the matmul moving operand
    bn_stats_fmax = 512  # free elements one nisa.bn_stats reads


def affine_range(start: int, stop: int | None = None, step: int = 1, *, directives: Any = None) -> Any:
    """Loop with no carried dependency (iterations may overlap); unrolled at trace time (`nprof.nki.scopes`).
    `directives` (e.g. `nki.compiler.multi_buffer(2)`) are compiler hints: accepted, they warn (not modelled)."""
    if directives is not None:
        from nprof.nki.calls import unmodelled

        unmodelled("nl.affine_range", "directives", "tiles are allocated as declared")
    return _Loop(range(start, stop, step) if stop is not None else range(start))


sequential_range = affine_range


def static_range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Loop unrolled at trace time (a plain range)."""
    return range(start, stop, step) if stop is not None else range(start)


def program_id(axis: int = 0) -> int:
    """Index of this SPMD instance along `axis` of the launch grid (`kernel[grid](...)`); 0 without a grid."""
    builder = _trace.current()
    return builder.program_id[axis] if axis < len(builder.program_id) else 0


def num_programs(axes: int | None = None) -> int:
    """Launch-grid size along `axes` (all instances when None); 1 without a grid."""
    grid = _trace.current().grid
    if axes is None:
        return math.prod(grid) if grid else 1
    return grid[axes] if axes < len(grid) else 1


def program_ndim() -> int:
    return len(_trace.current().grid)


def ds(start: Any, size: int) -> Any:
    """The slice `start:start+size` (NKI's dynamic slice); a one-element SBUF tile as `start` is read at run
    time (`nprof.nki.indirect.DynSlice`)."""
    if isinstance(start, NkiTensor):
        from nprof.nki.indirect import DynSlice

        return DynSlice(start, int(size))
    return slice(int(start), int(start) + int(size))


# -- creation -----------------------------------------------------------------------------------
def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "") -> NkiTensor:
    """An uninitialised tensor: a tile in SBUF (default) / PSUM, or a new HBM tensor."""
    builder = _trace.current()
    buf = buffer if buffer is not None else sbuf
    if not isinstance(buf, _Buffer):
        raise kernel_error(f"buffer= must be nl.sbuf, nl.psum or nl.shared_hbm, got {buf!r}")
    shape = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    dt = _c.dname(dtype)
    if buf.space is Space.HBM:
        hint = name or ("out" if buf is shared_hbm else "scratch")
        if buf is shared_hbm:
            return builder.shared_tensor(hint, tuple(int(s) for s in shape), dt)
        return builder.hbm_tensor(builder.unique_name(hint), shape, dt, kind="internal")
    direct = buf if getattr(buf, "request", None) is not None else None  # nki.compiler: placed as given
    axis = next((k for k, s in enumerate(shape) if isinstance(s, par_dim)), 0)
    return builder.alloc(tuple(int(s) for s in shape), dt, buf.space, name, axis, direct=direct)


empty = ndarray


def full(shape: Any, fill_value: float, dtype: Any, buffer: Any = None, name: str = "", *,
         lazy_initialization: bool = False) -> NkiTensor:  # fmt: skip
    """A new tile filled with `fill_value` (one memset); `lazy_initialization=True` (a compiler hint to fold
    the fill into the first write) warns: the memset is still emitted."""
    if lazy_initialization:
        from nprof.nki.calls import unmodelled

        unmodelled("nl.full/zeros/ones", "lazy_initialization", "the fill is emitted as a memset")
    t = ndarray(shape, dtype, buffer, name)
    if t.is_hbm:
        raise kernel_error("filled HBM tensors are not supported; fill an SBUF tile and nl.store it")
    assign(t, float(fill_value))  # (`t[...] = value`: the whole new tile is the view `t` itself)
    return t


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", *,
          lazy_initialization: bool = False) -> NkiTensor:  # fmt: skip
    return full(shape, 0.0, dtype, buffer, name, lazy_initialization=lazy_initialization)


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", *,
         lazy_initialization: bool = False) -> NkiTensor:  # fmt: skip
    return full(shape, 1.0, dtype, buffer, name, lazy_initialization=lazy_initialization)


def zeros_like(a: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return zeros(a.shape, dtype or a.dtype, buffer, name)


def ones_like(a: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return ones(a.shape, dtype or a.dtype, buffer, name)


def empty_like(a: NkiTensor, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return ndarray(a.shape, dtype or a.dtype, buffer, name)


def full_like(a: NkiTensor, fill_value: float, dtype: Any = None, buffer: Any = None, name: str = "") -> NkiTensor:
    return full(a.shape, fill_value, dtype or a.dtype, buffer, name)


# -- memory movement ----------------------------------------------------------------------------
def _hbm_view(x: Any, what: str) -> NkiTensor:
    if not isinstance(x, NkiTensor) or not x.is_hbm:
        raise kernel_error(f"{what} must be an HBM tensor (a kernel argument or buffer=nl.shared_hbm)")
    return x


def load(src: Any, *, mask: Predicate | None = None, dtype: Any = None) -> NkiTensor:
    """DMA `src` (an indexed HBM tensor) into a new SBUF tile of the same shape."""
    if hasattr(src, "dyn_attrs"):  # indexed with runtime values: an indirect DMA (nprof.nki.indirect_ops)
        from nprof.nki.indirect_ops import load_indirect

        return load_indirect(src, mask, dtype)
    src = _hbm_view(src, "nl.load source")
    shape = src.shape if src.ndim else (1, 1)
    builder = _trace.current()
    dst = builder.alloc(shape, _c.dname(dtype) if dtype is not None else src.dtype_name, Space.SBUF)
    box = mask_box(mask, shape) if mask is not None else None
    masked = src.masked(mask)
    masked.check_bounds()  # fail here, at the user's line, not when the DMA is committed
    builder.set_pending_load(masked, dst, box)  # committed before the next instruction
    return dst


def store(dst: Any, value: Any, *, mask: Predicate | None = None) -> None:
    """DMA the tile `value` into `dst` (an indexed HBM tensor); a PSUM tile is first copied to SBUF."""
    if hasattr(dst, "dyn_attrs"):  # indexed with runtime values: an indirect DMA (nprof.nki.indirect_ops)
        from nprof.nki.indirect_ops import store_indirect

        store_indirect(dst, value, mask)
        return
    dst = _hbm_view(dst, "nl.store destination")
    if _c.is_scalar(value):
        value = full(dst.shape, float(value), dst.dtype)
    value = _c.tile(value, "nl.store value")
    if value.space is Space.PSUM:
        value = _c.copy(value, dtype=dst.dtype)
    parts = dst.shape[0] if dst.ndim else 1
    if value.shape != dst.shape and (value.shape[0] != parts or _numel(value.shape) != _numel(dst.shape)):
        raise kernel_error(f"nl.store: value of shape {value.shape} does not match destination {dst.shape}")
    d = dst.masked(mask)
    v = value.masked(mask, value.shape) if mask is not None else value
    _trace.current().dma(d, v)


def load_transpose2d(src: Any, *, mask: Predicate | None = None, dtype: Any = None) -> NkiTensor:
    """Load a 2-D HBM view [M, K] transposed into an SBUF tile [K, M] (a DMA with a transposing pattern)."""
    if hasattr(src, "dyn_attrs"):
        raise kernel_error(
            "nl.load_transpose2d does not take runtime indices (NKI: "
            "err_indirect_indices_are_not_supported_with_nki_api); nl.load the rows, then transpose"
        )
    src = _hbm_view(src, "nl.load_transpose2d source")
    if src.ndim != 2:
        raise kernel_error(f"nl.load_transpose2d takes a 2-D view, got shape {src.shape}")
    return load(src.transpose2d(), dtype=dtype, mask=mask)


def shared_identity_matrix(n: int, dtype: Any = uint8) -> NkiTensor:
    """An [n, n] identity matrix as an HBM constant of the Program."""
    builder = _trace.current()
    dt = _c.dname(dtype)
    name = f"identity_{n}_{dt}"
    if name in builder.tensors():
        return NkiTensor.root(builder.tensors()[name])
    return builder.hbm_tensor(name, (n, n), dt, kind="weight", value=np.eye(n, dtype=np.float32))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def copy(src: Any, *, mask: Predicate | None = None, dtype: Any = None) -> NkiTensor:
    """A copy of tile `src` (VectorE TENSOR_COPY), optionally cast to `dtype`."""
    return _c.copy(src, dtype=dtype, mask=mask)


# -- elementwise --------------------------------------------------------------------------------
def _act(func: str) -> Any:
    def op(x: Any, *, dtype: Any = None, mask: Predicate | None = None) -> NkiTensor:
        return _c.activation(func, x, dtype=dtype, mask=mask)

    op.__name__ = op.__qualname__ = func
    op.__doc__ = f"Elementwise {func} on ScalarE (ACTIVATE)."
    op._nki_act = func  # type: ignore[attr-defined]
    return op


def _alu(name: str, alu: str, default_dtype: Any = None) -> Any:
    def op(x: Any, y: Any, *, dtype: Any = default_dtype, mask: Predicate | None = None) -> Any:
        return _c.binary(alu, x, y, dtype=dtype, mask=mask)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {alu} of tiles/scalars on VectorE (TENSOR_TENSOR or TENSOR_SCALAR)."
    op._nki_alu = alu  # type: ignore[attr-defined]
    return op


exp, log, tanh, sigmoid, relu = (_act(f) for f in ("exp", "log", "tanh", "sigmoid", "relu"))
gelu, gelu_apprx_tanh, silu, sqrt, rsqrt = (_act(f) for f in ("gelu", "gelu_apprx_tanh", "silu", "sqrt", "rsqrt"))
reciprocal, square, sign, erf, softplus = (_act(f) for f in ("reciprocal", "square", "sign", "erf", "softplus"))
sin, cos, negative = _act("sin"), _act("cos"), _act("negative")
abs = _act("abs")

add, subtract, multiply, divide = (_alu(n, n) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power = _alu("maximum", "maximum"), _alu("minimum", "minimum"), _alu("power", "power")
# comparisons and logical ops give bool_ (uint8 0/1) tiles unless dtype= says otherwise, as in NKI
equal, not_equal = _alu("equal", "is_equal", bool_), _alu("not_equal", "not_equal", bool_)
greater, greater_equal = _alu("greater", "is_gt", bool_), _alu("greater_equal", "is_ge", bool_)
less, less_equal = _alu("less", "is_lt", bool_), _alu("less_equal", "is_le", bool_)
logical_and, logical_or = _alu("logical_and", "logical_and", bool_), _alu("logical_or", "logical_or", bool_)
bitwise_and, bitwise_or = _alu("bitwise_and", "bitwise_and"), _alu("bitwise_or", "bitwise_or")


# -- reductions ---------------------------------------------------------------------------------
def _red(name: str, op: str) -> Any:
    def fn(x: Any, axis: Any, *, dtype: Any = None, mask: Predicate | None = None,
           keepdims: bool = False) -> NkiTensor:  # fmt: skip
        return _c.reduce(op, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{name} over free axes `axis` (VectorE TENSOR_REDUCE)."
    fn._nki_reduce = op  # type: ignore[attr-defined]
    return fn


sum = _red("sum", "add")
max = _red("max", "max")
min = _red("min", "min")
prod = _red("prod", "multiply")
max._nki_alu, min._nki_alu = "maximum", "minimum"


def mean(x: Any, axis: Any, *, dtype: Any = None, mask: Predicate | None = None,
         keepdims: bool = False) -> NkiTensor:  # fmt: skip
    """Mean over free axes: a sum (TENSOR_REDUCE) scaled by 1/n (TENSOR_SCALAR)."""
    t = _c.tile(x)
    total = _c.reduce("add", t, axis, dtype=dtype, mask=mask, keepdims=keepdims)
    n = _numel(tuple(t.shape[a] for a in _c._axes(axis, t.ndim)))
    return _c.tensor_scalar(total, "multiply", 1.0 / n, out=total)


# -- matmul, transpose, softmax, where ----------------------------------------------------------
def _sbuf(x: NkiTensor) -> NkiTensor:
    return _c.copy(x) if x.space is Space.PSUM else x


def matmul(x: Any, y: Any, *, transpose_x: bool = False, mask: Predicate | None = None) -> NkiTensor:
    """x @ y into a PSUM tile (fp32). Without transpose_x, x [M, K] is first transposed on TensorE."""
    from nprof.nki import isa as _isa

    x, y = _c.tile(x, "matmul x", masked_ok=True), _c.tile(y, "matmul y", masked_ok=True)
    x_mask, y_mask = operand_box(x), operand_box(y)
    x, y = (_sbuf(t if m is None else t.restrict([(0, s) for s in t.shape])) for t, m in ((x, x_mask), (y, y_mask)))
    stationary = x if transpose_x else transpose(x)
    for tile_, m, swap in ((stationary, x_mask, not transpose_x), (y, y_mask, False)):
        if m is not None:  # a masked operand stays masked through the SBUF copy / transpose (NKI API Masking)
            full, box = m
            mark_operand(tile_, full[::-1] if swap else full, box[::-1] if swap else box)
    return _isa.nc_matmul(stationary, y, mask=mask)


def transpose(x: Any, *, dtype: Any = None, mask: Predicate | None = None) -> NkiTensor:
    """x.T of a 2-D tile, through TensorE (TRANSPOSE into PSUM, then copied back to SBUF)."""
    from nprof.nki import isa as _isa

    t = _isa.nc_transpose(_sbuf(_c.tile(x, "transpose input")), mask=mask)
    return _c.copy(t, dtype=dtype if dtype is not None else x.dtype)


def softmax(x: Any, axis: Any = -1, *, dtype: Any = None, compute_dtype: Any = None,
            mask: Predicate | None = None) -> NkiTensor:  # fmt: skip
    """Softmax over the free axes: max (negated) -> exp(x - max) with a sum -> reciprocal -> scale."""
    t = _c.tile(x, "softmax input")
    axes = _c._axes(axis, t.ndim)
    if axes != tuple(range(1, t.ndim)):
        raise kernel_error("nl.softmax reduces over all free axes of the tile; reshape or transpose first")
    parts = t.shape[0]
    neg_max = _c.reduce("max", t, axes, dtype=float32, mask=mask, keepdims=True, negate=True)
    total = _trace.current().alloc((parts, 1), "float32", Space.SBUF)
    e = _c.activation("exp", t, bias=neg_max, dtype=float32, mask=mask, reduce_op="add", reduce_res=total)
    inv = _trace.current().alloc((parts, 1), "float32", Space.SBUF)
    _c.emit(Engine.VECTOR, Opcode.RECIPROCAL, [inv], [total])
    return _c.tensor_scalar(e, "multiply", inv, dtype=dtype if dtype is not None else t.dtype, mask=mask)


def where(condition: Any, x: Any, y: Any, *, dtype: Any = None, mask: Predicate | None = None) -> NkiTensor:
    """Elementwise `x if condition != 0 else y` (VectorE SELECT); scalars are materialised with memsets."""
    cond = _c.tile(condition, "where condition")
    shape = cond.shape
    xs = [
        _c.full_tile(shape, float(v), "float32") if _c.is_scalar(v) else _c.broadcast_operand(_c.tile(v), shape)
        for v in (x, y)
    ]
    dt = _c.dname(dtype) if dtype is not None else _c.promote(xs[0].dtype_name, xs[1].dtype_name)
    res = _c.new_tile(shape, dt)
    views = _c.apply_mask(mask, shape, res, cond, *xs)
    _c.emit(Engine.VECTOR, Opcode.SELECT, views[:1], views[1:])
    return res


from nprof.nki import language_constants as constants  # noqa: E402  (`nki.language.constants`, a submodule)
from nprof.nki.language_ext import *  # noqa: E402, F403  (the rest of the 2.26 language)

_sys.modules[__name__ + ".constants"] = constants

_INTERNAL = {"annotations", "Any", "Engine", "Opcode", "Space", "NkiTensor", "IndexExpr", "Predicate", "kernel_error",
             "mask_box", "math", "np"}  # fmt: skip
__all__ = sorted(n for n in dir() if not n.startswith("_") and n not in _INTERNAL)
