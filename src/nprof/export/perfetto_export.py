"""`perfetto`: a Perfetto protobuf trace (default `ntff.pftrace`) that ui.perfetto.dev opens.

Contract:
* One process track (the device: profile name, preset, nd/nc, rank) holding, in
  this explicit order, one slice track per DMA queue ("DMA q0"...), one per
  instruction track ("TensorMatrix (MultiplyMoving)", "Vector"...), and one
  counter track per series of the `counters` pass (TensorMatrix utilization,
  Pending DMA count, DMA throughput, sampled counters).
* Each event is a slice (TYPE_SLICE_BEGIN/END; TYPE_INSTANT for zero duration)
  named by its opcode (DMA: direction) with category = engine ("dma" for DMA)
  and debug annotations: id, operands, layer, hlo_name, source, flops, wait_ns
  (instructions); id, bytes, partitions, tensor, layer, hlo_name, source, spill,
  reload (DMA). Event names, categories, annotation names and annotation string
  values (except operands, written inline) are interned per sequence through
  `InternedData`; the per-sequence tables are reset when they grow past
  INTERN_LIMIT, so memory stays bounded.
* Every slice track is its own packet sequence written in time order (ends
  before begins at equal times), so the trace needs no reordering; rows whose
  events partly overlap are split into extra lanes ("Vector (lane 2)").
* `show_flows` adds a flow arrow per dependency (deps column): the source slice
  carries `flow_ids`, the dependent slice `terminating_flow_ids`; the flow id is
  the edge number. Flows need the dependency edges in memory (16 B per edge).
* Streaming: packets are encoded with `nprof.export.protowire` (byte-compatible
  with the bundled perfetto protos, tested by parsing back with them) in chunks
  of `chunk_rows` events and written as they are made; descriptors and interned
  data go through the perfetto protos themselves. Memory beyond the loaded
  Profile is O(chunk) plus 12 B per event for the per-row ordering.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, Trace, TracePacket, TrackDescriptor

from nprof.analysis.counters import SERIES, counters
from nprof.analysis.facts import facts, to_numpy
from nprof.export.options import ExportOptions
from nprof.export.perfetto_flows import Flows
from nprof.export.perfetto_layout import KIND_END, KIND_INSTANT, Row, packet_order, plan_rows, split_lanes
from nprof.export.protowire import Msg, frame
from nprof.profile import Profile
from nprof.progress import progress

PROCESS_UUID = 1
TRACK_UUID_BASE = 1000
COUNTER_UUID_BASE = 1_000_000
SEQ_CLEARED, SEQ_NEEDS = 1, 2
INTERN_LIMIT = 200_000
ANNOTATIONS = ("id", "operands", "layer", "hlo_name", "source", "flops", "wait_ns", "bytes", "partitions", "tensor",
               "spill", "reload")  # fmt: skip
ANN = {name: i + 1 for i, name in enumerate(ANNOTATIONS)}
_TE_TYPE, _TE_TRACK, _TE_NAME, _TE_CAT, _TE_ANN, _TE_FLOW, _TE_TFLOW, _TE_DOUBLE = 9, 11, 10, 3, 4, 47, 48, 44
_DA_NAME, _DA_BOOL, _DA_INT, _DA_STR, _DA_STR_IID = 1, 2, 4, 6, 17
_SOURCE_COLUMNS = {"layer": "layer", "hlo_name": "hlo_name", "source": "nki_source_location"}


class _Interner:
    """Strings of one kind interned on one sequence: string -> iid, plus the entries not yet written."""

    def __init__(self) -> None:
        self.map: dict[str, int] = {}
        self.new: list[tuple[int, str]] = []

    def iids(self, arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
        """(iid per row, present mask or None when no nulls) for a string array."""
        enc = pc.dictionary_encode(_flat(arr))
        lut = np.zeros(max(len(enc.dictionary), 1), np.uint64)
        for j, value in enumerate(enc.dictionary.to_pylist()):
            iid = self.map.get(value)
            if iid is None:
                iid = len(self.map) + 1
                self.map[value] = iid
                self.new.append((iid, value))
            lut[j] = iid
        codes = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
        present = enc.indices.is_valid().to_numpy(zero_copy_only=False) if enc.indices.null_count else None
        return lut[codes], present

    def take_new(self) -> list[tuple[int, str]]:
        out, self.new = self.new, []
        return out


class _Sequence:
    """Incremental state of one packet sequence (one slice track lane)."""

    def __init__(self, seq_id: int) -> None:
        self.id = seq_id
        self.started = False
        self.names, self.cats, self.values = _Interner(), _Interner(), _Interner()

    def maybe_reset(self) -> None:
        if len(self.values.map) + len(self.names.map) > INTERN_LIMIT:
            self.started = False
            self.names, self.cats, self.values = _Interner(), _Interner(), _Interner()

    def interned_packet(self) -> bytes:
        """A packet with the strings interned since the last call (and the sequence reset on first use)."""
        p = TracePacket()
        p.trusted_packet_sequence_id = self.id
        d = p.interned_data
        if not self.started:
            p.sequence_flags = SEQ_CLEARED
            for name, iid in ANN.items():
                d.debug_annotation_names.add(iid=iid, name=name)
            self.started = True
        else:
            p.sequence_flags = SEQ_NEEDS
        for iid, name in self.names.take_new():
            d.event_names.add(iid=iid, name=name)
        for iid, name in self.cats.take_new():
            d.event_categories.add(iid=iid, name=name)
        for iid, value in self.values.take_new():
            d.debug_annotation_string_values.add(iid=iid, str=value.encode())
        return _one(p)


def _flat(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def _one(packet: TracePacket) -> bytes:
    t = Trace()
    t.packet.append(packet)
    return t.SerializeToString()


def _string_arrays(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(utf-8 bytes, offsets int64[n+1], present) of a string array, zero-copy where possible."""
    arr = _flat(arr).cast(pa.string())
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and len(bufs[2]) else np.zeros(1, np.uint8)
    present = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
    return data, offsets, present


