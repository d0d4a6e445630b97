"""`nprof.nki.isa` (import as `nisa`): direct access to the NeuronCore instructions.

Mirrors `neuronxcc.nki.isa` (the return-value style: each call returns its
result tile): `nc_matmul`, `nc_transpose`, `activation`,
`activation_reduce`, `tensor_tensor`, `tensor_scalar`,
`scalar_tensor_tensor`, `tensor_reduce`, `tensor_copy`, `reciprocal`,
`iota`, `memset`, `dma_copy`, `bn_stats`, `bn_aggr`, `affine_select`, and
the `engine` / `reduce_cmd` enums. `op=` arguments accept `nl` functions
(`nl.add`, `nl.exp`, `nl.max`...), numpy ufuncs or ISA names. Each call emits
exactly one instruction (plus LDWEIGHTS before a matmul whose stationary
changed) with the semantics of `nprof.arch.isa`.

Differences from the hardware, by design: `bn_stats` returns [P, 3] (mean,
variance, count) per the ISA of this virtual core (the real one returns 6
values; pass it to `bn_aggr` either way), and transposes always use TensorE.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from nprof.arch.isa import ACTIVATION_FUNCS, ALU_OPS, Engine, Opcode, Space
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.index import IndexExpr, Predicate
from nprof.nki.masks import skipped_by
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor


class engine(enum.Enum):
    unknown = None
    tensor = Engine.TENSOR
    vector = Engine.VECTOR
    scalar = Engine.SCALAR
    gpsimd = Engine.GPSIMD


tensor_engine, vector_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.vector, engine.scalar, engine.gpsimd
unknown_engine = engine.unknown


class nc_version(enum.IntEnum):
    """NeuronCore generations: gen2 = NeuronCore-v2 (trn1 preset), gen3 = NeuronCore-v3 (trn2 preset)."""

    gen2 = 2
    gen3 = 3


def get_nc_version() -> nc_version:
    """The NeuronCore generation the running kernel is traced for (from the builder's preset)."""
    return nc_version.gen3 if _trace.current().preset_name == "trn2" else nc_version.gen2


class reduce_cmd(enum.Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


_NP_ALU = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide", np.maximum: "maximum",
    np.minimum: "minimum", np.power: "power", np.equal: "is_equal", np.not_equal: "not_equal", np.greater: "is_gt",
    np.greater_equal: "is_ge", np.less: "is_lt", np.less_equal: "is_le", np.logical_and: "logical_and",
    np.logical_or: "logical_or", np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.mod: "mod",
    np.max: "maximum", np.min: "minimum",
}  # fmt: skip
_NP_ACT = {
    np.exp: "exp", np.log: "log", np.tanh: "tanh", np.sqrt: "sqrt", np.reciprocal: "reciprocal", np.square: "square",
    np.abs: "abs", np.negative: "negative", np.sign: "sign", np.sin: "sin", np.cos: "cos",
}  # fmt: skip
_REDUCE = {"add": "add", "maximum": "max", "minimum": "min", "max": "max", "min": "min", "multiply": "multiply"}


def alu_name(op: Any) -> str:
    name = getattr(op, "_nki_alu", None) or _NP_ALU.get(op) or (op if isinstance(op, str) else None)
    name = {"max": "maximum", "min": "minimum"}.get(name, name) if name else None
    if name not in ALU_OPS:
        raise kernel_error(f"unsupported ALU operator {op!r}; use one of nl.add, nl.multiply, nl.maximum, ...")
    return name


def act_name(op: Any) -> str:
    name = getattr(op, "_nki_act", None) or _NP_ACT.get(op) or (op if isinstance(op, str) else None)
    if name is None and getattr(op, "__name__", None) == "copy":
        name = "copy"
    if name not in ACTIVATION_FUNCS:
        raise kernel_error(f"unsupported activation function {op!r}; use nl.exp, nl.tanh, nl.gelu, ...")
    return name


def reduce_name(op: Any) -> str:
    name = getattr(op, "_nki_reduce", None) or getattr(op, "_nki_alu", None) or _NP_ALU.get(op)
    name = name or (op if isinstance(op, str) else None)
    if name not in _REDUCE:
        raise kernel_error(f"unsupported reduce operator {op!r}; use nl.add, nl.max or nl.min")
    return _REDUCE[name]


def _engine(value: Any, default: Engine, allowed: tuple[Engine, ...]) -> Engine:
    eng = value.value if isinstance(value, engine) else value
    if eng is None:
        return default
    if eng not in allowed:
        raise kernel_error(f"this instruction cannot run on {eng}; allowed: {', '.join(map(str, allowed))}")
    return Engine(eng)


def _check_no_mask(mask: Any, what: str) -> None:
    if mask is not None:
        raise kernel_error(f"{what} does not take a mask here; slice its operands instead")


# -- TensorE --------------------------------------------------------------------------------------
def nc_matmul(stationary: Any, moving: Any, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position: Any = (), tile_size: Any = (), mask: Any = None,
              **_: Any) -> NkiTensor:  # fmt: skip
    """stationary.T @ moving on TensorE into a new fp32 PSUM tile [M, N]; accumulate with `psum_tile += ...`."""
    skip = skipped_by(mask, "nc_matmul")
    if is_transpose:
        raise kernel_error("nc_matmul(is_transpose=True) is not supported; use nisa.nc_transpose(data) instead")
    builder = _trace.current()
    p = builder.preset
    st, mv = _c.tile(stationary, "stationary"), _c.tile(moving, "moving")
    for t, what in ((st, "stationary"), (mv, "moving")):
        if t.space is not Space.SBUF:
            raise kernel_error(f"nc_matmul {what} must be an SBUF tile (copy PSUM results to SBUF first)")
    if st.ndim != 2:
        raise kernel_error(f"nc_matmul stationary must be a 2-D tile [K, M], got shape {st.shape}")
    k, m = st.shape
    if mv.shape[0] != k:
        raise kernel_error(
            f"nc_matmul contraction mismatch: stationary {st.shape} and moving {mv.shape} must share the "
            "partition (K) axis"
        )
    n = _c._numel_free(mv)
    if k > p.pmax:
        raise kernel_error(f"nc_matmul contraction size {k} exceeds {p.pmax} partitions; tile K and accumulate")
    if m > p.gemm_stationary_fmax:
        raise kernel_error(
            f"nc_matmul stationary free size {m} exceeds {p.gemm_stationary_fmax} (nl.tile_size.gemm_stationary_fmax)"
        )
    if n > p.gemm_moving_fmax:
        raise kernel_error(
            f"nc_matmul moving free size {n} exceeds {p.gemm_moving_fmax} (nl.tile_size.gemm_moving_fmax)"
        )
    flat = mv.flatten_free()
    if flat is None:
        flat = _c.copy(mv).flatten_free()
    assert flat is not None
    res = builder.alloc((m, *mv.shape[1:]) if mv.ndim > 2 else (m, n), "float32", Space.PSUM, lazy=True)
    builder.set_pending(st, flat, res, skip=skip)
    return res


def nc_transpose(data: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None, **_: Any) -> NkiTensor:
    """data.T of a 2-D tile through TensorE, into a new PSUM tile [F, P] (data's dtype unless `dtype`)."""
    builder = _trace.current()
    x = _c.tile(data, "transpose input")
    if x.ndim != 2:
        raise kernel_error(f"nc_transpose takes a 2-D tile, got shape {x.shape}")
    if x.space is not Space.SBUF:
        raise kernel_error("nc_transpose reads SBUF (TensorE has no PSUM input); copy the tile to SBUF first")
    parts, free = x.shape
    if free > builder.preset.pmax:
        raise kernel_error(
            f"nc_transpose of {x.shape}: the result would have {free} > {builder.preset.pmax} partitions"
        )
    dt = _c.dname(dtype) if dtype is not None else x.dtype_name
    res = builder.alloc((free, parts), dt, Space.PSUM)
    o, i = (res, x) if mask is None else (res, x.masked(mask))
    _c.emit(Engine.TENSOR, Opcode.TRANSPOSE, [o], [i])
    return res


# -- ScalarE / VectorE / GpSimdE ------------------------------------------------------------------
def activation(op: Any, data: Any, *, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None, reduce_res: Any = None,
               reduce_cmd: Any = None, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:  # fmt: skip
    """op(data * scale + bias) on ScalarE; with reduce_op/reduce_res also the free-axis reduction."""
    rop = reduce_name(reduce_op) if reduce_op is not None else None
    return _c.activation(act_name(op), data, scale=scale, bias=bias, dtype=dtype, mask=mask, reduce_op=rop,
                         reduce_res=reduce_res)  # fmt: skip


def activation_reduce(op: Any, data: Any, *, reduce_op: Any, reduce_res: Any, bias: Any = None, scale: Any = 1.0,
                      mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:  # fmt: skip
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res, mask=mask,
                      dtype=dtype)  # fmt: skip


_VG = (Engine.VECTOR, Engine.GPSIMD)
_VSG = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


def tensor_tensor(x: Any, y: Any, op: Any, *, dtype: Any = None, mask: Any = None, engine: Any = None,
                  **_: Any) -> NkiTensor:  # fmt: skip
    """Elementwise op of two same-shape tiles (VectorE, or GpSimdE)."""
    return _c.tensor_tensor(x, y, alu_name(op), dtype=dtype, mask=mask, engine=_engine(engine, Engine.VECTOR, _VG))


def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, *, dtype: Any = None, mask: Any = None, engine: Any = None,
                  **_: Any) -> NkiTensor:  # fmt: skip
    """(data <op0> operand0) <op1> operand1 with scalar or [P, 1] operands (VectorE, ScalarE or GpSimdE)."""
    return _c.tensor_scalar(
        data, alu_name(op0), operand0, reverse0, alu_name(op1) if op1 is not None else None, operand1, reverse1,
        dtype=dtype, mask=mask, engine=_engine(engine, Engine.VECTOR, _VSG),
    )  # fmt: skip


def scalar_tensor_tensor(*, data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any, reverse0: bool = False,
                         reverse1: bool = False, dtype: Any = None, mask: Any = None,
                         **_: Any) -> NkiTensor:  # fmt: skip
    """(data <op0> operand0) <op1> operand1 with operand1 a full tile: TENSOR_SCALAR then TENSOR_TENSOR."""
    tmp = _c.tensor_scalar(data, alu_name(op0), operand0, reverse0, dtype="float32", mask=mask)
    a, b = (operand1, tmp) if reverse1 else (tmp, operand1)
    return _c.tensor_tensor(a, b, alu_name(op1), dtype=dtype or _c.tile(data).dtype, mask=mask)


def tensor_reduce(op: Any, data: Any, axis: Any, *, mask: Any = None, dtype: Any = None, negate: bool = False,
                  keepdims: bool = False, **_: Any) -> NkiTensor:  # fmt: skip
    """Reduce `data` over free axes `axis` (VectorE TENSOR_REDUCE)."""
    return _c.reduce(reduce_name(op), data, axis, dtype=dtype, mask=mask, keepdims=keepdims, negate=negate)


def tensor_copy(src: Any, *, mask: Any = None, dtype: Any = None, engine: Any = None, **_: Any) -> NkiTensor:
    return _c.copy(src, dtype=dtype, mask=mask, engine=_engine(engine, Engine.VECTOR, _VSG))


def reciprocal(data: Any, *, dtype: Any = None, mask: Any = None, **_: Any) -> NkiTensor:
    x = _c.tile(data, "reciprocal input")
    res = _c.new_tile(x.shape, _c.dname(dtype) if dtype is not None else x.dtype_name)
    views = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.VECTOR, Opcode.RECIPROCAL, views[:1], views[1:])
    return res


