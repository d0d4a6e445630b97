"""Enums and constants of `nki.isa` (re-exported by `nprof.nki.isa`): engines, reduce commands, DMA modes."""

from __future__ import annotations

import enum

import numpy as np

from nprof.arch.isa import Engine
from nprof.nki import trace as _trace


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
dma_engine = "dma"  # the DMA queues (a value for `engine=` where AWS accepts it)


class nc_version(enum.IntEnum):
    """NeuronCore generations: gen2 = NeuronCore-v2 (trn1 preset), gen3 = NeuronCore-v3 (trn2 preset)."""

    gen2 = 2
    gen3 = 3


def get_nc_version() -> nc_version:
    """The NeuronCore generation the running kernel is traced for (from the builder's preset)."""
    return nc_version.gen3 if _trace.current().preset_name == "trn2" else nc_version.gen2


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