def _int_annotation(name: str, values: np.ndarray, present: np.ndarray | None) -> tuple[Msg, np.ndarray | None]:
    return Msg(values.size).const(_DA_NAME, ANN[name]).varint(_DA_INT, values), present


def _annotations(kind: str, chunk: pa.Table, seq: _Sequence) -> list[tuple[Msg, np.ndarray | None]]:
    n = chunk.num_rows
    ids = to_numpy(chunk["id"])
    out = [(Msg(n).const(_DA_NAME, ANN["id"]).varint(_DA_INT, ids), None)]
    if kind == "instructions":
        data, offsets, present = _string_arrays(chunk["operands"])
        if present is None or present.any():
            out.append((Msg(n).const(_DA_NAME, ANN["operands"]).bytes_(_DA_STR, data, offsets), present))
    else:
        out.append(_int_annotation("bytes", to_numpy(chunk["bytes"]), None))
        out.append(_int_annotation("partitions", to_numpy(chunk["partitions"]), None))
    names = ("tensor", *_SOURCE_COLUMNS) if kind == "dma" else tuple(_SOURCE_COLUMNS)
    for name in names:
        col = chunk[_SOURCE_COLUMNS.get(name, name)]
        if col.null_count == n:
            continue
        iids, present = seq.values.iids(col)
        out.append((Msg(n).const(_DA_NAME, ANN[name]).varint(_DA_STR_IID, iids), present))
    if kind == "instructions":
        for name in ("flops", "wait_ns"):
            v = to_numpy(chunk[name])
            if v.any():
                out.append(_int_annotation(name, v, v > 0))
    else:
        for name, col in (("spill", "is_spill"), ("reload", "is_reload")):
            flag = to_numpy(chunk[col], bool)
            if flag.any():
                out.append((Msg(n).const(_DA_NAME, ANN[name]).const(_DA_BOOL, 1), flag))
    return out


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

    def lane(self, row: Row, rows: np.ndarray, uuid: int, bar) -> None:
        table = self.profile.table(row.table)
        f = facts(self.profile)
        ts_all, end_all = (f.i_ts, f.i_end) if row.table == "instructions" else (f.d_ts, f.d_end)
        event, kind, time = packet_order(ts_all[rows], end_all[rows])
        seq = _Sequence(self.seq())
        chunk = self.options.chunk_rows
        for p0 in range(0, event.size, chunk):
            ev, kd, tm = event[p0 : p0 + chunk], kind[p0 : p0 + chunk], time[p0 : p0 + chunk]
            seq.maybe_reset()
            starts = np.flatnonzero(kd != KIND_END)
            ends = np.flatnonzero(kd == KIND_END)
            parts = []
            if starts.size:
                parts.append(
                    (self.begin_packets(row, table, rows[ev[starts]], kd[starts], tm[starts], uuid, seq), starts)
                )
            if ends.size:
                te = Msg(ends.size).const(_TE_TYPE, 2).const(_TE_TRACK, uuid)
                parts.append((Msg(ends.size).varint(8, tm[ends]).message(11, te).const(10, seq.id), ends))
            body = frame(parts, ev.size)
            self.out.write(seq.interned_packet())
            self.out.write(memoryview(body))
            bar.advance(starts.size)

    def begin_packets(self, row: Row, table: pa.Table, rows: np.ndarray, kd: np.ndarray, tm: np.ndarray,
                      uuid: int, seq: _Sequence) -> Msg:  # fmt: skip
        n = rows.size
        chunk = table.take(pa.array(rows))
        if row.table == "instructions":
            names, _ = seq.names.iids(chunk["opcode"])
            cats, _ = seq.cats.iids(chunk["engine"])
        else:
            names, _ = seq.names.iids(chunk["direction"])
            dma_iid, _ = seq.cats.iids(pa.array(["dma"]))
            cats = np.full(n, dma_iid[0], np.uint64)
        te = Msg(n).varint(_TE_TYPE, np.where(kd == KIND_INSTANT, 3, 1)).const(_TE_TRACK, uuid)
        te.varint(_TE_NAME, names).varint(_TE_CAT, cats)
        flat = chunk.combine_chunks()
        for ann, present in _annotations(row.table, flat, seq):
            te.message(_TE_ANN, ann, present)
        if self.flows is not None:
            values, offsets = self.flows.outgoing(to_numpy(flat["id"]))
            te.repeated_fixed64(_TE_FLOW, values, offsets)
            values, offsets = self.flows.incoming(row.table, rows)
            te.repeated_fixed64(_TE_TFLOW, values, offsets)
        return Msg(n).varint(8, tm).message(11, te).const(10, seq.id).const(13, SEQ_NEEDS)

    def counters(self, rank0: int) -> None:
        table = counters(self.profile)
        if table.num_rows == 0:
            return
        names = list(dict.fromkeys(table["name"].to_pylist()))
        codes = pc.index_in(table["name"], pa.array(names)).to_numpy(zero_copy_only=False)
        ts, value = to_numpy(table["ts"]), to_numpy(table["value"], np.float64)
        for k, name in enumerate(names):
            label, unit = SERIES.get(name, (name, ""))
            uuid = COUNTER_UUID_BASE + k
            self.descriptor(uuid, label, rank0 + k, counter_unit=unit)
            seq = self.seq()
            rows = np.flatnonzero(codes == k)
            for c0 in range(0, rows.size, self.options.chunk_rows):
                r = rows[c0 : c0 + self.options.chunk_rows]
                te = Msg(r.size).const(_TE_TYPE, 4).const(_TE_TRACK, uuid).fixed64(_TE_DOUBLE, value[r])
                msg = Msg(r.size).varint(8, ts[r]).message(11, te).const(10, seq)
                self.out.write(memoryview(frame([(msg, np.arange(r.size))], r.size)))

    def run(self) -> None:
        self.process()
        f = facts(self.profile)
        plan: list[tuple[Row, list[tuple[np.ndarray, int]]]] = []
        rank = 0
        for row in plan_rows(self.profile):
            ts, end = (f.i_ts, f.i_end) if row.table == "instructions" else (f.d_ts, f.d_end)
            lanes = split_lanes(ts[row.rows], end[row.rows])
            lane_rows = []
            for lane in range(int(lanes.max(initial=0)) + 1):
                uuid = TRACK_UUID_BASE + rank
                name = row.label if lane == 0 else f"{row.label} (lane {lane + 1})"
                self.descriptor(uuid, name, rank)
                lane_rows.append((row.rows if lane == 0 and not lanes.any() else row.rows[lanes == lane], uuid))
                rank += 1
            plan.append((row, lane_rows))
        with progress(self.profile.event_count, "Writing Perfetto trace") as bar:
            for row, lane_rows in plan:
                for rows, uuid in lane_rows:
                    self.lane(row, rows, uuid, bar)
        self.counters(rank)


def write(profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
    """Stream `profile` as a Perfetto trace to `out` (see module doc)."""
    _Writer(profile, out, options).run()
