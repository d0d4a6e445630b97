"""Enums, constants and operator names of `nki.isa` (re-exported by `nprof.nki.isa`).

Engines, reduce commands, DMA modes; `alu_name`/`act_name`/`reduce_name` turn an `op=` argument (an `nl`
function, a numpy ufunc or an ISA name) into the ISA's operator name, or raise a KernelError.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from nprof.arch.isa import ACTIVATION_FUNCS, ALU_OPS, Engine
from nprof.nki import trace as _trace
from nprof.nki.source import kernel_error


class engine(enum.IntEnum):
    """Neuron Device engines (values as in AWS's API)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5


_ENGINES = {engine.tensor: Engine.TENSOR, engine.vector: Engine.VECTOR, engine.scalar: Engine.SCALAR,
            engine.gpsimd: Engine.GPSIMD}  # fmt: skip
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.vector, engine.scalar, engine.gpsimd
unknown_engine = engine.unknown


def device_engine(value: object) -> Any:
    """The device `Engine` an `nki.isa.engine` member names; any other value (the user's) is returned unchanged."""
    return _ENGINES.get(value, value) if isinstance(value, engine) else value


dma_engine = "dma"  # the DMA queues (a value for `engine=` where AWS accepts it)


class nc_version(enum.IntEnum):
    """NeuronCore generations: gen2 = NeuronCore-v2 (trn1 preset), gen3 = NeuronCore-v3 (trn2), gen4 =
    NeuronCore-v4 (trn3)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation the running kernel is traced for (from the builder's preset)."""
    return {"trn2": nc_version.gen3, "trn3": nc_version.gen4}.get(_trace.current().preset_name, nc_version.gen2)


class reduce_cmd(enum.IntEnum):
    """Accumulator-register commands of ScalarE/VectorE reductions."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


class dge_mode(enum.IntEnum):
    """Descriptor-generation mode of a DMA (a compiler choice; nprof does not model descriptor generation)."""

    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(enum.IntEnum):
    """What a DMA does with out-of-bounds indices: error (nprof checks bounds at trace time) or skip."""

    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    """TensorE performance modes (beta 2): none, or FP8 double-row (NeuronCore-v3+)."""

    none = "none"
    double_row = "double_row"


class fp32:
    """FP32 constants: `fp32.min` is the most negative finite float32 (bit pattern 0xff7fffff)."""

    min = float(np.finfo(np.float32).min)


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
_NP_REDUCE = {np.sum: "add", np.prod: "multiply", np.amax: "max", np.amin: "min", np.max: "max", np.min: "min"}
# (numpy reductions as reduce_op: AWS's SD attention passes np.sum; np.amax is range_select's default)
_REDUCE = {"add": "add", "maximum": "max", "minimum": "min", "max": "max", "min": "min", "multiply": "multiply"}


def alu_name(op: Any) -> str:
    name = getattr(op, "_nki_alu", None) or _NP_ALU.get(op) or (op if isinstance(op, str) else None)
    name = {"max": "maximum", "min": "minimum"}.get(name, name) if name else None
    if name not in ALU_OPS:
        raise kernel_error(f"unsupported ALU operator {op!r}; use one of nl.add, nl.multiply, nl.maximum, ...")
    return name


def scalar_alu_name(op: Any, operand: Any) -> str:
    """`alu_name` for a tensor_scalar op with its scalar operand. NKI's operator table ("Supported Math
    Operators for NKI ISA") lists Absolute (`nl.abs`) among the Vector/Scalar engine ALU operators; with a
    0 operand (AWS's rmsnorm_quant: `op0=nl.abs, operand0=0.0`) it is nprof's abs_max, max(|x|, |0|) = |x|.
    Another operand is refused: what the engine does with it is not documented."""
    if (getattr(op, "_nki_act", None) or _NP_ACT.get(op)) == "abs":
        if isinstance(operand, int | float | np.number) and float(operand) == 0.0:
            return "abs_max"
        raise kernel_error(f"nl.abs as an ALU operator is modelled with a 0 operand only (|x|), got {operand!r}")
    return alu_name(op)


def act_name(op: Any) -> str:
    name = getattr(op, "_nki_act", None) or _NP_ACT.get(op) or (op if isinstance(op, str) else None)
    if name is None and getattr(op, "__name__", None) == "copy":
        name = "copy"
    if name not in ACTIVATION_FUNCS:
        raise kernel_error(f"unsupported activation function {op!r}; use nl.exp, nl.tanh, nl.gelu, ...")
    return name


def reduce_name(op: Any) -> str:
    name = getattr(op, "_nki_reduce", None) or getattr(op, "_nki_alu", None) or _NP_ALU.get(op)
    name = name or _NP_REDUCE.get(op) or (op if isinstance(op, str) else None)
    if name not in _REDUCE:
        raise kernel_error(f"unsupported reduce operator {op!r}; use nl.add, nl.max or nl.min")
    return _REDUCE[name]
