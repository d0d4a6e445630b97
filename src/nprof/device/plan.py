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

Instructions equal in everything the plan reads (opcode, engine, attrs, queue and
operand values) share a *signature*: the per-instruction work is a few C-level
passes (attribute getters, one dict lookup per instruction); costs, operand text
and DMA facts are computed once per signature (`device.template`) and spread
with numpy indexing. Value columns that repeat (opcode, operand text, DMA
direction/tensor) are stored per signature with a `code` per instruction.

Slots (timeline rows): 0 tensor.stationary (LDWEIGHTS), 1 tensor.moving
(MATMUL, TRANSPOSE), 2 vector, 3 scalar, 4 gpsimd, 5 sync, then one per DMA
queue ("q<k>"), then one per CC-core ("cc.<k>"). Multi-worker runs add
engines after these without changing the existing numbering.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import chain, count, repeat
from operator import attrgetter

import numpy as np

from nprof.arch.presets import Preset
from nprof.device.accinfo import VALUE_KEY
from nprof.device.order import dep_lists, partners, track_order
from nprof.device.psum import elided_memsets, is_zero_fill
from nprof.device.template import (
    FIRST_DMA_SLOT,
    SLOT_GPSIMD,
    SLOT_LD,
    SLOT_MM,
    SLOT_SCALAR,
    SLOT_SYNC,
    SLOT_VECTOR,
    SigRow,
    signature_rows,
)
from nprof.errors import NprofError
from nprof.program.model import Program
from nprof.progress import progress

__all__ = [
    "FIRST_DMA_SLOT",
    "SLOT_GPSIMD",
    "SLOT_LD",
    "SLOT_MM",
    "SLOT_SCALAR",
    "SLOT_SYNC",
    "SLOT_VECTOR",
    "Plan",
    "build_plan",
    "plan_for",
    "slot_names",
]

ACC_KEY = VALUE_KEY  # every field of an Access, fetched in C (device.accinfo)
_INS, _OUTS, _DEPS = attrgetter("ins"), attrgetter("outs"), attrgetter("deps")
_OPCODE, _ENGINE, _ATTRS, _QUEUE = attrgetter("opcode"), attrgetter("engine"), attrgetter("attrs"), attrgetter("queue")


@dataclass(frozen=True)
class Plan:
    """Per-instruction columns (indexed by program index), per-signature columns, and slot metadata."""

    preset: Preset
    slot: np.ndarray  # int64: timeline slot of each instruction
    dur: np.ndarray  # float64: ns when running alone (DMA/CC: transfer only)
    lat: np.ndarray  # float64: ns between the last dependency's end and the earliest start
    lat0: np.ndarray  # float64: ns from time 0 to the earliest start of an instruction without deps (DMA latency)
    is_dma: np.ndarray  # bool: DMA_DIRECT2D
    dma_index: np.ndarray  # int64: indices of the DMA instructions, ascending
    dma_rate: np.ndarray  # float64 per instruction: bytes/ns a DMA moves alone (payload + chunk overhead); else 0
    transposes: frozenset[int]  # indices of TRANSPOSE instructions (they occupy both TensorE tracks)
    is_tr: np.ndarray  # bool: the same, per instruction
    slot_tracks: tuple[str, ...]  # track name per slot
    slot_engines: tuple[str, ...]  # Profile engine name per slot ("dma" for queues)
    code: np.ndarray  # int64: signature number of each instruction
    sig_opcode: list[str]  # per signature: opcode name
    sig_operands: list[str]  # per signature: display text of the operands ("" for DMAs)
    sig_direction: list[str]  # per signature: DMA direction ("" otherwise)
    sig_partitions: np.ndarray  # int64 per signature: DMA partitions
    sig_tensor: list[str | None]  # per signature: the HBM tensor a DMA moves
    sig_spill: np.ndarray  # bool per signature: DMA attr spill
    sig_reload: np.ndarray  # bool per signature: DMA attr reload
    rw: np.ndarray  # int64 [n, 6]: HBM/SBUF/PSUM bytes read, then HBM/SBUF/PSUM bytes written
    flops: np.ndarray  # int64: model FLOPs (MATMUL)
    hw_flops: np.ndarray  # int64: hardware FLOPs (MATMUL, TRANSPOSE)
    deps_offsets: np.ndarray  # int64 [n + 1]: deps of instruction i are deps_flat[offsets[i]:offsets[i + 1]]
    deps_flat: np.ndarray  # int64
    dep1: np.ndarray  # int64, scheduler fast path: the only dep (n: none), -1 several, -2 TensorE, -3 a DMA
    lat1: np.ndarray  # float64, scheduler fast path: lat, or lat0 for an instruction without deps
    prev: np.ndarray  # int64: the instruction before on this one's track in its engine's order (n: none)
    pm: np.ndarray  # int64: LDWEIGHTS: the MATMUL/TRANSPOSE before it (n: none; device.order.partners)
    pl: np.ndarray  # int64: MATMUL/TRANSPOSE: the LDWEIGHTS/TRANSPOSE before it (n: none)
    order: np.ndarray  # int64: an order every wait respects (device.order): the in-order pass schedules in it
    elided: np.ndarray  # bool: PSUM accumulation-group zero-fills the hardware never runs (device.psum)

    @property
    def n(self) -> int:
        return len(self.slot)

    @cached_property
    def deps(self) -> list[tuple[int, ...]]:
        """The dependency tuple of each instruction (built from the CSR columns on first use)."""
        return dep_lists(self.deps_offsets, self.deps_flat)

    @property
    def operands(self) -> list[str]:
        """Display text of each instruction's operands ("" for DMAs)."""
        return [self.sig_operands[c] for c in self.code.tolist()]

    @property
    def opcodes(self) -> list[str]:
        """Opcode name of each instruction."""
        return [self.sig_opcode[c] for c in self.code.tolist()]


