"""`perfetto`: a Perfetto protobuf trace (default `ntff.pftrace`) that ui.perfetto.dev opens.

Contract:
* One process track (the device: profile name, preset, nd/nc, rank) holding, in
  this explicit order, one slice track per DMA queue ("DMA q0"...), one per
  instruction track ("TensorMatrix (MultiplyMoving)", "Vector"...), and one
  counter track per series of the `counters` pass (TensorMatrix utilization,
  Pending DMA count, DMA throughput, sampled counters); this worker's collective
  operations are slices on a "Collectives" track (name = kind; id, bytes,
  wait_ns, ranks, algorithm as annotations).
* Each event is a slice (TYPE_SLICE_BEGIN/END; TYPE_INSTANT for zero duration)
  named by its opcode (DMA: direction) with category = engine ("dma" for DMA)
  and debug annotations: id, operands, layer, hlo_name, source, flops, wait_ns
  (instructions); id, bytes, partitions, tensor, layer, hlo_name, source, spill,
  reload (DMA). Event names, categories, annotation names and annotation string
  values are interned per sequence through `InternedData` (a string column
  whose values are mostly distinct within a chunk, typically operands, is
  written inline instead); the per-sequence tables are reset when they grow
  past INTERN_LIMIT, so memory stays bounded.
* Every slice track is its own packet sequence written in time order (ends
  before begins at equal times), so the trace needs no reordering; rows whose
  events partly overlap are split into extra lanes ("Vector (lane 2)").
* `show_flows` adds a flow arrow per dependency (deps column): the source slice
  carries `flow_ids`, the dependent slice `terminating_flow_ids`; the flow id is
  the edge number. Flows need the dependency edges in memory (16 B per edge).
* Streaming: event packets are encoded with `nprof.export.protowire.Fixed` in
  chunks of `chunk_rows` events: within a chunk, rows with the same set of
  fields are one fixed-width byte matrix (varints padded to the chunk's widest
  value, which protobuf readers accept), so encoding is a few numpy copies per
  chunk; tests parse the output back with the bundled perfetto protos.
  Descriptors go through the perfetto protos themselves. Rows whose events
  follow each other in table order are read in zero-copy table batches of
  STREAM_BATCH_CHUNKS chunks, so memory beyond the loaded Profile is bounded by
  the batch (plus 8 B per DMA transfer for the exact pending-DMA counter); other
  rows are sorted first (~16 B per event of those rows).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    CounterDescriptor,
    Trace,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from nprof.analysis.counters import SERIES, dma_throughput, pending_dma_chunks, tensor_util
from nprof.analysis.facts import facts, to_numpy
from nprof.export.options import ExportOptions
from nprof.export.perfetto_columns import BatchColumns, TableColumns
from nprof.export.perfetto_flows import Flows
from nprof.export.perfetto_intern import CATEGORIES, NAMES, SEQ_NEEDS, STRING_VALUES, Sequence
from nprof.export.perfetto_layout import (
    KIND_END,
    KIND_INSTANT,
    Row,
    batches,
    is_sequential,
    packet_order,
    plan_rows,
    row_times,
    sorted_rows,
    split_lanes,
    streamable,
)
from nprof.export.protowire import Fixed, place
from nprof.profile import Profile
from nprof.progress import Progress, progress

PROCESS_UUID = 1
TRACK_UUID_BASE = 1000
COUNTER_UUID_BASE = 1_000_000
INTERN_LIMIT = 1_000_000  # interned strings per sequence before its state is reset
ANNOTATIONS = ("id", "operands", "layer", "hlo_name", "source", "flops", "wait_ns", "bytes", "partitions", "tensor",
               "spill", "reload")  # fmt: skip
ANN = {name: i + 1 for i, name in enumerate(ANNOTATIONS)}
_TE_TYPE, _TE_TRACK, _TE_NAME, _TE_CAT, _TE_ANN, _TE_FLOW, _TE_TFLOW, _TE_DOUBLE = 9, 11, 10, 3, 4, 47, 48, 44
_DA_NAME, _DA_BOOL, _DA_INT, _DA_STR_IID = 1, 2, 4, 17
Columns = TableColumns | BatchColumns
STREAM_BATCH_CHUNKS = 4  # the streaming writer reads the tables in batches of this many chunks
_STRINGS = {
    "instructions": (("operands", "operands"), ("layer", "layer"), ("hlo_name", "hlo_name"),
                     ("source", "nki_source_location")),
    "dma": (("tensor", "tensor"), ("layer", "layer"), ("hlo_name", "hlo_name"), ("source", "nki_source_location")),
}  # fmt: skip


class _Ann:
    """One debug annotation for the rows of a chunk: field number, values, and where it is present."""

    def __init__(self, name: str, field: int, values: np.ndarray | None, present: np.ndarray | None) -> None:
        self.name, self.field, self.values, self.present = name, field, values, present

    def encode(self, rows: np.ndarray) -> Fixed:
        msg = Fixed(rows.size).const(_DA_NAME, ANN[self.name])
        if self.values is None:
            return msg.const(self.field, 1)
        return msg.varint(self.field, self.values[rows])


def _annotations(kind: str, rows: np.ndarray, cols: Columns, seq: Sequence) -> list[_Ann]:
    out = [_Ann("id", _DA_INT, cols.numeric("id", rows), None)]
    if kind == "dma":
        out.append(_Ann("bytes", _DA_INT, cols.numeric("bytes", rows), None))
        out.append(_Ann("partitions", _DA_INT, cols.numeric("partitions", rows), None))
    for name, column in _STRINGS[kind]:
        codes, dictionary, values = cols.strings(column, rows)
        if len(dictionary) == 0 or not (codes >= 0).any():
            continue
        iids, present = seq.iids(STRING_VALUES, column, codes, dictionary, values)
        out.append(_Ann(name, _DA_STR_IID, iids, present))
    if kind == "instructions":
        for name in ("flops", "wait_ns"):
            v = cols.numeric(name, rows)
            if v.any():
                out.append(_Ann(name, _DA_INT, v, None))
    else:
        for name, column in (("spill", "is_spill"), ("reload", "is_reload")):
            flag = cols.numeric(column, rows)
            if flag.any():
                out.append(_Ann(name, _DA_BOOL, None, flag))
    return out


def _ragged_matrix(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """(len(rows), k) items of a ragged array for rows that all hold exactly k items."""
    return values[offsets[rows][:, None] + np.arange(k)]


def _one(packet: TracePacket) -> bytes:
    t = Trace()
    t.packet.append(packet)
    return t.SerializeToString()


class _Writer:
    def __init__(self, profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
        self.profile, self.out, self.options = profile, out, options
        self.next_seq = 1
        self.flows = Flows(profile) if options.show_flows else None

    def seq(self) -> int:
        self.next_seq += 1
        return self.next_seq

    def descriptor(self, uuid: int, name: str, rank: int, counter_unit: str | None = None) -> None:
        p = TracePacket()
        p.trusted_packet_sequence_id = 1
        d = p.track_descriptor
        d.uuid, d.parent_uuid, d.name, d.sibling_order_rank = uuid, PROCESS_UUID, name, rank
        if counter_unit is not None:
            d.counter.CopyFrom(CounterDescriptor(unit_name=counter_unit))
        self.out.write(_one(p))

    def process(self) -> None:
        info = self.profile.info
        where = " ".join(x for x in (info.device, info.preset, f"nd{info.nd_idx} nc{info.nc_idx}") if x)
        p = TracePacket()
        p.trusted_packet_sequence_id = 1
        d = p.track_descriptor
        d.uuid = PROCESS_UUID
        d.process.pid = info.rank + 1
        d.process.process_name = f"{info.name or 'profile'} ({where}, rank {info.rank})"
        d.child_ordering = TrackDescriptor.ChildTracksOrdering.EXPLICIT
        self.out.write(_one(p))

    def lane(self, row: Row, rows: np.ndarray, uuid: int, bar: Progress) -> None:
        """One lane of a row whose events are not sequential in table order (sorted or nested)."""
        ts_all, end_all = row_times(self.profile, row.table)
        ts, end = ts_all[rows], end_all[rows]
        seq = Sequence(self.seq(), ANNOTATIONS, INTERN_LIMIT)
        cols = TableColumns(facts(self.profile), row.table)
        chunk = self.options.chunk_rows
        if is_sequential(ts, end):  # packets of a chunk of events never interleave with the next chunk's
            for e0 in range(0, rows.size, chunk):
                event, kind, time = packet_order(ts[e0 : e0 + chunk], end[e0 : e0 + chunk])
                self.chunk(row, rows[e0 : e0 + chunk], event, kind, time, uuid, seq, bar, cols)
            return
        event, kind, time = packet_order(ts, end)  # nested slices: order the whole lane
        for p0 in range(0, event.size, chunk):
            sl = slice(p0, p0 + chunk)
            self.chunk(row, rows, event[sl], kind[sl], time[sl], uuid, seq, bar, cols)

    def stream(self, table: str, streams: dict[str, tuple[Row, int]], bar: Progress) -> None:
        """Rows whose events are sequential in table order, read batch by batch (memory bounded by the batch)."""
        if not streams:
            return
        arrow = self.profile.table(table)
        seqs = {name: Sequence(self.seq(), ANNOTATIONS, INTERN_LIMIT) for name in streams}
        for b in batches(self.profile, table, self.options.chunk_rows * STREAM_BATCH_CHUNKS):
            cols = BatchColumns(arrow, b.start, b.stop)
            for name, pos in b.groups.items():
                if name not in streams:
                    continue
                row, uuid = streams[name]
                event, kind, time = packet_order(b.ts[pos], b.end[pos])
                self.chunk(row, b.start + pos, event, kind, time, uuid, seqs[name], bar, cols)

    def chunk(self, row: Row, rows: np.ndarray, ev: np.ndarray, kd: np.ndarray, tm: np.ndarray, uuid: int,
              seq: Sequence, bar: Progress, cols: Columns) -> None:  # fmt: skip
        """Write packets (event index into `rows`, kind, time) of one chunk, preceded by their interned strings."""
        seq.maybe_reset()
        starts = np.flatnonzero(kd != KIND_END)
        ends = np.flatnonzero(kd == KIND_END)
        groups: list[tuple[np.ndarray, np.ndarray]] = []
        if starts.size:
            for sel, fixed in self.begin_packets(row, rows[ev[starts]], kd[starts], tm[starts], uuid, seq, cols):
                groups.append((starts[sel], fixed.packets()))
        if ends.size:
            te = Fixed(ends.size).const(_TE_TYPE, 2).const(_TE_TRACK, uuid)
            groups.append((ends, Fixed(ends.size).varint(8, tm[ends]).message(11, te).const(10, seq.id).packets()))
        self.out.write(seq.packet())
        alternating = len(groups) == 2 and starts.size == ends.size and np.array_equal(starts, np.arange(0, ev.size, 2))
        if alternating:  # the common case: begin, end, begin, end ... one matrix, no scatter
            self.out.write(np.hstack([groups[0][1], groups[1][1]]).reshape(-1).data)
        else:
            self.out.write(place(groups, ev.size).data)
        bar.advance(starts.size)

    def begin_packets(self, row: Row, rows: np.ndarray, kd: np.ndarray, tm: np.ndarray, uuid: int,
                      seq: Sequence, cols: Columns) -> list[tuple[np.ndarray, Fixed]]:  # fmt: skip
        """Begin/instant packets of `rows`, one Fixed message per set of fields present."""
        n = rows.size
        if row.table == "instructions":
            names, _ = seq.iids(NAMES, "opcode", *cols.strings("opcode", rows))
            cats, _ = seq.iids(CATEGORIES, "engine", *cols.strings("engine", rows))
        else:
            names, _ = seq.iids(NAMES, "direction", *cols.strings("direction", rows))
            dma_iid, _ = seq.iids(CATEGORIES, "dma", np.zeros(1, np.int32), pa.array(["dma"]), ["dma"])
            cats = np.full(n, dma_iid[0], np.uint64)
        anns = _annotations(row.table, rows, cols, seq)
        out_ids = in_ids = None
        key = np.zeros(n, np.int64)
        for j, ann in enumerate(anns):
            if ann.present is not None:
                key |= ann.present.astype(np.int64) << j
        if self.flows is not None:
            out_ids = self.flows.outgoing(cols.numeric("id", rows))
            in_ids = self.flows.incoming(row.table, rows)
            key += (np.diff(out_ids[1]) << 32) + (np.diff(in_ids[1]) << 48)
        event_type = np.where(kd == KIND_INSTANT, 3, 1)
        groups = []
        for k in np.unique(key).tolist():
            sel = np.flatnonzero(key == k)
            te = Fixed(sel.size).varint(_TE_TYPE, event_type[sel]).const(_TE_TRACK, uuid)
            te.varint(_TE_NAME, names[sel]).varint(_TE_CAT, cats[sel])
            for ann in anns:
                if ann.present is None or ann.present[sel[0]]:
                    te.message(_TE_ANN, ann.encode(sel))
            if out_ids is not None and in_ids is not None:
                te.repeated_fixed64(_TE_FLOW, _ragged_matrix(*out_ids, sel, (k >> 32) & 0xFFFF))
                te.repeated_fixed64(_TE_TFLOW, _ragged_matrix(*in_ids, sel, k >> 48))
            packet = Fixed(sel.size).varint(8, tm[sel]).message(11, te).const(10, seq.id).const(13, SEQ_NEEDS)
            groups.append((sel, packet))
        return groups

    def _series(self) -> Iterator[tuple[str, Iterator[tuple[np.ndarray, np.ndarray]]]]:
        """Counter series as (name, chunks of (ts, value)); pending DMA is streamed window by window."""
        memo = facts(self.profile).__dict__.get("_memo_computed_series")
        if memo is not None:  # the analysis already computed them: reuse
            for name, arrays in memo.items():
                yield name, iter([arrays])
        else:
            for name, fn in (("tensor_util", tensor_util), ("pending_dma", None), ("dma_throughput", dma_throughput)):
                if fn is None:
                    chunks = pending_dma_chunks(self.profile)
                    first = next(chunks, None)
                    if first is not None:
                        yield name, itertools.chain([first], chunks)
                    continue
                ts, value = fn(self.profile)
                if ts.size:
                    yield name, iter([(ts, value)])
        sampled = self.profile.counters
        if sampled.num_rows:
            sampled = sampled.sort_by([("name", "ascending"), ("ts", "ascending")])
            names = sampled["name"].to_numpy(zero_copy_only=False)
            ts, value = to_numpy(sampled["ts"]), to_numpy(sampled["value"], np.float64)
            bounds = np.flatnonzero(np.concatenate([[True], names[1:] != names[:-1], [True]]))
            for lo, hi in itertools.pairwise(bounds.tolist()):
                yield str(names[lo]), iter([(ts[lo:hi], value[lo:hi])])

    def counters(self, rank0: int) -> None:
        for k, (name, chunks) in enumerate(self._series()):
            label, unit = SERIES.get(name, (name, ""))
            uuid = COUNTER_UUID_BASE + k
            self.descriptor(uuid, label, rank0 + k, counter_unit=unit)
            seq = self.seq()
            for ts, value in chunks:
                for c0 in range(0, ts.size, self.options.chunk_rows):
                    t, v = ts[c0 : c0 + self.options.chunk_rows], value[c0 : c0 + self.options.chunk_rows]
                    te = Fixed(t.size).const(_TE_TYPE, 4).const(_TE_TRACK, uuid).fixed64(_TE_DOUBLE, v)
                    msg = Fixed(t.size).varint(8, t).message(11, te).const(10, seq)
                    self.out.write(np.ascontiguousarray(msg.packets()).reshape(-1).data)

    def run(self) -> None:
        facts(self.profile).lean = True  # no per-event arrays unless a row needs sorting
        self.process()
        size = self.options.chunk_rows * STREAM_BATCH_CHUNKS
        ok = {table: streamable(self.profile, table, size) for table in ("dma", "instructions")}
        streams: dict[str, dict[str, tuple[Row, int]]] = {"dma": {}, "instructions": {}}
        lanes_todo: list[tuple[Row, np.ndarray, int]] = []
        rank = 0
        for row in plan_rows(self.profile):
            if row.key in ok[row.table]:
                self.descriptor(TRACK_UUID_BASE + rank, row.label, rank)
                streams[row.table][row.key] = (row, TRACK_UUID_BASE + rank)
                rank += 1
                continue
            rows = sorted_rows(self.profile, row)
            ts, end = row_times(self.profile, row.table)
            lanes = split_lanes(ts[rows], end[rows])
            for lane in range(int(lanes.max(initial=0)) + 1):
                name = row.label if lane == 0 else f"{row.label} (lane {lane + 1})"
                self.descriptor(TRACK_UUID_BASE + rank, name, rank)
                lanes_todo.append((row, rows if not lanes.any() else rows[lanes == lane], TRACK_UUID_BASE + rank))
                rank += 1
        with progress(self.profile.event_count, "Writing Perfetto trace") as bar:
            for table in ("dma", "instructions"):
                self.stream(table, streams[table], bar)
            for row, rows, uuid in lanes_todo:
                self.lane(row, rows, uuid, bar)
        rank = self.collectives(rank)
        self.counters(rank)

    def collectives(self, rank0: int) -> int:
        """This worker's collective operations as slices on "Collectives" track(s); returns the next rank."""
        cc = self.profile.collectives
        if cc.num_rows == 0:
            return rank0
        mine = pc.equal(cc["rank"], self.profile.info.rank)
        if pc.any(mine).as_py():
            cc = cc.filter(mine)
        cc = cc.sort_by([("ts", "ascending"), ("duration", "descending")])
        ts, dur = to_numpy(cc["ts"]), to_numpy(cc["duration"])
        lanes = split_lanes(ts, ts + dur)
        records = cc.to_pylist()
        rank = rank0
        for lane in range(int(lanes.max(initial=0)) + 1):
            uuid = TRACK_UUID_BASE + rank
            self.descriptor(uuid, "Collectives" if lane == 0 else f"Collectives (lane {lane + 1})", rank)
            rank += 1
            seq = self.seq()
            idx = np.flatnonzero(lanes == lane)
            event, kind, time = packet_order(ts[idx], ts[idx] + dur[idx])
            for e, k, t in zip(event.tolist(), kind.tolist(), time.tolist(), strict=True):
                p = TracePacket(timestamp=t, trusted_packet_sequence_id=seq)
                te = p.track_event
                te.track_uuid = uuid
                if k == KIND_END:
                    te.type = TrackEvent.TYPE_SLICE_END
                else:
                    r = records[int(idx[e])]
                    te.type = TrackEvent.TYPE_INSTANT if k == KIND_INSTANT else TrackEvent.TYPE_SLICE_BEGIN
                    te.name = r["kind"]
                    te.categories.append("cc")
                    te.debug_annotations.add(name="id", int_value=r["id"])
                    te.debug_annotations.add(name="bytes", int_value=r["bytes"])
                    te.debug_annotations.add(name="wait_ns", int_value=r["wait_ns"])
                    te.debug_annotations.add(name="ranks", string_value=",".join(map(str, r["ranks"] or [])))
                    if r["algorithm"]:
                        te.debug_annotations.add(name="algorithm", string_value=r["algorithm"])
                self.out.write(_one(p))
        return rank


def write(profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
    """Stream `profile` as a Perfetto trace to `out` (see module doc)."""
    _Writer(profile, out, options).run()
