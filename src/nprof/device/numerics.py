"""Numeric execution of one instruction on a `Memory`: exactly the semantics of `nprof.arch.isa`.

Contract: `execute(ins, mem, rank=0, world_size=1)` reads the instruction's
input Accesses, computes in float32 (float64 for integer inputs and index
arithmetic), and writes its outputs converted to their dtypes. It raises
`AccessError` for out-of-bounds accesses and `ValueError` for malformed
instructions (wrong operand count or shape); the simulator wraps both into an
`NprofError` naming the instruction. Floating-point exceptions (overflow,
divide by zero) do not raise: they produce inf/NaN as the hardware would, and
the simulator checks the outputs.

Choices: "mod" is numpy's floored modulo (sign of the divisor); "bypass"
returns its first operand; comparisons and logical ops give 1.0/0.0; bitwise
ops act on the values rounded to int64. Collectives with `world_size == 1` are
copies (each rank's contribution is the whole result).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nprof.arch.isa import COLLECTIVES, Instruction, Opcode
from nprof.device import mx
from nprof.device.indirect import INDIRECT_HANDLERS, indirect_copy
from nprof.device.memory import Memory
from nprof.device.numerics_ext import EXTRA_ACTIVATIONS, EXTRA_ALU, SELECTION_HANDLERS, BinaryOp, Operand

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


def erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-7 absolute (Abramowitz & Stegun 7.1.26 refined in float64)."""
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    # Numerical Recipes erfc (Chebyshev), fractional error < 1.2e-7 everywhere.
    poly = -z * z - 1.26551223 + t * (
        1.00002368
        + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
            1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))
    )  # fmt: skip
    erfc = t * np.exp(poly)
    return (np.sign(x) * (1.0 - erfc)).astype(np.float32)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "copy": lambda x: x,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: (0.5 * (1.0 + np.tanh(0.5 * x))).astype(np.float32),
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "gelu": lambda x: (0.5 * x * (1.0 + erf(x / np.float32(np.sqrt(2.0))))).astype(np.float32),
    "gelu_apprx_tanh": lambda x: (
        np.float32(0.5) * x * (np.float32(1) + np.tanh(_SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))
    ),
    "silu": lambda x: (x * 0.5 * (1.0 + np.tanh(0.5 * x))).astype(np.float32),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: np.float32(1) / np.sqrt(x),
    "reciprocal": lambda x: np.float32(1) / x,
    "square": np.square,
    "abs": np.abs,
    "negative": np.negative,
    "sign": np.sign,
    "erf": erf,
    "softplus": lambda x: np.logaddexp(np.float32(0), x),
    "sin": np.sin,
    "cos": np.cos,
    **EXTRA_ACTIVATIONS,
}


def _bitwise(fn: BinaryOp) -> BinaryOp:
    def op(a: Operand, b: Operand) -> np.ndarray:
        ia = np.rint(np.asarray(a, np.float64)).astype(np.int64)
        ib = np.rint(np.asarray(b, np.float64)).astype(np.int64)
        return fn(ia, ib).astype(np.float64)

    return op


def _flag(fn: BinaryOp) -> BinaryOp:
    return lambda a, b: fn(a, b).astype(np.float32)


ALU: dict[str, BinaryOp] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
    "bypass": lambda a, b: np.array(a, copy=True),
    "is_equal": _flag(np.equal),
    "not_equal": _flag(np.not_equal),
    "is_ge": _flag(np.greater_equal),
    "is_gt": _flag(np.greater),
    "is_le": _flag(np.less_equal),
    "is_lt": _flag(np.less),
    "logical_and": _flag(lambda a, b: np.logical_and(np.not_equal(a, 0), np.not_equal(b, 0))),
    "logical_or": _flag(lambda a, b: np.logical_or(np.not_equal(a, 0), np.not_equal(b, 0))),
    "bitwise_and": _bitwise(np.bitwise_and),
    "bitwise_or": _bitwise(np.bitwise_or),
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "mod": np.mod,
    "bitwise_xor": _bitwise(np.bitwise_xor),
    "left_shift": _bitwise(np.left_shift),
    "right_shift": _bitwise(np.right_shift),
    **EXTRA_ALU,
}

REDUCE: dict[str, Callable[..., np.ndarray]] = {"add": np.sum, "max": np.max, "min": np.min, "multiply": np.prod}

_CMP: dict[str, BinaryOp] = {
    "ge": np.greater_equal,
    "gt": np.greater,
    "le": np.less_equal,
    "lt": np.less,
    "eq": np.equal,
    "ne": np.not_equal,
}


def _per_partition(value: np.ndarray, ndim: int) -> np.ndarray:
    """A [P, 1] (or [P, 1, ...]) operand reshaped to broadcast over `ndim` dims."""
    return value.reshape((value.shape[0],) + (1,) * (ndim - 1))


