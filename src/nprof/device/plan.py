"""The columnar execution plan of a Program on a Preset: what the timing loop needs, as flat lists.

Contract: `build_plan(program, preset) -> Plan` computes once per (program,
preset) every instruction's timeline slot (track), its duration in ns when it
runs alone (`arch.cost`; DMAs: transfer time at queue bandwidth, excluding the
fixed latency), its dependency latency, and for DMAs the bytes and whether they
touch HBM (for bandwidth sharing), and the static Profile columns (operand
text, bytes read/written per memory, FLOPs, DMA direction/tensor) so repeated
runs only reschedule. `plan_for` caches plans per live Program.
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
from nprof.arch.isa import COLLECTIVES, Engine, Instruction, Opcode
from nprof.arch.presets import Preset
from nprof.device.accinfo import AccessCache
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
_ATTR_SKIP = frozenset({"spill", "reload"})


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
    operands: list[str]  # display text of each instruction's operands
    rw: list[int]  # 6 per instruction: HBM/SBUF/PSUM bytes read, then HBM/SBUF/PSUM bytes written
    flops: dict[int, tuple[int, int]]  # index -> (model FLOPs, hardware FLOPs) for MATMUL/TRANSPOSE
    dma_rows: dict[int, tuple[str, int, str]]  # DMA index -> (direction, partitions, tensor)

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


def _attr_text(attrs: tuple) -> str:
    items = [f"{k}={v}" for k, v in attrs if k not in _ATTR_SKIP]
    return " ; " + " ".join(items) if items else ""


def build_plan(program: Program, preset: Preset) -> Plan:
    n = len(program.instructions)
    slot = [0] * n
    dur = [0.0] * n
    lat = [0.0] * n
    lat0 = [0.0] * n
    is_dma = [False] * n
    operands = [""] * n
    rw = [0] * (6 * n)
    flops: dict[int, tuple[int, int]] = {}
    dma_rows: dict[int, tuple[str, int, str]] = {}
    hbm_bytes: dict[int, int] = {}
    dep_lat = {e: cost.dependency_latency_ns(e, preset) for e in Engine}
    ns_per_cycle = {e: 1e9 / preset.clock_hz(e.value) for e in Engine}
    first_cc = FIRST_DMA_SLOT + preset.dma_queues
    cycles_memo: dict[tuple, float] = {}
    attr_memo: dict[tuple, str] = {}
    cache = AccessCache()
    get = cache.get
    pmax = preset.pmax
    dma_latency = preset.dma_latency_ns
    chunks_memo: dict[tuple[int, int], int] = {}
    DMA, TENSOR, CC = Engine.DMA, Engine.TENSOR, Engine.CC  # hot-loop aliases
    OP_DMA, OP_LD, OP_MM, OP_TR = Opcode.DMA_DIRECT2D, Opcode.LDWEIGHTS, Opcode.MATMUL, Opcode.TRANSPOSE
    for i, ins in enumerate(program.instructions):
        op = ins.opcode
        eng = ins.engine
        ii = [get(a) for a in ins.ins]
        oo = [get(a) for a in ins.outs]
        base = 6 * i
        for x in ii:
            rw[base + x.mem] += x.nbytes
        for x in oo:
            rw[base + 3 + x.mem] += x.nbytes
        if op is OP_DMA:
            if eng is not DMA:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} must run on a DMA queue, not {eng}")
            if not 0 <= ins.queue < preset.dma_queues:
                raise NprofError(
                    f"program {program.name!r}: {_where(i, ins)} uses DMA queue {ins.queue}; "
                    f"valid queues are 0..{preset.dma_queues - 1}"
                )
            if len(ii) != 1 or len(oo) != 1:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} needs one input and one output")
            src, dst = ins.ins[0], ins.outs[0]
            nbytes = oo[0].nbytes
            ck = (ii[0].sig, oo[0].sig)
            chunks = chunks_memo.get(ck)
            if chunks is None:
                chunks = chunks_memo[ck] = cost.dma_chunks(src, dst)
            slot[i] = FIRST_DMA_SLOT + ins.queue
            dur[i] = cost.dma_transfer_ns(nbytes, chunks, preset)
            lat[i] = lat0[i] = dma_latency
            is_dma[i] = True
            s_hbm, d_hbm = ii[0].mem == 0, oo[0].mem == 0
            if s_hbm or d_hbm:
                hbm_bytes[i] = nbytes
            dma_rows[i] = (
                f"{src.space.value}->{dst.space.value}",
                oo[0].partitions if not d_hbm else ii[0].partitions,
                src.tensor if s_hbm or not d_hbm else dst.tensor,
            )
            continue
        a = ins.attrs
        text = attr_memo.get(a)
        if text is None:
            text = attr_memo[a] = _attr_text(a) if a else ""
        operands[i] = ", ".join([x.text for x in oo]) + " <- " + ", ".join([x.text for x in ii]) + text
        if eng is CC or op in COLLECTIVES:
            slot[i] = first_cc + (ins.queue if ins.queue >= 0 else 0) % preset.cc_cores
            dur[i] = cost.instruction_ns(ins, preset) - preset.dma_latency_ns
            lat[i] = lat0[i] = preset.dma_latency_ns
            continue
        if op in _TENSOR_OPS:
            if eng is not TENSOR:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} must run on TensorE, not {eng}")
            slot[i] = SLOT_LD if op is OP_LD else SLOT_MM
            if op is OP_MM and len(ii) >= 2:
                m, nn = ii[0].free_elements, ii[1].free_elements
                flops[i] = (2 * ii[0].partitions * m * nn, 2 * pmax * m * nn)
                if oo and ins.attr("accumulate", False):
                    rw[base + oo[0].mem] += oo[0].nbytes
            elif op is OP_TR and ii:
                flops[i] = (0, 2 * pmax * ii[0].free_elements * ii[0].partitions)
        else:
            s = _ENGINE_SLOT.get(eng)
            if s is None:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} cannot run on engine {eng}")
            slot[i] = s
        key = (op, a, *[x.sig for x in ii], -1, *[x.sig for x in oo])
        cycles = cycles_memo.get(key)
        if cycles is None:
            try:
                cycles = cost.instruction_cycles(ins, preset)
            except (IndexError, KeyError, ValueError, TypeError, AttributeError) as exc:
                raise NprofError(f"program {program.name!r}: {_where(i, ins)} is malformed ({exc})") from exc
            cycles_memo[key] = cycles
        dur[i] = cycles * ns_per_cycle[eng]
        lat[i] = dep_lat[eng]
    tracks, engines = slot_names(preset)
    return Plan(
        preset=preset,
        slot=slot,
        dur=dur,
        lat=lat,
        lat0=lat0,
        deps=[ins.deps for ins in program.instructions],
        is_dma=is_dma,
        hbm_bytes=hbm_bytes,
        transposes=frozenset(i for i, f in flops.items() if program.instructions[i].opcode is Opcode.TRANSPOSE),
        slot_tracks=tracks,
        slot_engines=engines,
        operands=operands,
        rw=rw,
        flops=flops,
        dma_rows=dma_rows,
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