def memset(shape: Any, value: float, dtype: Any, *, mask: Any = None, engine: Any = None, **_: Any) -> NkiTensor:
    res = _c.new_tile(tuple(shape), _c.dname(dtype))
    (view,) = _c.apply_mask(mask, res.shape, res)
    _c.emit(_engine(engine, Engine.VECTOR, _VG), Opcode.MEMSET, [view], [], value=float(value))
    return res


def _affine(expr: IndexExpr, shape_ndim: int) -> tuple[int, int, tuple[int, ...]]:
    terms = expr.term_map(shape_ndim)
    cm = terms.get(0, (0, 1))[0]
    steps = tuple(terms.get(k, (0, 1))[0] for k in range(1, shape_ndim))
    return expr.const, cm, steps


def iota(expr: Any, dtype: Any, *, mask: Any = None, **_: Any) -> NkiTensor:
    """A tile holding the values of an affine index expression (GpSimdE IOTA)."""
    if not isinstance(expr, IndexExpr):
        raise kernel_error("nisa.iota takes an nl.arange expression, e.g. nl.arange(128)[:, None] * 64")
    shape = expr.shape if expr.ndim >= 2 else (expr.shape[0], 1)
    base, cm, steps = _affine(expr if expr.ndim >= 2 else expr[:, None], len(shape))
    res = _c.new_tile(shape, _c.dname(dtype))
    (view,) = _c.apply_mask(mask, shape, res)
    _c.emit(Engine.GPSIMD, Opcode.IOTA, [view], [], base=base, channel_multiplier=cm, steps=steps)
    return res