def alu(name: str) -> BinaryOp:
    """The numpy function of ALU op `name`; ValueError naming an unknown op."""
    try:
        return ALU[name]
    except KeyError:
        raise ValueError(f"unknown ALU op {name!r}") from None


def _index_grid(shape: tuple[int, ...], base: float, channel_multiplier: float, steps: tuple) -> np.ndarray:
    """base + channel_multiplier * p + sum(i_k * step_k) over a logical shape, in float64."""
    if len(steps) != len(shape) - 1:
        raise ValueError(f"steps {steps} must have one entry per free dim of shape {shape}")
    grid = np.full(shape, float(base), np.float64)
    grid += channel_multiplier * np.arange(shape[0], dtype=np.float64).reshape((-1,) + (1,) * (len(shape) - 1))
    for k, step in enumerate(steps):
        axis = k + 1
        idx = np.arange(shape[axis], dtype=np.float64) * float(step)
        grid += idx.reshape((1,) * axis + (-1,) + (1,) * (len(shape) - axis - 1))
    return grid


def _matmul(ins: Instruction, mem: Memory) -> None:
    if len(ins.ins) == 4:  # an MX matmul: packed operands and their scales
        mx.mx_matmul(ins, mem)
        return
    st, mv = ins.ins[0], ins.ins[1]
    a = mem.read(st).reshape(st.partitions, -1).astype(np.float32)
    b = mem.read(mv).reshape(mv.partitions, -1).astype(np.float32)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"contraction sizes differ: stationary K={a.shape[0]}, moving K={b.shape[0]}")
    result = a.T @ b
    out = ins.outs[0]
    if ins.attr("accumulate", False):
        result = mem.read(out).reshape(result.shape).astype(np.float32) + result
    mem.write(out, result.reshape(out.shape))


def _transpose(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0])
    mem.write(ins.outs[0], x.reshape(x.shape[0], -1).T.reshape(ins.outs[0].shape))


def _activate(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0]).astype(np.float32)
    if len(ins.ins) > 2:
        x = x * _per_partition(mem.read(ins.ins[2]).astype(np.float32), x.ndim)
    else:
        x = x * np.float32(ins.attr("scale", 1.0))
    if len(ins.ins) > 1:
        x = x + _per_partition(mem.read(ins.ins[1]).astype(np.float32), x.ndim)
    else:
        x = x + np.float32(ins.attr("bias", 0.0))
    name = str(ins.attr("func", "copy"))
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation function {name!r}")
    y = np.asarray(ACTIVATIONS[name](x), np.float32)
    mem.write(ins.outs[0], y)
    reduce_op = ins.attr("reduce_op")
    if reduce_op is not None and len(ins.outs) > 1:
        fn = REDUCE.get(str(reduce_op))
        if fn is None:
            raise ValueError(f"unknown reduce_op {reduce_op!r}")
        r = fn(y.reshape(y.shape[0], -1), axis=1, keepdims=True)
        mem.write(ins.outs[1], r)


def _tensor_tensor(ins: Instruction, mem: Memory) -> None:
    a = mem.read(ins.ins[0])
    b = mem.read(ins.ins[1])
    if a.shape != b.shape and a.size == b.size:
        b = b.reshape(a.shape)
    mem.write(ins.outs[0], alu(str(ins.attr("op", "add")))(a, b))


def _scalar_operand(ins: Instruction, mem: Memory, k: int, x: np.ndarray) -> np.ndarray | np.floating:
    if len(ins.ins) > k:
        return _per_partition(mem.read(ins.ins[k]), x.ndim).astype(x.dtype)
    return x.dtype.type(ins.attr(f"operand{k - 1}", 0.0))


def _tensor_scalar(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0])
    for k in (1, 2):
        op = ins.attr(f"op{k - 1}")
        if op is None:
            continue
        s = _scalar_operand(ins, mem, k, x)
        fn = alu(str(op))
        x = fn(s, x) if ins.attr(f"reverse{k - 1}", False) else fn(x, s)
        x = np.asarray(x)
    mem.write(ins.outs[0], x)
    reduce_op = ins.attr("reduce_op")
    if reduce_op is not None and len(ins.outs) > 1:
        r = REDUCE[str(reduce_op)](x.astype(np.float32).reshape(x.shape[0], -1), axis=1, keepdims=True)
        mem.write(ins.outs[1], r)


def _tensor_reduce(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0])
    op = str(ins.attr("op", "add"))
    if op not in REDUCE:
        raise ValueError(f"unknown reduce op {op!r}")
    axes = ins.attr("axes")
    axes = (
        tuple(range(1, x.ndim))
        if axes is None
        else tuple(int(a) for a in (axes if isinstance(axes, tuple) else (axes,)))
    )
    if any(not 1 <= a < x.ndim for a in axes):
        raise ValueError(f"reduce axes {axes} must be free axes 1..{x.ndim - 1}")
    r = REDUCE[op](x, axis=axes)
    if ins.attr("negate", False):
        r = -r
    mem.write(ins.outs[0], r.reshape(ins.outs[0].shape))


