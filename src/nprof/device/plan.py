"""The columnar execution plan of a Program on a Preset: what the timing loop needs, as flat lists.

Contract: `build_plan(program, preset) -> Plan` computes once per (program,
preset) every instruction's timeline slot (track), its duration in ns when it
runs alone (`arch.cost`; DMAs: transfer time alone on its engines, excluding the
fixed latency), its dependency latency, for DMAs their rate alone (for sharing
the DMA engines and HBM), and the static Profile columns (operand text,
bytes read/written per memory, FLOPs, DMA direction/tensor) so repeated runs
only reschedule. `plan_for` caches plans per live Program.
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
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from nprof.arch import cost
from nprof.arch.isa import COLLECTIVES, Engine, Instruction, Opcode
from nprof.arch.presets import Preset
from nprof.device.accinfo import VALUE_KEY, AccessCache
from nprof.errors import NprofError
from nprof.program.model import Program
from nprof.progress import progress

SLOT_LD, SLOT_MM, SLOT_VECTOR, SLOT_SCALAR, SLOT_GPSIMD, SLOT_SYNC = range(6)
FIRST_DMA_SLOT = 6
_ENGINE_SLOT = {
    Engine.VECTOR: SLOT_VECTOR,
    Engine.SCALAR: SLOT_SCALAR,
    Engine.GPSIMD: SLOT_GPSIMD,
    Engine.SYNC: SLOT_SYNC,
}
_TENSOR_OPS = frozenset({Opcode.LDWEIGHTS, Opcode.MATMUL, Opcode.TRANSPOSE})
_CHUNK = 1 << 16  # instructions per progress step
_ATTR_SKIP = frozenset({"spill", "reload"})


@dataclass(frozen=True)
class Plan:
    """Per-instruction columns (indexed by program index) plus slot metadata."""

    preset: Preset
    slot: list[int]  # timeline slot of each instruction
    dur: list[float]  # ns when running alone (DMA/CC: transfer only)
    lat: list[float]  # ns between the last dependency's end and the earliest start
    lat0: list[float]  # ns from time 0 to the earliest start of an instruction without deps (DMA latency)
    deps: list[tuple[int, ...]]
    is_dma: np.ndarray  # bool: DMA_DIRECT2D
    dma_rate: dict[int, float]  # DMA index -> bytes/ns it moves alone (payload + chunk overhead, see arch.cost)
    transposes: frozenset[int]  # indices of TRANSPOSE instructions (they occupy both TensorE tracks)
    slot_tracks: tuple[str, ...]  # track name per slot
    slot_engines: tuple[str, ...]  # Profile engine name per slot ("dma" for queues)
    operands: list[str]  # display text of each instruction's operands ("" for DMAs)
    rw: np.ndarray  # int64 [n, 6]: HBM/SBUF/PSUM bytes read, then HBM/SBUF/PSUM bytes written
    flops: np.ndarray  # int64: model FLOPs (MATMUL)
    hw_flops: np.ndarray  # int64: hardware FLOPs (MATMUL, TRANSPOSE)
    dma_rows: dict[int, tuple[str, int, str]]  # DMA index -> (direction, partitions, tensor)
    opcodes: list[str]  # opcode name of each instruction
    deps_offsets: np.ndarray  # int64 [n + 1]: deps of instruction i are deps_flat[offsets[i]:offsets[i + 1]]
    deps_flat: np.ndarray  # int64

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


class _Template(NamedTuple):
    """Everything about an instruction that depends only on its opcode, engine, attrs, queue and shapes."""

    slot: int
    dur: float
    lat: float
    lat0: float
    is_dma: bool
    rw: tuple[int, int, int, int, int, int]
    flops: int
    hw_flops: int
    attr_text: str
    direction: str  # DMA: "hbm->sbuf" ...
    is_transpose: bool = False
    opcode: str = ""
    dma_rate: float = 0.0  # DMA: bytes/ns alone, counting chunk overhead as bytes


def _template(program: Program, preset: Preset, i: int, ins: Instruction, ii: list, oo: list) -> _Template:
    """Check one instruction and compute its shape-dependent columns (NprofError when malformed)."""
    op, eng, name = ins.opcode, ins.engine, program.name
    rw = [0] * 6
    for x in ii:
        rw[x.mem] += x.nbytes
    for x in oo:
        rw[3 + x.mem] += x.nbytes
    if op is Opcode.DMA_DIRECT2D:
        if eng is not Engine.DMA:
            raise NprofError(f"program {name!r}: {_where(i, ins)} must run on a DMA queue, not {eng}")
        if not 0 <= ins.queue < preset.dma_queues:
            raise NprofError(
                f"program {name!r}: {_where(i, ins)} uses DMA queue {ins.queue}; "
                f"valid queues are 0..{preset.dma_queues - 1}"
            )
        if len(ii) != 1 or len(oo) != 1:
            raise NprofError(f"program {name!r}: {_where(i, ins)} needs one input and one output")
        src, dst = ins.ins[0], ins.outs[0]
        chunks = cost.dma_chunks(src, dst)
        transfer = cost.dma_transfer_ns(oo[0].nbytes, chunks, preset)
        direction = f"{src.space.value}->{dst.space.value}"
        lat = preset.dma_latency_ns
        rate = (oo[0].nbytes + chunks * preset.dma_chunk_overhead_bytes) / transfer if transfer > 0 else 0.0
        return _Template(
            FIRST_DMA_SLOT + ins.queue, transfer, lat, lat, True, tuple(rw), 0, 0, "", direction, dma_rate=rate
        )
    attr_text = _attr_text(ins.attrs) if ins.attrs else ""
    if eng is Engine.CC or op in COLLECTIVES:
        first_cc = FIRST_DMA_SLOT + preset.dma_queues
        s = first_cc + (ins.queue if ins.queue >= 0 else 0) % preset.cc_cores
        lat = preset.dma_latency_ns
        dur = cost.instruction_ns(ins, preset) - lat
        return _Template(s, dur, lat, lat, False, tuple(rw), 0, 0, attr_text, "")
    flops = hw = 0
    if op in _TENSOR_OPS:
        if eng is not Engine.TENSOR:
            raise NprofError(f"program {name!r}: {_where(i, ins)} must run on TensorE, not {eng}")
        s = SLOT_LD if op is Opcode.LDWEIGHTS else SLOT_MM
        if op is Opcode.MATMUL and len(ii) >= 2:
            m, n = ii[0].free_elements, ii[1].free_elements
            _check_matmul(name, i, ins, ii, oo, preset)
            flops, hw = 2 * ii[0].partitions * m * n, 2 * preset.pmax * m * n
            if oo and ins.attr("accumulate", False):
                rw[oo[0].mem] += oo[0].nbytes
        elif op is Opcode.TRANSPOSE and ii:
            hw = 2 * preset.pmax * ii[0].free_elements * ii[0].partitions
    else:
        found = _ENGINE_SLOT.get(eng)
        if found is None:
            raise NprofError(f"program {name!r}: {_where(i, ins)} cannot run on engine {eng}")
        s = found
    try:
        cycles = cost.instruction_cycles(ins, preset)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise NprofError(f"program {name!r}: {_where(i, ins)} is malformed ({exc})") from exc
    dur = cycles * 1e9 / preset.clock_hz(eng.value)
    lat = cost.dependency_latency_ns(eng, preset)
    return _Template(s, dur, lat, 0.0, False, tuple(rw), flops, hw, attr_text, "", op is Opcode.TRANSPOSE)


def _check_matmul(name: str, i: int, ins: Instruction, ii: list, oo: list, preset: Preset) -> None:
    """The TensorE tile limits: K <= pmax, stationary free <= 128, moving free <= 512, result in PSUM."""
    k, m, n = ii[0].partitions, ii[0].free_elements, ii[1].free_elements
    problem = None
    if k > preset.pmax or ii[1].partitions != k:
        problem = f"contraction sizes {k} and {ii[1].partitions} must be equal and <= {preset.pmax}"
    elif m > preset.gemm_stationary_fmax:
        problem = f"stationary free size {m} exceeds {preset.gemm_stationary_fmax}"
    elif n > preset.gemm_moving_fmax:
        problem = f"moving free size {n} exceeds {preset.gemm_moving_fmax}"
    elif not oo or oo[0].mem != 2:
        problem = "its result must go to PSUM"
    if problem:
        raise NprofError(f"program {name!r}: {_where(i, ins)}: {problem}; split the matmul into legal tiles")


def build_plan(program: Program, preset: Preset) -> Plan:
    """One pass over the instructions; shape-dependent work is memoised per distinct template key."""
    instrs = program.instructions
    n = len(instrs)
    cache = AccessCache()
    get, by_value = cache.get, cache.by_value.get
    memo: dict[tuple, int] = {}
    templates: list[_Template] = []
    which = [0] * n
    operands = [""] * n
    dma_rows: dict[int, tuple[str, int, str]] = {}
    sig, text = itemgetter(0), itemgetter(3)
    with progress(n, f"planning {program.name}") as bar:
        for start in range(0, n, _CHUNK):
            for i, ins in enumerate(instrs[start : start + _CHUNK], start):
                a_in, a_out = ins.ins, ins.outs
                ii = list(map(by_value, map(VALUE_KEY, a_in)))  # C-level lookups; misses (None) fall back
                if None in ii:
                    ii = [get(a) for a in a_in]
                oo = list(map(by_value, map(VALUE_KEY, a_out)))
                if None in oo:
                    oo = [get(a) for a in a_out]
                # enum members hash in Python code; their ids (singletons) hash in C
                key = (id(ins.opcode), id(ins.engine), ins.attrs, ins.queue, *map(sig, ii), -1, *map(sig, oo))
                k = memo.get(key)
                if k is None:
                    k = memo[key] = len(templates)
                    templates.append(_template(program, preset, i, ins, ii, oo)._replace(opcode=ins.opcode.value))
                which[i] = k
                t = templates[k]
                if t.is_dma:
                    d_hbm = oo[0].mem == 0
                    tensor = a_in[0].tensor if ii[0].mem == 0 or not d_hbm else a_out[0].tensor
                    dma_rows[i] = (t.direction, ii[0].partitions if d_hbm else oo[0].partitions, tensor)
                else:
                    operands[i] = ", ".join(map(text, oo)) + " <- " + ", ".join(map(text, ii)) + t.attr_text
            bar.advance(min(_CHUNK, n - start))
    deps = [ins.deps for ins in instrs]
    offsets, flat = _check_deps(program.name, deps)
    idx = np.asarray(which, np.int64)
    col = {f: np.asarray([getattr(t, f) for t in templates]) for f in ("slot", "dur", "lat", "lat0", "is_dma")}
    rw = np.asarray([t.rw for t in templates], np.int64).reshape(-1, 6)
    fl = np.asarray([(t.flops, t.hw_flops) for t in templates], np.int64).reshape(-1, 2)
    is_dma = col["is_dma"][idx].astype(bool) if n else np.zeros(0, bool)
    is_tr = {k for k, t in enumerate(templates) if t.is_transpose}
    tracks, engines = slot_names(preset)
    return Plan(
        preset=preset,
        slot=col["slot"][idx].tolist() if n else [],
        dur=col["dur"][idx].astype(np.float64).tolist() if n else [],
        lat=col["lat"][idx].astype(np.float64).tolist() if n else [],
        lat0=col["lat0"][idx].astype(np.float64).tolist() if n else [],
        deps=deps,
        is_dma=is_dma,
        dma_rate={i: templates[which[i]].dma_rate for i in dma_rows},
        transposes=frozenset(i for i in range(n) if which[i] in is_tr) if is_tr else frozenset(),
        slot_tracks=tracks,
        slot_engines=engines,
        operands=operands,
        rw=rw[idx] if n else np.zeros((0, 6), np.int64),
        flops=fl[idx, 0] if n else np.zeros(0, np.int64),
        hw_flops=fl[idx, 1] if n else np.zeros(0, np.int64),
        dma_rows=dma_rows,
        opcodes=np.asarray([t.opcode for t in templates], object)[idx].tolist() if n else [],
        deps_offsets=offsets,
        deps_flat=flat,
    )


def _check_deps(name: str, deps: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays of the dependency lists; NprofError if one does not point at an earlier instruction."""
    lengths = np.fromiter(map(len, deps), np.int64, len(deps))
    offsets = np.zeros(len(deps) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(chain.from_iterable(deps), np.int64, int(offsets[-1]))
    owner = np.repeat(np.arange(len(deps), dtype=np.int64), lengths)
    bad = np.flatnonzero((flat < 0) | (flat >= owner))
    if len(bad):
        i, d = int(owner[bad[0]]), int(flat[bad[0]])
        raise NprofError(f"program {name!r}: instruction {i} depends on {d}, not an earlier one")
    return offsets, flat


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
