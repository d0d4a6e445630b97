"""The instruction set of the virtual NeuronCore: engines, opcodes, operands.

This is the one small IR shared by every producer (the `nki` tracer, the
compiler) and the consumer (the `device` simulator). It describes *what* an
instruction computes; `arch.cost` says how long it takes.

Operands are `Access` patterns: a strided 2-D-or-more view of one buffer whose
first dimension is the partition dimension. The logical value of an Access is
an array of shape `(partitions, *sizes)` where `sizes` are the free-dim sizes.

* HBM: element `offset + p * partition_stride + sum(i_k * stride_k)` of the
  flat tensor named `tensor` (a `TensorDecl` of the Program).
* SBUF / PSUM: partition `partition_start + p` (consecutive partitions,
  `partition_stride` is 1), bytes from `offset + itemsize * sum(i_k * stride_k)`
  within that partition. `tensor` names the allocation (for display and
  dependency tracking only).

Semantics per opcode (ins/outs are Access tuples, attrs are named scalars;
"P" is the partition count, shapes are logical Access shapes):

* DMA_DIRECT2D (a DMA queue): outs[0] = ins[0] (same element count, dtype
  converted). attrs: spill (bool: saving an intermediate to HBM), reload (bool),
  transpose (bool: ins[0] [P, F] on chip, outs[0] [F, P] = ins[0].T; moved
  element by element, so every element is its own chunk in the cost model).
* LDWEIGHTS (TensorE, LoadStationary): loads ins[0] (the stationary [K, M])
  into the array; no output. Emitted before each MATMUL whose stationary
  operand differs from the previous MATMUL's.
* MATMUL (TensorE, MultiplyMoving): ins = (stationary [K, M], moving [K, N]),
  outs[0] is PSUM [M, N] (fp32); result = stationary.T @ moving, computed in
  fp32. attrs: accumulate (bool; True adds into the existing PSUM value,
  False overwrites).
* TRANSPOSE (TensorE): outs[0] [F, P] (PSUM) = ins[0] [P, F].T.
* ACTIVATE (ScalarE): outs[0] = func(ins[0] * scale + bias). attrs: func
  (one of ACTIVATION_FUNCS), scale (float, default 1.0), bias (float,
  default 0.0). ins[1], when present, is a per-partition [P, 1] bias added
  instead of the attr; ins[2], when present, a per-partition [P, 1] scale.
  attrs reduce_op ("add"|"max"|"min") with outs[1] [P, 1]: outs[1] = reduce of
  outs[0] over all free dims.
* TENSOR_TENSOR (VectorE, or GpSimdE): outs[0] = op(ins[0], ins[1]); attrs: op
  (one of ALU_OPS). Shapes equal.
* TENSOR_SCALAR (VectorE, ScalarE or GpSimdE): outs[0] = op1(op0(ins[0], s0), s1)
  where s0/s1 are attrs operand0/operand1 (floats) or, when ins[1]/ins[2] are
  present, per-partition [P, 1] values broadcast along the free dims. attrs:
  op0, operand0, op1 (optional), operand1, reverse0/reverse1 (bool: swap the
  operands of op0/op1, e.g. s0 - x).
* TENSOR_REDUCE (VectorE): outs[0] [P, 1] (or [P, *kept dims]) = reduce of
  ins[0] over free axes. attrs: op ("add"|"max"|"min"|"multiply"), axes
  (tuple of free-axis indices, 1-based over the logical shape: 1 is the first
  free dim), negate (bool).
* TENSOR_COPY (VectorE, ScalarE or GpSimdE): outs[0] = ins[0] (dtype cast).
* MEMSET (VectorE or GpSimdE): outs[0] = attrs value (float).
* IOTA (GpSimdE): outs[0][p, i...] = base + channel_multiplier * p +
  sum(i_k * step_k); attrs: base (int), channel_multiplier (int), steps
  (tuple of ints, one per free dim).
* AFFINE_SELECT (GpSimdE): outs[0] = where(cond, ins[0], fill) with
  cond = (offset + channel_multiplier * p + sum(i_k * step_k)) <cmp> 0; attrs:
  offset, channel_multiplier, steps, cmp ("ge"|"gt"|"le"|"lt"|"eq"|"ne"),
  fill (float).
* SELECT (VectorE): outs[0] = where(ins[0] != 0, ins[1], ins[2]).
* RECIPROCAL (VectorE): outs[0] = 1 / ins[0].
* BN_STATS (VectorE): outs[0] [P, 6] = (count, mean, variance*count) of the
  even and then of the odd free elements of ins[0] per partition (population
  variance; the hardware layout). BN_AGGR (VectorE): ins[0] [P, 3*k] holds k
  (count, mean, variance*count) triples; outs[0] [P, 2] = (mean, variance) of
  the union, combined exactly (Chan et al.).
* TENSOR_SCALAR with attrs reduce_op and outs[1] [P, 1]: outs[1] = reduce of
  outs[0] over all free dims (nisa.tensor_scalar_reduce).
* TENSOR_TENSOR_SCAN (VectorE): per partition over the flattened free axis,
  r[0] = op1(op0(ins[0][0], init), ins[1][0]), r[i] = op1(op0(ins[0][i],
  r[i-1]), ins[1][i]); init is attrs initial or ins[2] [P, 1]; attrs op0, op1.
* TENSOR_PARTITION_REDUCE (GpSimdE): outs[0] [1, F...] = reduce of ins[0] over
  the partition axis; attrs op.
* MAX8 (VectorE): outs[0] [P, 8] = the 8 largest free elements, descending.
  FIND_INDEX8 (VectorE): outs[0] [P, 8] = index of the first occurrence of
  each of ins[1]'s 8 values in ins[0] (flattened free axis).
  MATCH_REPLACE8 (VectorE): outs[0] = ins[0] with the first occurrence of each
  of ins[1]'s 8 values replaced by attrs imm; outs[1], when present, the
  indices.
* ALL_REDUCE / ALL_GATHER / REDUCE_SCATTER / ALL_TO_ALL (CC-cores): collective
  across the workers of attrs group (tuple of ranks; empty = all); ins[0] is
  this rank's HBM contribution, outs[0] its HBM result; attrs op (ALU op for
  reductions, default "add").
* EVENT_SEMAPHORE (Sync engine): a synchronisation point; no data; waits for
  its deps.
* Runtime addresses (`nprof.device.indirect`): a DMA_DIRECT2D or TENSOR_COPY
  with attrs `indirect` ("src" or "dst") has a second input, the last of
  `ins`: an integer SBUF Access of runtime offsets. [P, 1] with P > 1
  ("vector", HBM only): partition p of the indirect operand is moved by
  `dyn_stride * idx[p]` elements (a gather/scatter of rows, one descriptor
  per row); one element ("scalar"): the whole operand is moved by
  `dyn_stride * idx` elements. The indirect operand's Access is its pattern
  at offset 0 on the dynamic axis, whose extent is `dyn_size`, on which the
  pattern itself spans coordinates `dyn_lo..dyn_hi`; `dyn_axis` names the
  axis in messages. A shifted coordinate outside [0, dyn_size) is an error,
  or (attrs `oob` "skip") its partition's row is neither read nor written.
  attrs `rmw` "add" (with or without `indirect`): the destination is added
  to (duplicate indices accumulate), not overwritten.
* GATHER (GpSimdE): outs[0] [P, G...] = per partition, ins[0]'s free
  elements (flattened) at the positions ins[1] [P, G...] holds.
* LOCAL_GATHER (GpSimdE): per group of 16 partitions, the group's ins[1]
  [P, K] indices flattened partition-first, the first attrs `valid` of them;
  outs[0] [P, valid * elems]: partition p reads attrs `elems` consecutive
  elements of its own ins[0] row from each index (an element offset).
* RANGE_SELECT (VectorE): outs[0] = where(cmp0(i, ins[1]) & cmp1(i, ins[2]),
  ins[0], fill) with i = attrs range_start + the flattened free index and
  ins[1]/ins[2] [P, 1] bounds; outs[1..] [P, 1], when present, = the max of
  outs[0] per partition, folded with ins[3] (the accumulator) when attrs
  accumulate. attrs cmp0/cmp1 ("is_equal"|"is_lt"|"is_le"|"is_gt"|"is_ge").
* SEQUENCE_BOUNDS (GpSimdE): ins[0] [1, N] segment ids (0 = padding);
  outs[0] [1, 2, N]: per element the start index and the exclusive end index
  of its run of equal ids; padding gets (N, -1).
* STREAM_SHUFFLE (VectorE): per quadrant of 32 partitions, outs[0] row i =
  ins[0] row attrs `shuffle`[i] of the same quadrant (255: row i unchanged).

Producers compute `deps` (indices of earlier instructions that must finish
first: read-after-write, write-after-read and write-after-write on overlapping
buffer regions); the device runs each engine's instructions in program order and
starts one when its engine (or DMA queue) is free and all its deps are done.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Engine(StrEnum):
    """Execution units of a NeuronCore; values are the Profile `engine` names."""

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    SYNC = "sync"
    DMA = "dma"
    CC = "cc"


class Space(StrEnum):
    """Memories an Access can address."""

    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"


SPACES = (Space.HBM, Space.SBUF, Space.PSUM)  # a space's code in columnar accesses is its index here


class Opcode(StrEnum):
    """Opcodes, named as the real profiler names them."""

    DMA_DIRECT2D = "DMA_DIRECT2D"
    LDWEIGHTS = "LDWEIGHTS"
    MATMUL = "MATMUL"
    TRANSPOSE = "TRANSPOSE"
    ACTIVATE = "ACTIVATE"
    TENSOR_TENSOR = "TENSOR_TENSOR"
    TENSOR_SCALAR = "TENSOR_SCALAR"
    TENSOR_REDUCE = "TENSOR_REDUCE"
    TENSOR_COPY = "TENSOR_COPY"
    MEMSET = "MEMSET"
    IOTA = "IOTA"
    AFFINE_SELECT = "AFFINE_SELECT"
    SELECT = "SELECT"
    RECIPROCAL = "RECIPROCAL"
    BN_STATS = "BN_STATS"
    BN_AGGR = "BN_AGGR"
    TENSOR_TENSOR_SCAN = "TENSOR_TENSOR_SCAN"
    TENSOR_PARTITION_REDUCE = "TENSOR_PARTITION_REDUCE"
    MAX8 = "MAX8"
    FIND_INDEX8 = "FIND_INDEX8"
    MATCH_REPLACE8 = "MATCH_REPLACE8"
    ALL_REDUCE = "ALL_REDUCE"
    ALL_GATHER = "ALL_GATHER"
    REDUCE_SCATTER = "REDUCE_SCATTER"
    ALL_TO_ALL = "ALL_TO_ALL"
    EVENT_SEMAPHORE = "EVENT_SEMAPHORE"
    GATHER = "GATHER"
    LOCAL_GATHER = "LOCAL_GATHER"
    STREAM_SHUFFLE = "STREAM_SHUFFLE"
    SEQUENCE_BOUNDS = "SEQUENCE_BOUNDS"
    RANGE_SELECT = "RANGE_SELECT"
    QUANTIZE_MX = "QUANTIZE_MX"  # VectorE (NeuronCore-v4): bf16/fp16 -> MXFP8 data and scales (nprof.device.mx)


COLLECTIVES = frozenset({Opcode.ALL_REDUCE, Opcode.ALL_GATHER, Opcode.REDUCE_SCATTER, Opcode.ALL_TO_ALL})

ACTIVATION_FUNCS = (
    "copy", "exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_tanh", "silu", "sqrt", "rsqrt",
    "reciprocal", "square", "abs", "negative", "sign", "erf", "softplus", "sin", "cos",
    "tan", "arctan", "floor", "ceil", "trunc", "mish", "gelu_apprx_sigmoid", "silu_dx", "gelu_dx", "erf_dx",
)  # fmt: skip

ALU_OPS = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "bypass",
    "is_equal", "not_equal", "is_ge", "is_gt", "is_le", "is_lt", "logical_and", "logical_or",
    "bitwise_and", "bitwise_or", "abs_max", "mod",
    "bitwise_xor", "logical_xor", "left_shift", "right_shift", "fmod", "abs_min",
)  # fmt: skip

DTYPES = (
    "float32",
    "bfloat16",
    "float16",
    "float8_e4m3",
    "float8_e5m2",
    "int32",
    "int16",
    "int8",
    "uint8",
    "uint16",
    "uint32",
    # MX (OCP Microscaling v1.0) types of NeuronCore-v4 (NKI API reference: nki.language dtypes; nprof.nki.mx):
    "mxfp8_e4m3_x4",  # nl.float8_e4m3fn_x4: four float8_e4m3fn in 32 bits (element j in byte j)
    "mxfp8_e5m2_x4",  # nl.float8_e5m2_x4: four float8_e5m2 in 32 bits
    "mxfp4_e2m1_x4",  # nl.float4_e2m1fn_x4: four float4_e2m1fn in 16 bits (element j in bits 4j..4j+3)
    "float8_e8m0fnu",  # the MX shared scale: 2**(byte - 127), 255 = NaN
)
PACKED_MX = frozenset({"mxfp8_e4m3_x4", "mxfp8_e5m2_x4", "mxfp4_e2m1_x4"})  # 4 values per item: MX instructions only

ITEMSIZE = {
    "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3": 1, "float8_e5m2": 1,
    "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "uint16": 2, "uint32": 4,
    "mxfp8_e4m3_x4": 4, "mxfp8_e5m2_x4": 4, "mxfp4_e2m1_x4": 2, "float8_e8m0fnu": 1,
}  # fmt: skip


def numpy_dtype(name: str) -> Any:
    """The numpy dtype of an ISA dtype name (bfloat16/float8 from ml_dtypes; float8_e4m3 is OCP E4M3FN)."""
    import ml_dtypes
    import numpy as np

    special = {
        "bfloat16": ml_dtypes.bfloat16,
        "float8_e4m3": ml_dtypes.float8_e4m3fn,
        "float8_e5m2": ml_dtypes.float8_e5m2,
        "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
    }
    if name not in ITEMSIZE:
        raise KeyError(name)
    if name in PACKED_MX:  # raw packed bits, a distinct numpy type per MX type (a one-field record)
        return np.dtype([(name, f"<u{ITEMSIZE[name]}")])
    return np.dtype(special.get(name, name))


@dataclass(frozen=True, slots=True)
class Access:
    """A strided view of one buffer; logical shape `(partitions, *sizes)` (see module doc)."""

    space: Space  # which memory
    tensor: str  # HBM tensor name, or SBUF/PSUM allocation name
    dtype: str  # element type, one of DTYPES
    offset: int  # HBM: element offset in the flat tensor; SBUF/PSUM: byte offset in each partition
    partitions: int  # size of the partition dimension
    free: tuple[tuple[int, int], ...]  # (stride, size) per free dim, in elements, outermost first
    partition_start: int = 0  # SBUF/PSUM: first partition; HBM: 0
    partition_stride: int = 1  # HBM: element stride of the partition dim; SBUF/PSUM: 1

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *(size for _, size in self.free))

    @property
    def free_elements(self) -> int:
        """Elements per partition (N in the cost model)."""
        n = 1
        for _, size in self.free:
            n *= size
        return n

    @property
    def elements(self) -> int:
        return self.partitions * self.free_elements

    @property
    def nbytes(self) -> int:
        return self.elements * ITEMSIZE[self.dtype]


Scalar = bool | int | float | str | tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Instruction:
    """One instruction of a Program; its id is its index in `Program.instructions`."""

    engine: Engine  # the engine (or DMA / CC) that executes it
    opcode: Opcode
    outs: tuple[Access, ...] = ()  # written operands
    ins: tuple[Access, ...] = ()  # read operands
    attrs: tuple[tuple[str, Scalar], ...] = ()  # opcode-specific attributes (see module doc)
    deps: tuple[int, ...] = ()  # indices of earlier instructions that must finish first
    queue: int = -1  # DMA queue index (0..15) for DMA_DIRECT2D; -1 otherwise
    source: str | None = None  # nki_source_location: "file.py:LINE" of the user's kernel code
    layer: str | None = None  # module path for compiled graphs, e.g. "model.fc1"
    hlo_name: str | None = None  # graph node for compiled graphs, e.g. "%addmm_1 = addmm(...)"

    def attr(self, name: str, default: Scalar | None = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default


def attrs(**values: Scalar | None) -> tuple[tuple[str, Scalar], ...]:
    """Build an `attrs` tuple from keyword arguments, dropping None values, in a stable order."""
    return tuple(sorted((k, v) for k, v in values.items() if v is not None))
