"""A small reader of Perfetto traces written by nprof, built on the bundled perfetto protos (for tests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


@dataclass
class Slice:
    track: str
    name: str
    category: str
    ts: int
    dur: int
    args: dict[str, object]
    flow_ids: list[int]
    terminating_flow_ids: list[int]


@dataclass
class Parsed:
    process_name: str = ""
    tracks: dict[int, str] = field(default_factory=dict)  # uuid -> name, in descriptor order
    ranks: dict[int, int] = field(default_factory=dict)
    counter_units: dict[str, str] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)
    counters: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def track_slices(self, name: str) -> list[Slice]:
        return [s for s in self.slices if s.track == name]


def read(path: str | Path) -> Parsed:
    trace = Trace()
    trace.ParseFromString(Path(path).read_bytes())
    out = Parsed()
    interned: dict[int, dict[str, dict[int, object]]] = {}
    open_: dict[int, list[Slice]] = {}
    last_ts: dict[int, int] = {}
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("process"):
                out.process_name = d.process.process_name
                continue
            out.tracks[d.uuid] = d.name
            out.ranks[d.uuid] = d.sibling_order_rank
            if d.HasField("counter"):
                out.counter_units[d.name] = d.counter.unit_name
            continue
        if p.sequence_flags & 1:
            interned[seq] = {"names": {}, "cats": {}, "ann": {}, "values": {}}
        if p.HasField("interned_data"):
            if seq not in interned:
                out.errors.append(f"interned data before state was cleared on sequence {seq}")
                interned[seq] = {"names": {}, "cats": {}, "ann": {}, "values": {}}
            st = interned[seq]
            d = p.interned_data
            st["names"].update({e.iid: e.name for e in d.event_names})
            st["cats"].update({e.iid: e.name for e in d.event_categories})
            st["ann"].update({e.iid: e.name for e in d.debug_annotation_names})
            st["values"].update({e.iid: e.str.decode() for e in d.debug_annotation_string_values})
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if seq in last_ts and p.timestamp < last_ts[seq]:
            out.errors.append(f"sequence {seq} goes back in time at {p.timestamp}")
        last_ts[seq] = p.timestamp
        track = out.tracks.get(e.track_uuid)
        if track is None:
            out.errors.append(f"event on undeclared track {e.track_uuid}")
            continue
        if e.type == TrackEvent.TYPE_COUNTER:
            out.counters.setdefault(track, []).append((p.timestamp, e.double_counter_value))
            continue
        if e.type == TrackEvent.TYPE_SLICE_END:
            stack = open_.get(e.track_uuid) or []
            if not stack:
                out.errors.append(f"end without begin on {track} at {p.timestamp}")
                continue
            s = stack.pop()
            s.dur = p.timestamp - s.ts
            continue
        st = interned.get(seq)
        uses_interning = e.HasField("name_iid") or len(e.category_iids) > 0
        if uses_interning and (st is None or not (p.sequence_flags & 2)):
            out.errors.append(f"event on sequence {seq} without incremental state")
            continue
        st = st or {"names": {}, "cats": {}, "ann": {}, "values": {}}
        args: dict[str, object] = {}
        for a in e.debug_annotations:
            key = a.name if a.HasField("name") else st["ann"][a.name_iid]
            if a.HasField("string_value_iid"):
                args[key] = st["values"][a.string_value_iid]
            elif a.HasField("string_value"):
                args[key] = a.string_value
            elif a.HasField("bool_value"):
                args[key] = a.bool_value
            else:
                args[key] = a.int_value
        name = e.name if e.HasField("name") else st["names"][e.name_iid]
        category = e.categories[0] if len(e.categories) else st["cats"][e.category_iids[0]]
        s = Slice(track, name, category, p.timestamp, 0, args, list(e.flow_ids), list(e.terminating_flow_ids))
        out.slices.append(s)
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_.setdefault(e.track_uuid, []).append(s)
    for uuid, stack in open_.items():
        if stack:
            out.errors.append(f"{len(stack)} slices never closed on {out.tracks[uuid]}")
    return out