def affine_select(pred: Any, on_true_tile: Any, on_false_value: float, *, mask: Any = None, dtype: Any = None,
                  **_: Any) -> NkiTensor:  # fmt: skip
    """where(pred, on_true_tile, on_false_value) with `pred` one affine comparison of nl.arange terms (GpSimdE)."""
    if not isinstance(pred, Predicate) or len(pred.conds) != 1:
        raise kernel_error("affine_select takes one comparison of nl.arange expressions, e.g. i_p >= i_f")
    x = _c.tile(on_true_tile, "on_true_tile")
    expr, cmp, rhs = pred.conds[0]
    offset, cm, steps = _affine(expr, x.ndim)
    res = _c.new_tile(x.shape, _c.dname(dtype) if dtype is not None else x.dtype_name)
    views = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.GPSIMD, Opcode.AFFINE_SELECT, views[:1], views[1:], offset=offset - rhs, channel_multiplier=cm,
            steps=steps, cmp=cmp, fill=float(on_false_value))  # fmt: skip
    return res


def bn_stats(data: Any, *, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    """Per-partition (mean, variance, count) of a tile: [P, 3] (VectorE BN_STATS)."""
    x = _c.tile(data, "bn_stats input")
    res = _c.new_tile((x.shape[0], 3), _c.dname(dtype) if dtype is not None else "float32")
    ri, xi = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.VECTOR, Opcode.BN_STATS, [ri], [xi])
    return res


