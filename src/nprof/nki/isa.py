"""`nprof.nki.isa` (import as `nisa`): direct access to the NeuronCore instructions.

Mirrors `neuronxcc.nki.isa` of Neuron 2.26 (the return-value style: each call
returns its result tile) and accepts the newer "beta 2" style whose output is
the first argument or `dst=` (`nisa.nc_matmul(psum, stationary, moving)`,
`nisa.tensor_copy(dst=t, src=x)`; see `nprof.nki.calls`). `op=` arguments
accept `nl` functions (`nl.add`, `nl.exp`, `nl.max`...), numpy ufuncs or ISA
names. Each call emits exactly one instruction (plus LDWEIGHTS before a
matmul whose stationary changed) with the semantics of `nprof.arch.isa`; the
instructions added after 2.26's core set live in `nprof.nki.isa_ext`, the
matmul (`nc_matmul`, its call styles and operand forms) in `nprof.nki.isa_matmul`.

Differences from the hardware, by design: transposes of `nc_transpose` into
PSUM run on TensorE.
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Engine, Opcode, Space
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.calls import beta2
from nprof.nki.calls import unmodelled as _unmodelled
from nprof.nki.calls import unmodelled_if as _unmodelled_if
from nprof.nki.index import IndexExpr, Predicate
from nprof.nki.isa_enums import (  # noqa: F401  (re-exported as nisa.<name>)
    act_name,
    alu_name,
    device_engine,
    dge_mode,
    dma_engine,
    engine,
    fp32,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    reduce_name,
    scalar_alu_name,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor


def _engine(value: Any, default: Engine, allowed: tuple[Engine, ...]) -> Engine:
    if value is None or value == engine.unknown:
        return default
    eng = device_engine(value)
    if eng not in allowed:
        raise kernel_error(f"this instruction cannot run on {eng}; allowed: {', '.join(map(str, allowed))}")
    return Engine(eng)


def _dtype_for(dst: NkiTensor | None, dtype: Any, what: str) -> Any:
    """The result dtype: `dtype`, or dst's. The engine writes in the dst tile's format, so a `dtype` that differs
    from dst's is not applied: it warns by name (AWS's beta-2 matmul tutorial passes dtype=bfloat16 with an fp32
    dst; a kernel that really wants the cast declares dst in that dtype)."""
    if dst is None or dtype is None:
        return dtype
    if _c.dname(dtype) != dst.dtype_name:
        from nprof.nki.calls import unmodelled

        unmodelled(f"nisa.{what}", "dtype", f"dst is {dst.dtype_name}, the format the engine writes; declare dst as "
                   f"{_c.dname(dtype)} to get that cast")  # fmt: skip
    return None


# -- TensorE --------------------------------------------------------------------------------------
@beta2(("dst", "data", "engine", "name"), at=1)
def nc_transpose(data: Any, *, mask: Any = None, dtype: Any = None, engine: Any = engine.unknown, dst: Any = None,
                 name: Any = None) -> NkiTensor:  # fmt: skip
    """data.T of a 2-D tile into a new PSUM tile [F, P] (TensorE) or into `dst` (PSUM: TensorE, SBUF: VectorE)."""
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
    dtype = _dtype_for(dst, dtype, "nc_transpose")
    dt = _c.dname(dtype) if dtype is not None else x.dtype_name
    res = _c.result_tile(dst, (free, parts), dt, Space.PSUM)
    eng = Engine.TENSOR if res.space is Space.PSUM else Engine.VECTOR
    if engine not in (None, globals()["engine"].unknown) and device_engine(engine) is not eng:
        _unmodelled("nisa.nc_transpose", "engine", f"runs on {eng.value} for a {res.space.value} destination")
    o, i = (res, x) if mask is None else (res, x.masked(mask))
    _c.emit(eng, Opcode.TRANSPOSE, [o], [i])
    return res


# -- ScalarE / VectorE / GpSimdE ------------------------------------------------------------------
def _reduce_cmd_check(func: str, cmd: Any) -> None:
    if cmd not in (None, reduce_cmd.idle, reduce_cmd.reset_reduce):
        raise kernel_error(
            f"{func}(reduce_cmd={cmd!r}): accumulating across instructions in the engine's registers is not "
            "supported by nprof; reduce into a tile and combine with nl.add"
        )


@beta2(("dst", "op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd", "name"), at=0)
def activation(op: Any, data: Any, *, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None, reduce_res: Any = None,
               reduce_cmd: Any = reduce_cmd.idle, mask: Any = None, dtype: Any = None, dst: Any = None,
               name: Any = None) -> NkiTensor:  # fmt: skip
    """op(data * scale + bias) on ScalarE; with reduce_op/reduce_res also the free-axis reduction."""
    _reduce_cmd_check("nisa.activation", reduce_cmd)
    rop = reduce_name(reduce_op) if reduce_op is not None else None
    return _c.activation(act_name(op), data, scale=scale, bias=bias, dtype=_dtype_for(dst, dtype, "activation"),
                         mask=mask, reduce_op=rop, reduce_res=reduce_res, out=dst)  # fmt: skip


@beta2(("dst", "op", "data", "reduce_op", "reduce_res", "bias", "scale", "name"), at=0)
def activation_reduce(op: Any, data: Any, *, reduce_op: Any, reduce_res: Any, bias: Any = None, scale: Any = 1.0,
                      mask: Any = None, dtype: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """`activation` that also reduces its result along the free axes into `reduce_res` [P, 1]."""
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res, mask=mask,
                      dtype=dtype, dst=dst)  # fmt: skip


_VG = (Engine.VECTOR, Engine.GPSIMD)
_VSG = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


@beta2(("dst", "data1", "data2", "op", "engine", "name"), at=2)
def tensor_tensor(data1: Any, data2: Any, op: Any, *, dtype: Any = None, mask: Any = None, engine: Any = engine.unknown,
                  dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """Elementwise op of two same-shape tiles (VectorE, or GpSimdE)."""
    return _c.tensor_tensor(data1, data2, alu_name(op), dtype=_dtype_for(dst, dtype, "tensor_tensor"), mask=mask,
                            engine=_engine(engine, Engine.VECTOR, _VG), out=dst)  # fmt: skip


@beta2(("dst", "data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1", "engine", "name"), at=1)
def tensor_scalar(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, *, dtype: Any = None, mask: Any = None, engine: Any = engine.unknown,
                  dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """(data <op0> operand0) <op1> operand1 with scalar or [P, 1] operands (VectorE, ScalarE or GpSimdE)."""
    return _c.tensor_scalar(
        data, scalar_alu_name(op0, operand0), operand0, reverse0,
        scalar_alu_name(op1, operand1) if op1 is not None else None, operand1, reverse1,
        dtype=_dtype_for(dst, dtype, "tensor_scalar"), mask=mask, engine=_engine(engine, Engine.VECTOR, _VSG), out=dst,
    )  # fmt: skip


@beta2(("dst", "data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1", "name"), at=0)
def scalar_tensor_tensor(*, data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any, reverse0: bool = False,
                         reverse1: bool = False, dtype: Any = None, mask: Any = None, dst: Any = None,
                         name: Any = None) -> NkiTensor:  # fmt: skip
    """(data <op0> operand0) <op1> operand1 with operand1 a full tile: TENSOR_SCALAR then TENSOR_TENSOR."""
    dtype = _dtype_for(dst, dtype, "scalar_tensor_tensor")
    tmp = _c.tensor_scalar(data, alu_name(op0), operand0, reverse0, dtype="float32", mask=mask)
    a, b = (operand1, tmp) if reverse1 else (tmp, operand1)
    return _c.tensor_tensor(a, b, alu_name(op1), dtype=dtype or _c.tile(data).dtype, mask=mask, out=dst)


@beta2(("dst", "op", "data", "axis", "negate", "keepdims", "name"), at=0)
def tensor_reduce(op: Any, data: Any, axis: Any, *, mask: Any = None, dtype: Any = None, negate: bool = False,
                  keepdims: bool = False, dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """Reduce `data` over free axes `axis` (VectorE TENSOR_REDUCE)."""
    return _c.reduce(reduce_name(op), data, axis, dtype=_dtype_for(dst, dtype, "tensor_reduce"), mask=mask,
                     keepdims=keepdims, negate=negate, out=dst)  # fmt: skip


@beta2(("dst", "src", "engine", "name"), at=1)
def tensor_copy(src: Any, *, mask: Any = None, dtype: Any = None, engine: Any = engine.unknown, dst: Any = None,
                name: Any = None) -> NkiTensor:  # fmt: skip
    """A copy of `src` (cast to `dtype` / dst's dtype) on VectorE, ScalarE or GpSimdE."""
    return _c.copy(src, dtype=_dtype_for(dst, dtype, "tensor_copy"), mask=mask,
                   engine=_engine(engine, Engine.VECTOR, _VSG), out=dst)  # fmt: skip


@beta2(("dst", "data", "name"), at=1)
def reciprocal(data: Any, *, dtype: Any = None, mask: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:
    """1 / data on VectorE (RECIPROCAL)."""
    x = _c.tile(data, "reciprocal input")
    dtype = _dtype_for(dst, dtype, "reciprocal")
    res = _c.result_tile(dst, x.shape, _c.dname(dtype) if dtype is not None else x.dtype_name)
    views = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.VECTOR, Opcode.RECIPROCAL, views[:1], views[1:])
    return res


@beta2(("dst", "value", "engine", "name"), at=0)
def memset(shape: Any = None, value: Any = None, dtype: Any = None, *, mask: Any = None, engine: Any = engine.unknown,
           dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """A new tile of `shape`/`dtype` (or `dst`) filled with `value` (VectorE or GpSimdE MEMSET)."""
    if value is None:
        raise TypeError("memset() missing required argument: 'value'")
    if dst is None and (shape is None or dtype is None):
        raise TypeError("memset() needs shape= and dtype= (or dst=, the tile to fill)")
    res = dst if dst is not None else _c.new_tile(tuple(shape), _c.dname(dtype))
    (view,) = _c.apply_mask(mask, res.shape, res)
    _c.emit(_engine(engine, Engine.VECTOR, _VG), Opcode.MEMSET, [view], [], value=float(value))
    return res


def _affine(expr: IndexExpr, shape_ndim: int) -> tuple[int, int, tuple[int, ...]]:
    terms = expr.term_map(shape_ndim)
    cm = terms.get(0, (0, 1))[0]
    steps = tuple(terms.get(k, (0, 1))[0] for k in range(1, shape_ndim))
    return expr.const, cm, steps


@beta2(("dst", "pattern", "offset", "channel_multiplier", "name"), at=0)
def iota(expr: Any = None, dtype: Any = None, *, mask: Any = None, dst: Any = None, pattern: Any = None,
         offset: int = 0, channel_multiplier: int = 0, name: Any = None) -> NkiTensor:  # fmt: skip
    """A tile holding the values of an affine index expression (GpSimdE IOTA); beta 2: `dst` filled with
    offset + channel_multiplier * p + sum(step * i) over `pattern` ([[step, num], ...])."""
    if pattern is not None:
        from nprof.nki.isa_ext import pattern_view

        view, steps = pattern_view(dst, pattern, "iota")
        _c.emit(Engine.GPSIMD, Opcode.IOTA, [view], [], base=int(offset), channel_multiplier=int(channel_multiplier),
                steps=steps)  # fmt: skip
        return dst
    if not isinstance(expr, IndexExpr):
        raise kernel_error("nisa.iota takes an nl.arange expression, e.g. nl.arange(128)[:, None] * 64")
    shape = expr.shape if expr.ndim >= 2 else (expr.shape[0], 1)
    base, cm, steps = _affine(expr if expr.ndim >= 2 else expr[:, None], len(shape))
    res = _c.result_tile(dst, shape, _c.dname(dtype))
    (view,) = _c.apply_mask(mask, shape, res)
    _c.emit(Engine.GPSIMD, Opcode.IOTA, [view], [], base=base, channel_multiplier=cm, steps=steps)
    return res


@beta2(("dst", "pattern", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op", "offset", "name"), at=0)
def affine_select(pred: Any = None, on_true_tile: Any = None, on_false_value: float = 0.0, *, mask: Any = None,
                  dtype: Any = None, dst: Any = None, pattern: Any = None, channel_multiplier: int = 0,
                  cmp_op: Any = None, offset: int = 0, name: Any = None) -> NkiTensor:  # fmt: skip
    """where(pred, on_true_tile, on_false_value) with `pred` one affine comparison of nl.arange terms (GpSimdE);
    beta 2: the predicate is cmp_op(offset + channel_multiplier * p + sum(step * i) over `pattern`, 0)."""
    if pattern is not None:
        from nprof.nki.isa_ext import affine_select_pattern

        return affine_select_pattern(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op, offset)
    if not isinstance(pred, Predicate) or len(pred.conds) != 1:
        raise kernel_error("affine_select takes one comparison of nl.arange expressions, e.g. i_p >= i_f")
    x = _c.tile(on_true_tile, "on_true_tile")
    expr, cmp, rhs = pred.conds[0]
    offset, cm, steps = _affine(expr, x.ndim)
    dtype = _dtype_for(dst, dtype, "affine_select")
    res = _c.result_tile(dst, x.shape, _c.dname(dtype) if dtype is not None else x.dtype_name)
    views = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.GPSIMD, Opcode.AFFINE_SELECT, views[:1], views[1:], offset=offset - rhs, channel_multiplier=cm,
            steps=steps, cmp=cmp, fill=float(on_false_value))  # fmt: skip
    return res


BN_STATS_FMAX = 512  # nl.tile_size.bn_stats_fmax: free elements one BN_STATS reads (AWS nki.isa.bn_stats doc)


@beta2(("dst", "data", "name"), at=1)
def bn_stats(data: Any, *, mask: Any = None, dtype: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:
    """Per-partition statistics in the hardware layout [P, 6]: (count, mean, variance*count) of the even and
    of the odd elements (VectorE BN_STATS); at most 512 free elements. Feed one or more to `bn_aggr`."""
    x = _c.tile(data, "bn_stats input")
    if _c._numel_free(x) > BN_STATS_FMAX:
        raise kernel_error(f"bn_stats reads at most {BN_STATS_FMAX} elements per partition "
                           f"(nl.tile_size.bn_stats_fmax), got {x.shape}; split the free axis and bn_aggr the "
                           "concatenated results")  # fmt: skip
    dtype = _dtype_for(dst, dtype, "bn_stats")
    res = _c.result_tile(dst, (x.shape[0], 6), _c.dname(dtype) if dtype is not None else x.dtype_name)
    ri, xi = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.VECTOR, Opcode.BN_STATS, [ri], [xi])
    return res


@beta2(("dst", "data", "name"), at=1)
def bn_aggr(data: Any, *, mask: Any = None, dtype: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:
    """Combine (count, mean, variance*count) triples ([P, 3k], e.g. bn_stats outputs) into (mean, variance): [P, 2]
    (VectorE BN_AGGR)."""
    x = _c.tile(data, "bn_aggr input")
    if _c._numel_free(x) % 3:
        raise kernel_error(f"bn_aggr input must hold (count, mean, variance*count) triples, got shape {x.shape}")
    dtype = _dtype_for(dst, dtype, "bn_aggr")
    res = _c.result_tile(dst, (x.shape[0], 2), _c.dname(dtype) if dtype is not None else x.dtype_name)
    ri, xi = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.VECTOR, Opcode.BN_AGGR, [ri], [xi])
    return res


def dma_copy(dst: Any, src: Any, *, mask: Any = None, dst_rmw_op: Any = None, oob_mode: Any = oob_mode.error,
             dge_mode: Any = dge_mode.unknown, priority: Any = None, engine: Any = engine.unknown,
             name: Any = None) -> None:  # fmt: skip
    """Copy `src` to `dst` with one DMA (HBM<->SBUF, HBM->HBM, SBUF<->SBUF); a side indexed with runtime values
    is an indirect DMA, `dst_rmw_op=np.add` adds into dst (`nprof.nki.indirect_ops`). `oob_mode` applies to
    runtime indices (static ones are checked at trace time)."""
    _unmodelled_if("nisa.dma_copy", dge_mode=(dge_mode, globals()["dge_mode"].unknown), priority=(priority, None))
    if engine not in (None, globals()["engine"].unknown, dma_engine):
        _unmodelled("nisa.dma_copy", "engine")
    if dst_rmw_op is not None or hasattr(dst, "dyn_attrs") or hasattr(src, "dyn_attrs"):
        from nprof.nki.indirect_ops import dma_copy_runtime

        dma_copy_runtime(dst, src, mask, dst_rmw_op, oob_mode)
        return
    for v, what in ((dst, "dst"), (src, "src")):
        if not isinstance(v, NkiTensor):
            raise kernel_error(f"dma_copy {what} must be a tensor or tile, got {type(v).__name__}")
    if dst.shape != src.shape and _c._numel_free(dst) * dst.shape[0] != _c._numel_free(src) * src.shape[0]:
        raise kernel_error(f"dma_copy shapes differ: dst {dst.shape} vs src {src.shape}")
    _c.consumed(src)
    d = dst.masked(mask)
    s = src.masked(mask, src.shape) if mask is not None else src
    _trace.current().dma(d, s)


from nprof.nki.isa_ext import *  # noqa: E402, F403  (the rest of the 2.26 instruction set)
from nprof.nki.isa_matmul import nc_matmul  # noqa: E402, F401  (TensorE matmul)
from nprof.nki.isa_mx import nc_matmul_mx, quantize_mx  # noqa: E402, F401  (NeuronCore-v4 MX instructions)
from nprof.nki.registers import VirtualRegister, register_alloc, register_load, register_move, register_store  # noqa: E402, F401
