"""The columnar execution plan of a Program on a Preset: what the timing loop needs, as flat lists.

Contract: `build_plan(program, preset) -> Plan` computes once per (program,
preset) every instruction's timeline slot (track), its duration in ns when it
runs alone (`arch.cost`; DMAs: transfer time alone on its engines, excluding the
fixed latency), its dependency latency, for DMAs their rate alone (for sharing
the DMA engines and HBM), and the static Profile columns (operand text,
bytes read/written per memory, FLOPs, DMA direction/tensor) so repeated runs
only reschedule. `plan_for` caches plans per live Program (`adopt_plan`: a producer's plan of it;
`share_derived`: a copy with the same instructions shares its columns and plans).
Malformed instructions (engine/opcode mismatch, DMA queue out of range) raise
`NprofError` naming the instruction.

The plan is built from flat columns (`device.columns`): the program's Arrow
instruction table (the program file's schema) when it carries one, else its
Instruction objects. Instructions equal in everything the plan reads (opcode,
engine, attrs, queue and operand values) share a *signature*, found for all
instructions at once (`device.rowcodes`); the cost model runs once per distinct
(opcode, engine, attrs, queue, operand shapes) key (`device.template`), operand
text and DMA facts are array operations per signature (`device.signatures`,
`device.optext`), and everything is spread with numpy indexing. Value columns
that repeat (opcode, operand text, DMA direction/tensor) are stored per
signature with a `code` per instruction. tests/device/reference_plan.py is the
plain per-instruction builder this one is held to.

Slots (timeline rows): 0 tensor.stationary (LDWEIGHTS), 1 tensor.moving
(MATMUL, TRANSPOSE), 2 vector, 3 scalar, 4 gpsimd, 5 sync, then one per DMA
queue ("q<k>"), then one per CC-core ("cc.<k>"). Multi-worker runs add
engines after these without changing the existing numbering.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import pyarrow as pa

from nprof.arch.presets import Preset
from nprof.device.columns import Columns, attach_columns, attached_columns, program_columns
from nprof.device.order import by_slot, dep_lists, partners, track_order
from nprof.device.pe_tiles import tile_links
from nprof.device.psum import elided_fills
from nprof.device.rowcodes import padded, row_codes
from nprof.device.signatures import Signatures, first_items, signatures
from nprof.device.template import (
    FIRST_DMA_SLOT,
    SLOT_GPSIMD,
    SLOT_LD,
    SLOT_MM,
    SLOT_SCALAR,
    SLOT_SYNC,
    SLOT_VECTOR,
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
    sig_operands: pa.Array  # string per signature: display text of the operands ("" for DMAs)
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
    source: pa.Array  # string per instruction (null: none): the kernel source line
    layer: pa.Array  # string per instruction: the module path (compiled graphs)
    hlo_name: pa.Array  # string per instruction: the graph node (compiled graphs)
    matmul_dtype: str  # "float32", "mx", "float8" or "bfloat16": the peak the MATMULs run at (device.signatures)

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
        return self.sig_operands.take(pa.array(self.code)).to_pylist()

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
    return plan_from_columns(program_columns(program), preset, program.name)


def plan_from_columns(cols: Columns, preset: Preset, name: str) -> Plan:
    """The plan of the instruction columns `cols` of program `name` (see the module doc)."""
    n = cols.n
    with progress(n, f"planning {name}") as bar:
        ins_key, outs_key = padded(cols.ins_offsets, cols.ins), padded(cols.outs_offsets, cols.outs)
        code, reps = row_codes([cols.opcode, cols.engine, cols.attrs, cols.queue, *ins_key, *outs_key], n)
        bar.advance(n // 2)
        sigs = signatures(cols, preset, name, reps)
        bar.advance(n - n // 2)
    offsets, flat = _check_deps(cols, name)
    out0 = first_items(cols.outs_offsets, cols.outs)
    elided = elided_fills(sigs.zero_fill[code], sigs.acc_matmul[code], out0, offsets, flat)
    return assemble(preset, code, sigs, offsets, flat, elided, (cols.source, cols.layer, cols.hlo_name))


def assemble(
    preset: Preset,
    code: np.ndarray,
    sigs: Signatures,
    offsets: np.ndarray,
    flat: np.ndarray,
    elided: np.ndarray,
    strings: tuple[pa.Array, pa.Array, pa.Array],
) -> Plan:
    """Spread the per-signature facts over the instructions and derive the scheduler's fast-path columns.

    `elided` instructions (PSUM accumulation-group zero-fills, `device.psum`) get no duration, no latency
    and no place on their track.
    """
    ts = sigs.templates
    of = sigs.template.take(code)  # each instruction's template

    def spread(field: str, dtype: type, zero_elided: bool = False) -> np.ndarray:
        values: np.ndarray = np.asarray([getattr(t, field) for t in ts], dtype).take(of, axis=0)
        return np.where(elided, 0.0, values) if zero_elided and elided.any() else values

    slot, is_dma, is_tr = spread("slot", np.int64), spread("is_dma", bool), spread("is_transpose", bool)
    lat, lat0, dur = (spread(f, np.float64, True) for f in ("lat", "lat0", "dur"))
    rw = np.asarray([t.rw for t in ts], np.int64).reshape(len(ts), 6).take(of, axis=0)
    flops, hw_flops = spread("flops", np.int64), spread("hw_flops", np.int64)
    tracks, engines = slot_names(preset)
    pm, pl = partners(slot, is_tr)
    prev0, pe = _prev_on_track(slot, is_tr, elided), spread("pe_mask", np.int64)
    if pe.any():  # TensorE tiling mode: matmuls on disjoint PE tiles overlap (device.pe_tiles)
        prev0, offsets, flat = tile_links(prev0, offsets, flat, (slot == SLOT_MM) & ~elided, pe)
    dep1, lat1 = _fast_path(offsets, flat, slot, is_dma, lat, lat0)
    order, prev = track_order(
        slot, elided, prev0, np.where(slot == SLOT_LD, pm, pl), dur, lat, lat0, offsets, flat, preset.sched_window
    )  # fmt: skip
    sig_t = sigs.template.tolist()
    return Plan(
        preset=preset,
        slot=slot,
        dur=dur,
        lat=lat,
        lat0=lat0,
        is_dma=is_dma,
        dma_index=np.flatnonzero(is_dma),
        dma_rate=spread("dma_rate", np.float64),
        transposes=frozenset(np.flatnonzero(is_tr).tolist()),
        is_tr=is_tr,
        slot_tracks=tracks,
        slot_engines=engines,
        code=code,
        sig_opcode=[ts[t].opcode for t in sig_t],
        sig_operands=sigs.operands,
        sig_direction=[ts[t].direction for t in sig_t],
        sig_partitions=sigs.partitions,
        sig_tensor=sigs.tensor,
        sig_spill=sigs.spill,
        sig_reload=sigs.reload,
        rw=rw,
        flops=flops,
        hw_flops=hw_flops,
        deps_offsets=offsets,
        deps_flat=flat,
        dep1=dep1,
        lat1=lat1,
        prev=prev,
        pm=pm,
        pl=pl,
        order=order,
        elided=elided,
        source=strings[0],
        layer=strings[1],
        hlo_name=strings[2],
        matmul_dtype=sigs.matmul_dtype,
    )


def _fast_path(
    offsets: np.ndarray, flat: np.ndarray, slot: np.ndarray, is_dma: np.ndarray, lat: np.ndarray, lat0: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The scheduler's fast-path columns `dep1` and `lat1` (see `Plan`): non-TensorE instructions with at most
    one dependency point at it (n: none), the others are marked -1 (several), -2 (TensorE), -3 (a DMA)."""
    n = len(slot)
    lengths = np.diff(offsets)
    dep1 = np.full(n, -1, np.int64)
    one = lengths == 1
    dep1[one] = flat[offsets[:-1][one]]
    none = lengths == 0
    dep1[none] = n
    dep1[slot <= SLOT_MM] = -2
    dep1[is_dma] = -3
    return dep1, np.where(none, lat0, lat)


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
    order = kept[by_slot(slot[kept])]  # program order within each slot
    same = slot[order][1:] == slot[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    stationary = np.flatnonzero(((slot == SLOT_LD) | is_tr) & ~elided)
    ld = stationary[slot[stationary] == SLOT_LD]
    if len(ld):
        pos = np.searchsorted(stationary, ld)
        prev[ld] = np.where(pos > 0, stationary[np.maximum(pos - 1, 0)], n)
    return prev


def _check_deps(cols: Columns, name: str) -> tuple[np.ndarray, np.ndarray]:
    """CSR arrays of the dependency lists; NprofError if one does not point at an earlier instruction
    (a wait for a later instruction is a cycle or a semaphore nobody has signalled yet)."""
    offsets, flat = cols.deps_offsets, cols.deps_flat
    owner = np.repeat(np.arange(cols.n, dtype=np.int64), np.diff(offsets))
    bad = np.flatnonzero((flat < 0) | (flat >= owner))
    if len(bad):
        i, d = int(owner[bad[0]]), int(flat[bad[0]])
        op, source = cols.opcodes[int(cols.opcode[i])].value, cols.source[i].as_py()
        where = f"instruction {i} ({op}{', ' + source if source else ''})"
        raise NprofError(
            f"program {name!r}: {where} waits for instruction {d}, not an earlier one (a dependency "
            "cycle or a semaphore that is never signalled before it); fix the program's dependencies"
        )
    return offsets, flat


_CACHE: dict[tuple[int, str], tuple[weakref.ref[Program], Plan]] = {}


def _evict(key: tuple[int, str], _ref: object) -> None:
    """Drop a collected program's plan (the weakref callback)."""
    _CACHE.pop(key, None)


def adopt_plan(program: Program, preset: Preset, plan: Plan) -> None:
    """Cache `plan` as the plan of `program` on `preset` for `plan_for` (a producer that built it from exactly
    the columns `program_columns(program)` gives, e.g. the compiler's list scheduler timing its kept order)."""
    key = (id(program), repr(preset))
    _CACHE[key] = (weakref.ref(program, partial(_evict, key)), plan)


def share_derived(old: Program, new: Program) -> None:
    """Give `new` (a copy of `old` with the same instructions: another name or meta) the columns attached to
    `old` and the plans cached for it."""
    cols = attached_columns(old)
    if cols is not None:
        attach_columns(new, cols)
    for (ident, preset), (ref, plan) in list(_CACHE.items()):
        if ident == id(old) and ref() is old:
            key = (id(new), preset)
            _CACHE[key] = (weakref.ref(new, partial(_evict, key)), plan)


def plan_for(program: Program, preset: Preset) -> Plan:
    """`build_plan`, cached while `program` is alive (keyed by identity and preset)."""
    key = (id(program), repr(preset))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is program:
        return hit[1]
    plan = build_plan(program, preset)
    _CACHE[key] = (weakref.ref(program, partial(_evict, key)), plan)
    return plan