def slot_names(preset: Preset) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tracks = ["tensor.stationary", "tensor.moving", "vector", "scalar", "gpsimd", "sync"]
    engines = ["tensor", "tensor", "vector", "scalar", "gpsimd", "sync"]
    tracks += [f"q{k}" for k in range(preset.dma_queues)]
    engines += ["dma"] * preset.dma_queues
    tracks += [f"cc.{k}" for k in range(preset.cc_cores)]
    engines += ["cc"] * preset.cc_cores
    return tuple(tracks), tuple(engines)


def build_plan(program: Program, preset: Preset) -> Plan:
    """The plan of `program` on `preset` (see the module doc); NprofError names the first malformed instruction."""
    instrs = program.instructions
    n = len(instrs)
    with progress(n, f"planning {program.name}") as bar:
        in_keys = map(tuple, map(map, repeat(ACC_KEY, n), map(_INS, instrs)))
        out_keys = map(tuple, map(map, repeat(ACC_KEY, n), map(_OUTS, instrs)))
        cols = (map(_OPCODE, instrs), map(_ENGINE, instrs), map(_ATTRS, instrs), map(_QUEUE, instrs))
        memo: dict[tuple, int] = {}
        # first[i]: the first instruction with i's signature (setdefault stores i when the signature is new)
        first = np.fromiter(map(memo.setdefault, zip(*cols, in_keys, out_keys, strict=True), count()), np.int64, n)
        del memo
        reps = np.flatnonzero(first == np.arange(n, dtype=np.int64))
        bar.advance(n // 2)
        rows = signature_rows(program, preset, reps.tolist())
        bar.advance(n - n // 2)
    code = np.zeros(n, np.int64)
    code[reps] = np.arange(len(reps), dtype=np.int64)
    code = code[first]
    offsets, flat = _check_deps(program)
    zero_fills = [k for k, i in enumerate(reps.tolist()) if is_zero_fill(instrs[i])]
    elided = elided_memsets(program, offsets, flat, np.flatnonzero(np.isin(code, zero_fills)))
    return _assemble(preset, code, rows, offsets, flat, elided)


def _assemble(
    preset: Preset,
    code: np.ndarray,
    rows: list[SigRow],
    offsets: np.ndarray,
    flat: np.ndarray,
    elided: np.ndarray,
) -> Plan:
    """Spread the per-signature rows over the instructions and derive the scheduler's fast-path columns.

    `elided` instructions (PSUM accumulation-group zero-fills, `device.psum`) get no duration, no latency
    and no place on their track.
    """
    n = len(code)
    ts = [r.t for r in rows]
    slot_s = np.asarray([t.slot for t in ts], np.int64)
    lat_s = np.asarray([t.lat for t in ts], np.float64)
    lat0_s = np.asarray([t.lat0 for t in ts], np.float64)
    slot = slot_s[code]
    lat, lat0 = np.where(elided, 0.0, lat_s[code]), np.where(elided, 0.0, lat0_s[code])
    is_dma = np.asarray([t.is_dma for t in ts], bool)[code]
    rw = np.asarray([t.rw for t in ts], np.int64).reshape(-1, 6)[code]
    fl = np.asarray([(t.flops, t.hw_flops) for t in ts], np.int64).reshape(-1, 2)[code]
    is_tr = np.asarray([t.is_transpose for t in ts], bool)[code]
    # scheduler fast path: non-TensorE instructions with at most one dependency
    lengths = np.diff(offsets)
    dep1 = np.full(n, -1, np.int64)
    one = lengths == 1
    dep1[one] = flat[offsets[:-1][one]]
    none = lengths == 0
    dep1[none] = n
    tensor = slot <= SLOT_MM
    dep1[tensor] = -2
    dep1[is_dma] = -3
    lat1 = np.where(none, lat0, lat)
    tracks, engines = slot_names(preset)
    dur = np.where(elided, 0.0, np.asarray([t.dur for t in ts], np.float64)[code])
    pm, pl = partners(slot, is_tr)
    order, prev = track_order(
        slot, elided, _prev_on_track(slot, is_tr, elided), np.where(slot == SLOT_LD, pm, pl), dur, lat, lat0,
        offsets, flat, preset.sched_window,
    )  # fmt: skip
    return Plan(
        preset=preset,
        slot=slot,
        dur=dur,
        lat=lat,
        lat0=lat0,
        is_dma=is_dma,
        dma_index=np.flatnonzero(is_dma),
        dma_rate=np.asarray([t.dma_rate for t in ts], np.float64)[code],
        transposes=frozenset(np.flatnonzero(is_tr).tolist()),
        is_tr=is_tr,
        slot_tracks=tracks,
        slot_engines=engines,
        code=code,
        sig_opcode=[t.opcode for t in ts],
        sig_operands=[r.operands for r in rows],
        sig_direction=[t.direction for t in ts],
        sig_partitions=np.asarray([r.partitions for r in rows], np.int64),
        sig_tensor=[r.tensor for r in rows],
        sig_spill=np.asarray([r.spill for r in rows], bool),
        sig_reload=np.asarray([r.reload for r in rows], bool),
        rw=rw,
        flops=fl[:, 0].copy(),
        hw_flops=fl[:, 1].copy(),
        deps_offsets=offsets,
        deps_flat=flat,
        dep1=dep1,
        lat1=lat1,
        prev=prev,
        pm=pm,
        pl=pl,
        order=order,
        elided=elided,
    )


def _prev_on_track(slot: np.ndarray, is_tr: np.ndarray, elided: np.ndarray) -> np.ndarray:
    """Per instruction, the previous one whose end frees its track (n when none).

    TensorE: tensor.moving is freed by the previous MATMUL/TRANSPOSE; tensor.stationary by the previous
    LDWEIGHTS or TRANSPOSE (a transpose loads its own operand, occupying both tracks). Elided instructions
    are on no track: they have no previous one and are no one's.
    """
    n = len(slot)
    prev = np.full(n, n, np.int64)
    if n == 0:
        return prev
    kept = np.flatnonzero(~elided)
    order = kept[np.argsort(slot[kept], kind="stable")]  # program order within each slot
    same = slot[order][1:] == slot[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    stationary = np.flatnonzero(((slot == SLOT_LD) | is_tr) & ~elided)
    ld = stationary[slot[stationary] == SLOT_LD]
    if len(ld):
        pos = np.searchsorted(stationary, ld)
        prev[ld] = np.where(pos > 0, stationary[np.maximum(pos - 1, 0)], n)
    return prev


def _check_deps(program: Program) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays of the dependency lists; NprofError if one does not point at an earlier instruction
    (a wait for a later instruction is a cycle or a semaphore nobody has signalled yet)."""
    instrs = program.instructions
    n = len(instrs)
    lengths = np.fromiter(map(len, map(_DEPS, instrs)), np.int64, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(chain.from_iterable(map(_DEPS, instrs)), np.int64, int(offsets[-1]))
    owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
    bad = np.flatnonzero((flat < 0) | (flat >= owner))
    if len(bad):
        i, d = int(owner[bad[0]]), int(flat[bad[0]])
        ins = program.instructions[i]
        where = f"instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"
        raise NprofError(
            f"program {program.name!r}: {where} waits for instruction {d}, not an earlier one (a dependency "
            "cycle or a semaphore that is never signalled before it); fix the program's dependencies"
        )
    return offsets, flat


_CACHE: dict[tuple[int, str], tuple[weakref.ref[Program], Plan]] = {}


def _evict(key: tuple[int, str], _ref: object) -> None:
    """Drop a collected program's plan (the weakref callback)."""
    _CACHE.pop(key, None)


def plan_for(program: Program, preset: Preset) -> Plan:
    """`build_plan`, cached while `program` is alive (keyed by identity and preset)."""
    key = (id(program), repr(preset))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is program:
        return hit[1]
    plan = build_plan(program, preset)
    _CACHE[key] = (weakref.ref(program, partial(_evict, key)), plan)
    return plan
