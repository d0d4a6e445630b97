"""The columnar execution plan of a Program on a Preset: what the timing loop needs, as flat lists.

Contract: `build_plan(program, preset) -> Plan` computes once per (program,
preset) every instruction's timeline slot (track), its duration in ns when it
runs alone (`arch.cost`; DMAs: transfer time at queue bandwidth, excluding the
fixed latency), its dependency latency, and for DMAs the bytes and whether they
touch HBM (for bandwidth sharing). `plan_for` caches plans per live Program.
Malformed instructions (engine/opcode mismatch, DMA queue out of range) raise
`NprofError` naming the instruction.

Slots (timeline rows): 0 tensor.stationary (LDWEIGHTS), 1 tensor.moving
(MATMUL, TRANSPOSE), 2 vector, 3 scalar, 4 gpsimd, 5 sync, then one per DMA
queue ("q<k>"), then one per CC-core ("cc.<k>"). Multi-worker runs add
engines after these without changing the existing numbering.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from nprof.arch import cost
from nprof.arch.isa import COLLECTIVES, Engine, Instruction, Opcode, Space
from nprof.arch.presets import Preset
from nprof.errors import NprofError
from nprof.program.model import Program

SLOT_LD, SLOT_MM, SLOT_VECTOR, SLOT_SCALAR, SLOT_GPSIMD, SLOT_SYNC = range(6)
FIRST_DMA_SLOT = 6
_ENGINE_SLOT = {
    Engine.VECTOR: SLOT_VECTOR,
    Engine.SCALAR: SLOT_SCALAR,
    Engine.GPSIMD: SLOT_GPSIMD,
    Engine.SYNC: SLOT_SYNC,
}
_TENSOR_OPS = frozenset({Opcode.LDWEIGHTS, Opcode.MATMUL, Opcode.TRANSPOSE})


@dataclass(frozen=True)
class Plan:
    """Per-instruction columns (lists indexed by program index) plus slot metadata."""

    preset: Preset
    slot: list[int]  # timeline slot of each instruction
    dur: list[float]  # ns when running alone (DMA/CC: transfer only)
    lat: list[float]  # ns between the last dependency's end and the earliest start
    lat0: list[float]  # ns from time 0 to the earliest start of an instruction without deps (DMA latency)
    deps: list[tuple[int, ...]]
    is_dma: list[bool]  # DMA_DIRECT2D
    hbm_bytes: dict[int, int]  # DMA index -> bytes moved to/from HBM (only DMAs touching HBM)
    transposes: frozenset[int]  # indices of TRANSPOSE instructions (they occupy both TensorE tracks)
    slot_tracks: tuple[str, ...]  # track name per slot
    slot_engines: tuple[str, ...]  # Profile engine name per slot ("dma" for queues)

    @property
    def n(self) -> int:
        return len(self.slot)


def slot_names(preset: Preset) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tracks = ["tensor.stationary", "tensor.moving", "vector", "scalar", "gpsimd", "sync"]
    engines = ["tensor", "tensor", "vector", "scalar", "gpsimd", "sync"]
    tracks += [f"q{k}" for k in range(preset.dma_queues)]
    engines += ["dma"] * preset.dma_queues
    tracks += [f"cc.{k}" for k in range(preset.cc_cores)]
    engines += ["cc"] * preset.cc_cores
    return tuple(tracks), tuple(engines)


def _where(i: int, ins: Instruction) -> str:
    return f"instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"


def build_plan(program: Program, preset: Preset) -> Plan:
    n = len(program.instructions)
    slot = [0] * n
    dur = [0.0] * n
    lat = [0.0] * n
    lat0 = [0.0] * n
    is_dma = [False] * n
    hbm_bytes: dict[int, int] = {}
    dep_lat = {e: cost.dependency_latency_ns(e, preset) for e in Engine}
    clocks = {e: 1e9 / preset.clock_hz(e.value) for e in Engine}
    first_cc = FIRST_DMA_SLOT + preset.dma_queues
    memo: dict[tuple, float] = {}
    for i, ins in enumerate(program.instructions):
        op = ins.opcode
        eng = ins.engine
        if op is Opcode.DMA_DIRECT2D:
            if eng is not Engine.DMA:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} must run on a DMA queue, not {eng}")
            if not 0 <= ins.queue < preset.dma_queues:
                raise NprofError(
                    f"program {program.name!r}: {_where(i, ins)} uses DMA queue {ins.queue}; "
                    f"valid queues are 0..{preset.dma_queues - 1}"
                )
            if len(ins.ins) != 1 or len(ins.outs) != 1:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} needs one input and one output")
            src, dst = ins.ins[0], ins.outs[0]
            nbytes = dst.nbytes
            slot[i] = FIRST_DMA_SLOT + ins.queue
            dur[i] = cost.dma_transfer_ns(nbytes, cost.dma_chunks(src, dst), preset)
            lat[i] = lat0[i] = preset.dma_latency_ns
            is_dma[i] = True
            if src.space is Space.HBM or dst.space is Space.HBM:
                hbm_bytes[i] = nbytes
            continue
        if op in COLLECTIVES or eng is Engine.CC:
            slot[i] = first_cc + (ins.queue if ins.queue >= 0 else 0) % preset.cc_cores
            dur[i] = cost.instruction_ns(ins, preset) - preset.dma_latency_ns
            lat[i] = lat0[i] = preset.dma_latency_ns
            continue
        if op in _TENSOR_OPS:
            if eng is not Engine.TENSOR:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} must run on TensorE, not {eng}")
            slot[i] = SLOT_LD if op is Opcode.LDWEIGHTS else SLOT_MM
        else:
            s = _ENGINE_SLOT.get(eng)
            if s is None:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} cannot run on engine {eng}")
            slot[i] = s
        key = (op, ins.ins, ins.outs, ins.attrs)
        cycles = memo.get(key)
        if cycles is None:
            try:
                cycles = cost.instruction_cycles(ins, preset)
            except (IndexError, KeyError, ValueError, TypeError) as exc:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} is malformed ({exc})") from exc
            memo[key] = cycles
        dur[i] = cycles * clocks[eng]
        lat[i] = dep_lat[eng]
    tracks, engines = slot_names(preset)
    return Plan(
        preset,
        slot,
        dur,
        lat,
        lat0,
        [ins.deps for ins in program.instructions],
        is_dma,
        hbm_bytes,
        frozenset(i for i, ins in enumerate(program.instructions) if ins.opcode is Opcode.TRANSPOSE),
        tracks,
        engines,
    )


_CACHE: dict[tuple[int, str], tuple[weakref.ref, Plan]] = {}


def plan_for(program: Program, preset: Preset) -> Plan:
    """`build_plan`, cached while `program` is alive (keyed by identity and preset)."""
    key = (id(program), repr(preset))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is program:
        return hit[1]
    plan = build_plan(program, preset)
    _CACHE[key] = (weakref.ref(program, lambda _ref, k=key: _CACHE.pop(k, None)), plan)
    return plan