def _copy(ins: Instruction, mem: Memory) -> None:
    if len(ins.ins) > 1 or (ins.attrs and ins.attr("rmw")):  # runtime offsets / add into dst: device.indirect
        indirect_copy(ins, mem)
        return
    src, dst = ins.ins[0], ins.outs[0]
    v = mem.view(src)
    if ins.attrs and ins.attr("transpose"):  # a DMA transpose: [P, F] -> [F, P]
        v = v.reshape(src.partitions, -1).T
    if v.size != dst.elements:
        raise ValueError(f"copy of {v.size} elements into {dst.elements}")
    mem.write(dst, np.array(v).reshape(dst.shape))


def _memset(ins: Instruction, mem: Memory) -> None:
    mem.write(ins.outs[0], np.float64(ins.attr("value", 0.0)))


def _iota(ins: Instruction, mem: Memory) -> None:
    out = ins.outs[0]
    grid = _index_grid(out.shape, ins.attr("base", 0), ins.attr("channel_multiplier", 0), ins.attr("steps", ()))
    mem.write(out, grid)


def _affine_select(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0])
    grid = _index_grid(x.shape, ins.attr("offset", 0), ins.attr("channel_multiplier", 0), ins.attr("steps", ()))
    cmp = _CMP.get(str(ins.attr("cmp", "ge")))
    if cmp is None:
        raise ValueError(f"unknown comparison {ins.attr('cmp')!r}")
    mem.write(ins.outs[0], np.where(cmp(grid, 0), x, x.dtype.type(ins.attr("fill", 0.0))))


def _select(ins: Instruction, mem: Memory) -> None:
    cond, a, b = (mem.read(x) for x in ins.ins[:3])
    mem.write(ins.outs[0], np.where(cond != 0, a, b))


def _reciprocal(ins: Instruction, mem: Memory) -> None:
    mem.write(ins.outs[0], np.float32(1) / mem.read(ins.ins[0]).astype(np.float32))


def _bn_stats(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0]).astype(np.float64)
    x = x.reshape(x.shape[0], -1)
    cols = []
    for half in (x[:, 0::2], x[:, 1::2]):
        n = half.shape[1]
        mean = half.mean(axis=1) if n else np.zeros(x.shape[0])
        var = half.var(axis=1) if n else np.zeros(x.shape[0])
        cols += [np.full(x.shape[0], n, np.float64), mean, var * n]
    mem.write(ins.outs[0], np.stack(cols, axis=1).reshape(ins.outs[0].shape))


def _bn_aggr(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0]).astype(np.float64)
    x = x.reshape(x.shape[0], -1)
    if x.shape[1] % 3:
        raise ValueError(f"bn_aggr input has {x.shape[1]} values per partition, not a multiple of 3")
    t = x.reshape(x.shape[0], -1, 3)
    count, mean, var_n = t[..., 0], t[..., 1], t[..., 2]
    n = count.sum(axis=1)
    safe = np.where(n > 0, n, 1.0)
    mu = (count * mean).sum(axis=1) / safe
    m2 = (var_n + count * (mean - mu[:, None]) ** 2).sum(axis=1) / safe
    mem.write(ins.outs[0], np.stack([mu, m2], axis=1).reshape(ins.outs[0].shape))


def _collective(ins: Instruction, mem: Memory) -> None:
    _copy(ins, mem)


def _nothing(ins: Instruction, mem: Memory) -> None:
    return None


HANDLERS: dict[Opcode, Callable[[Instruction, Memory], None]] = {
    **SELECTION_HANDLERS,
    **INDIRECT_HANDLERS,
    Opcode.DMA_DIRECT2D: _copy,
    Opcode.LDWEIGHTS: _nothing,
    Opcode.MATMUL: _matmul,
    Opcode.TRANSPOSE: _transpose,
    Opcode.ACTIVATE: _activate,
    Opcode.TENSOR_TENSOR: _tensor_tensor,
    Opcode.TENSOR_SCALAR: _tensor_scalar,
    Opcode.TENSOR_REDUCE: _tensor_reduce,
    Opcode.TENSOR_COPY: _copy,
    Opcode.MEMSET: _memset,
    Opcode.IOTA: _iota,
    Opcode.AFFINE_SELECT: _affine_select,
    Opcode.SELECT: _select,
    Opcode.RECIPROCAL: _reciprocal,
    Opcode.BN_STATS: _bn_stats,
    Opcode.BN_AGGR: _bn_aggr,
    Opcode.EVENT_SEMAPHORE: _nothing,
    Opcode.QUANTIZE_MX: mx.quantize_mx,
    **{op: _collective for op in COLLECTIVES},
}


def execute(ins: Instruction, mem: Memory) -> None:
    """Run one instruction's numerics on `mem` (single rank)."""
    with np.errstate(all="ignore"):
        HANDLERS[ins.opcode](ins, mem)