def bn_aggr(data: Any, *, mask: Any = None, dtype: Any = None, **_: Any) -> NkiTensor:
    """Combine k bn_stats triples ([P, 3k]) into (mean, variance): [P, 2] (VectorE BN_AGGR)."""
    x = _c.tile(data, "bn_aggr input")
    if _c._numel_free(x) % 3:
        raise kernel_error(f"bn_aggr input must hold (mean, variance, count) triples, got shape {x.shape}")
    res = _c.new_tile((x.shape[0], 2), _c.dname(dtype) if dtype is not None else "float32")
    _c.emit(Engine.VECTOR, Opcode.BN_AGGR, [res], [x])
    return res


def dma_copy(*, dst: Any, src: Any, mask: Any = None, dst_rmw_op: Any = None, **_: Any) -> None:
    """Copy `src` to `dst` with one DMA (HBM<->SBUF or HBM->HBM)."""
    if dst_rmw_op is not None:
        raise kernel_error("dma_copy with dst_rmw_op (read-modify-write) is not supported")
    for v, what in ((dst, "dst"), (src, "src")):
        if not isinstance(v, NkiTensor):
            raise kernel_error(f"dma_copy {what} must be a tensor or tile, got {type(v).__name__}")
    if dst.shape != src.shape and _c._numel_free(dst) * dst.shape[0] != _c._numel_free(src) * src.shape[0]:
        raise kernel_error(f"dma_copy shapes differ: dst {dst.shape} vs src {src.shape}")
    d = dst.masked(mask)
    s = src.masked(mask, src.shape) if mask is not None else src
    _trace.current().dma(d, s)
