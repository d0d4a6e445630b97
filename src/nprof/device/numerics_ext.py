"""Numerics of the scan, cross-partition and top-8 instructions (see `nprof.arch.isa` for their semantics).

Each handler reads its input Accesses, computes in float32 (indices as
integers) and writes its outputs; merged into `numerics.HANDLERS`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nprof.arch.isa import Instruction, Opcode
from nprof.device.memory import Memory

Operand = np.ndarray | np.generic | float  # an ALU operand: a tile, or a per-partition or immediate scalar
BinaryOp = Callable[[Operand, Operand], np.ndarray]  # an ALU op (numpy ufunc semantics)

def _alu(name: str) -> BinaryOp:
    from nprof.device.numerics import alu

    return alu(name)


def _flat(mem: Memory, acc: object) -> np.ndarray:
    x = mem.read(acc)  # type: ignore[arg-type]
    return x.reshape(x.shape[0], -1)


def _scan(ins: Instruction, mem: Memory) -> None:
    a, b = _flat(mem, ins.ins[0]).astype(np.float32), _flat(mem, ins.ins[1]).astype(np.float32)
    if a.shape != b.shape:
        raise ValueError(f"scan operands differ: {a.shape} vs {b.shape}")
    op0, op1 = _alu(str(ins.attr("op0", "multiply"))), _alu(str(ins.attr("op1", "add")))
    prev = (
        _flat(mem, ins.ins[2]).astype(np.float32)[:, 0]
        if len(ins.ins) > 2
        else np.full(a.shape[0], np.float32(ins.attr("initial", 0.0)))
    )
    out = np.empty_like(a)
    for i in range(a.shape[1]):
        prev = np.asarray(op1(np.asarray(op0(a[:, i], prev), np.float32), b[:, i]), np.float32)
        out[:, i] = prev
    mem.write(ins.outs[0], out.reshape(ins.outs[0].shape))


def _partition_reduce(ins: Instruction, mem: Memory) -> None:
    x = mem.read(ins.ins[0])
    op = str(ins.attr("op", "add"))
    fns: dict[str, Callable[..., np.ndarray]] = {"add": np.sum, "max": np.max, "min": np.min, "multiply": np.prod,
           "bitwise_or": np.bitwise_or.reduce, "bitwise_and": np.bitwise_and.reduce}  # fmt: skip
    if op not in fns:
        raise ValueError(f"unknown partition-reduce op {op!r}")
    data = x.astype(np.int64) if op.startswith("bitwise") else x.astype(np.float32)
    mem.write(ins.outs[0], fns[op](data, axis=0).reshape(ins.outs[0].shape))


def _max8(ins: Instruction, mem: Memory) -> None:
    x = _flat(mem, ins.ins[0]).astype(np.float32)
    mem.write(ins.outs[0], -np.sort(-x, axis=1)[:, :8].reshape(ins.outs[0].shape))


def _first_indices(data: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Per partition, the index of the first occurrence of each value (0 where absent: undefined on hardware)."""
    hits = data[:, None, :] == vals[:, :, None]
    return np.argmax(hits, axis=2)


def _find_index8(ins: Instruction, mem: Memory) -> None:
    data, vals = _flat(mem, ins.ins[0]).astype(np.float32), _flat(mem, ins.ins[1]).astype(np.float32)
    mem.write(ins.outs[0], _first_indices(data, vals).reshape(ins.outs[0].shape))


def _match_replace8(ins: Instruction, mem: Memory) -> None:
    data, vals = _flat(mem, ins.ins[0]).astype(np.float32), _flat(mem, ins.ins[1]).astype(np.float32)
    out = data.copy()
    idx = np.zeros(vals.shape, np.int64)
    for k in range(vals.shape[1]):  # sequentially: a repeated value replaces its next occurrence
        hits = out == vals[:, k : k + 1]
        first = np.argmax(hits, axis=1)
        found = hits[np.arange(out.shape[0]), first]
        idx[:, k] = first
        out[np.arange(out.shape[0])[found], first[found]] = np.float32(ins.attr("imm", 0.0))
    mem.write(ins.outs[0], out.reshape(ins.outs[0].shape))
    if len(ins.outs) > 1:
        mem.write(ins.outs[1], idx.reshape(ins.outs[1].shape))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (0.5 * (1.0 + np.tanh(0.5 * x))).astype(np.float32)


def _erf(x: np.ndarray) -> np.ndarray:
    from nprof.device.numerics import erf

    return erf(x)


_INV_SQRT_2PI = np.float32(1.0 / np.sqrt(2.0 * np.pi))
EXTRA_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tan": np.tan,
    "arctan": np.arctan,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "mish": lambda x: (x * np.tanh(np.logaddexp(np.float32(0), x))).astype(np.float32),
    "gelu_apprx_sigmoid": lambda x: (x * _sigmoid(np.float32(1.702) * x)).astype(np.float32),
    "silu_dx": lambda x: (_sigmoid(x) * (1 + x * (1 - _sigmoid(x)))).astype(np.float32),
    "gelu_dx": lambda x: (
        0.5 * (1 + _erf(x / np.float32(np.sqrt(2.0)))) + x * np.exp(-0.5 * x * x) * _INV_SQRT_2PI
    ).astype(np.float32),
    "erf_dx": lambda x: (np.float32(2.0 / np.sqrt(np.pi)) * np.exp(-x * x)).astype(np.float32),
}
EXTRA_ALU: dict[str, BinaryOp] = {
    "logical_xor": lambda a, b: np.logical_xor(np.not_equal(a, 0), np.not_equal(b, 0)).astype(np.float32),
    "fmod": np.fmod,
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
}


def sequence_bounds(ids: np.ndarray) -> np.ndarray:
    """[2, N]: start and exclusive end of each element's run of equal ids; padding (id 0) gets (N, -1)."""
    n = ids.size
    change = np.ones(n, bool)
    change[1:] = ids[1:] != ids[:-1]
    starts = np.maximum.accumulate(np.where(change, np.arange(n), 0))
    last = np.ones(n, bool)
    last[:-1] = ids[:-1] != ids[1:]
    ends = np.minimum.accumulate(np.where(last, np.arange(n) + 1, n)[::-1])[::-1]
    pad = ids == 0
    return np.stack([np.where(pad, n, starts), np.where(pad, -1, ends)])


def _sequence_bounds(ins: Instruction, mem: Memory) -> None:
    ids = _flat(mem, ins.ins[0])
    out = np.stack([sequence_bounds(row) for row in ids])
    mem.write(ins.outs[0], out.reshape(ins.outs[0].shape))


SELECTION_HANDLERS: dict[Opcode, Callable[[Instruction, Memory], None]] = {
    Opcode.SEQUENCE_BOUNDS: _sequence_bounds,
    Opcode.TENSOR_TENSOR_SCAN: _scan,
    Opcode.TENSOR_PARTITION_REDUCE: _partition_reduce,
    Opcode.MAX8: _max8,
    Opcode.FIND_INDEX8: _find_index8,
    Opcode.MATCH_REPLACE8: _match_replace8,
}
