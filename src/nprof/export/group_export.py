"""File outputs of a whole multi-worker capture: `nprof view -d DIR --output-format F`.

Contract:
* `rank_files(dir) -> dict[rank, Path]` finds `profile_rank_<i>.ntff` (NprofError when none);
  `load_ranks(dir)` opens them in parallel threads (progress bar on a terminal).
* `group_summary(profiles) -> GroupAnalysis` (`nprof.analysis.collectives`).
* Formats: `summary-text` (the ranks' assumed-figures notes, as in the single-profile summary-text, then a
  per-rank table — nd/nc, total_time, cc_op_time, cc_op_count, cc_wait_time,
  caused_wait (device clock, simulated), host_wait (measured) — then one line per collective operation with its
  clock, transfer, straggler and waits, then the job's straggler and slowest rank), `summary-json` (the same as
  JSON: `GroupAnalysis.to_json()`), `perfetto` (one trace, one process per rank — pid rank+1 —, written by
  the single-profile exporter per rank and merged with track uuids, sequence ids and flow ids moved into a
  per-rank range, plus a "Collective wait | transfer" track per rank (lanes when operations overlap) with a
  "wait for other ranks" slice (named with its clock: simulated, or measured for gloo) and a `<kind> #<id>`
  transfer slice per operation — the single-profile
  "Collectives" track shows arrival to end in one slice; default file `ntff_group.pftrace`).
  `dataset` (every table of every rank as Hive-partitioned Parquet, written one rank at a time:
  `nprof.dataset.write`; default directory `ntff_dataset`). Other formats refuse `-d` with a one-line hint.
* `export_group_from_args(args) -> Outcome`: the CLI branch; summaries are its stdout unless `--output-file`.
"""

from __future__ import annotations

import argparse
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pyarrow.compute as pc

from nprof.analysis.collectives import (
    EXCHANGE_TRACK,
    HOST_ALGORITHM,
    GroupAnalysis,
    RankFacts,
    analyze_group,
    exchange_facts,
)
from nprof.atomic import atomic_file
from nprof.capture.rendezvous import align_ranks, needs_alignment
from nprof.dataset import write_dataset
from nprof.dataset.ranks import rank_files
from nprof.errors import NprofError
from nprof.export.options import ExportOptions
from nprof.export.summary_text import render_notes
from nprof.outcome import Outcome
from nprof.profile import Profile
from nprof.progress import progress

GROUP_FORMATS = ("summary-text", "summary-json", "perfetto", "dataset")
_RANK_SPAN = 1 << 32  # track uuids of rank r live in [(r + 1) * 2**32, (r + 2) * 2**32)
_CC_TRACK = 3 << 30  # offset of the per-rank "Collectives" tracks inside a rank's uuid range


def load_ranks(directory: str | os.PathLike[str]) -> dict[int, Profile]:
    """Every rank's profile, on one clock (`capture.rendezvous.align_ranks` when the ranks come from several
    captures, e.g. one per node)."""
    files = rank_files(directory)
    out: dict[int, Profile] = {}
    with progress(len(files), f"Loading {len(files)} worker profiles") as bar, ThreadPoolExecutor(2) as pool:
        for rank, prof in zip(files, pool.map(Profile.load, files.values()), strict=True):
            out[rank] = prof
            bar.advance(1)
    if needs_alignment({r: p.info for r, p in out.items()}):
        out = align_ranks(out)
    return out


def _exchanges(p: Profile) -> dict[int, tuple[int, int]]:
    """op id -> (host ts, measured wait) of the profile's host exchange rows."""
    t = p.instructions
    if not t.num_rows:
        return {}
    t = t.filter(pc.equal(t["track"], EXCHANGE_TRACK))
    return exchange_facts(t["hlo_name"].to_pylist(), t["ts"].to_pylist(), t["wait_ns"].to_pylist())


def group_summary(profiles: dict[int, Profile]) -> GroupAnalysis:
    return analyze_group(
        {
            r: RankFacts(p.collectives, p.total_time_ns, p.info.nd_idx, p.info.nc_idx, None, _exchanges(p))
            for r, p in profiles.items()
        }
    )


def _s(ns: int) -> str:
    return f"{ns / 1e9:.6g}"


def summary_text(g: GroupAnalysis) -> str:
    lines = [f"{'rank':>5} {'nd_idx':>6} {'nc_idx':>6} {'total_time':>12} {'cc_op_time':>12} {'cc_op_count':>11} "
             f"{'cc_wait_time':>12} {'caused_wait':>12} {'host_wait':>12}"]  # fmt: skip
    measured = any(op.host_max_wait_ns is not None for op in g.ops)  # else no host clock: host_wait is N/A
    for r in g.ranks:
        host = _s(r.host_wait_ns) if measured else "-"
        lines.append(
            f"{r.rank:>5} {r.nd_idx:>6} {r.nc_idx:>6} {_s(r.total_time_ns):>12} {_s(r.cc_op_time_ns):>12} "
            f"{r.cc_op_count:>11} {_s(r.cc_wait_ns):>12} {_s(r.caused_wait_ns):>12} {host:>12}"
        )
    lines.append("(cc_wait_time, caused_wait: the device's waits, simulated; host_wait: measured on the host clock, "
                 "- when no host was measured)")  # fmt: skip
    lines.append("")
    lines.append(f"collective operations: {len(g.ops)} (times in seconds; straggler = last rank to arrive; "
                 "each op's waits on its clock: device = simulated, host = measured)")  # fmt: skip
    lines.append(f"{'id':>4} {'kind':<15} {'bytes':>10} {'clock':<6} {'start':>12} {'transfer':>12} {'max_wait':>12} "
                 f"{'straggler':>9} {'host_max_wait':>13}")  # fmt: skip
    for op in g.ops:
        host = "-" if op.host_max_wait_ns is None else _s(op.host_max_wait_ns)
        lines.append(
            f"{op.id:>4} {op.kind:<15} {op.bytes:>10} {op.clock:<6} {_s(op.start):>12} {_s(op.transfer_ns):>12} "
            f"{_s(op.max_wait_ns):>12} {op.straggler if op.max_wait_ns else '-':>9} {host:>13}"
        )
    lines.append("")
    culprit = "none (no rank waited)" if g.straggler is None else f"rank {g.straggler}"
    lines.append(f"straggler     {culprit}")
    lines.append(f"slowest_rank  {g.slowest_rank}")
    lines.append(f"total_wait    {_s(g.total_wait_ns)} (device, simulated)")
    if g.host_total_wait_ns or g.host_straggler is not None:
        who = "none" if g.host_straggler is None else f"rank {g.host_straggler}"
        lines.append(f"host_wait     {_s(g.host_total_wait_ns)} (host, measured; straggler {who})")
    return "\n".join(lines) + "\n"


def write_perfetto(profiles: dict[int, Profile], out: BinaryIO, options: ExportOptions) -> None:
    """One Perfetto trace with a process per rank (see module doc)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    from nprof.export.perfetto_export import write

    seq_base = 0
    with progress(len(profiles), "Writing multi-worker Perfetto trace") as bar:
        for rank, prof in profiles.items():
            buf = io.BytesIO()
            write(prof, buf, options)
            trace = Trace()
            trace.ParseFromString(buf.getvalue())
            shift = (rank + 1) * _RANK_SPAN
            top = 0
            for p in trace.packet:
                if p.trusted_packet_sequence_id:
                    top = max(top, p.trusted_packet_sequence_id)
                    p.trusted_packet_sequence_id += seq_base
                if p.HasField("track_descriptor"):
                    d = p.track_descriptor
                    d.uuid += shift
                    if d.parent_uuid:
                        d.parent_uuid += shift
                if p.HasField("track_event"):
                    te = p.track_event
                    if te.track_uuid:
                        te.track_uuid += shift
                    if len(te.flow_ids):
                        te.flow_ids[:] = [f + shift for f in te.flow_ids]
                    if len(te.terminating_flow_ids):
                        te.terminating_flow_ids[:] = [f + shift for f in te.terminating_flow_ids]
            seq_base += top + 1
            out.write(trace.SerializeToString())
            for packets in _collective_lanes(prof, shift, seq_base):
                seq_base += 1
                out.write(b"".join(_one(pk) for pk in packets))
            bar.advance(1)


def _one(packet: Any) -> bytes:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    t = Trace()
    t.packet.append(packet)
    return t.SerializeToString()


def _collective_lanes(prof: Profile, shift: int, seq0: int) -> list[list[Any]]:
    """Per lane of non-overlapping collectives of this rank: a track ("Collective wait | transfer") with a
    "wait" slice (arrival -> last arrival) and a transfer slice named `<kind> #<id>` per operation."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

    from nprof.export.perfetto_export import PROCESS_UUID

    rows = sorted(
        (r for r in prof.collectives.to_pylist() if r["rank"] == prof.info.rank), key=lambda r: (r["ts"], r["id"])
    )
    lane_end: list[int] = []
    lanes: list[list[Any]] = []
    for r in rows:
        lane = next((i for i, e in enumerate(lane_end) if e <= r["ts"]), len(lane_end))
        end = r["ts"] + r["duration"]
        if lane == len(lane_end):
            lane_end.append(end)
            desc = TracePacket(trusted_packet_sequence_id=seq0 + lane + 1)
            d = desc.track_descriptor
            d.uuid, d.parent_uuid = shift + _CC_TRACK + lane, shift + PROCESS_UUID
            d.name = "Collective wait | transfer" + (f" (lane {lane + 1})" if lane else "")
            d.sibling_order_rank = -100 + lane
            lanes.append([desc])
        lane_end[lane] = end
        seq = seq0 + lane + 1
        start = r["ts"] + r["wait_ns"]
        clock = "measured" if r.get("algorithm") == HOST_ALGORITHM else "simulated"
        spans = [(f"wait for other ranks (#{r['id']}, {clock})", r["ts"], start)] if r["wait_ns"] > 0 else []
        spans.append((f"{r['kind']} #{r['id']}", start, end))
        for name, t0, t1 in spans:
            for ts, kind in ((t0, TrackEvent.TYPE_SLICE_BEGIN), (t1, TrackEvent.TYPE_SLICE_END)):
                pk = TracePacket(timestamp=ts, trusted_packet_sequence_id=seq)
                pk.track_event.type = kind
                pk.track_event.track_uuid = shift + _CC_TRACK + lane
                if kind == TrackEvent.TYPE_SLICE_BEGIN:
                    pk.track_event.name = name
                    pk.track_event.categories.append("collective")
                lanes[lane].append(pk)
    return lanes


def export_group_from_args(args: argparse.Namespace) -> Outcome:
    """`nprof view -d DIR --output-format F [--output-file PATH]` (see module doc)."""
    fmt = args.output_format
    if fmt not in GROUP_FORMATS:
        raise NprofError(
            f"--output-format {fmt} works on one profile; give -s DIR/profile_rank_<i>.ntff, or use -d with "
            f"{', '.join(GROUP_FORMATS)}"
        )
    if fmt == "dataset":
        target = Path(args.output_file or "ntff_dataset")
        ranks = write_dataset(args.directory, target)
        return Outcome(notes=(f"nprof view: wrote {target} ({len(ranks)} ranks, Hive-partitioned Parquet)",))
    profiles = load_ranks(args.directory)
    options = ExportOptions(show_flows=bool(getattr(args, "show_perfetto_flows", False)))
    if fmt == "perfetto":
        target = Path(args.output_file or "ntff_group.pftrace")
        with atomic_file(target) as fh:
            write_perfetto(profiles, fh, options)
        return Outcome(notes=(f"nprof view: wrote {target} ({len(profiles)} ranks)",))
    g = group_summary(profiles)
    notes = "".join(dict.fromkeys(render_notes(p) for p in profiles.values()))  # one line per distinct preset note
    if fmt == "summary-text":
        text = notes + summary_text(g)
    else:
        text = orjson.dumps(g.to_json(), option=orjson.OPT_INDENT_2).decode()
    if fmt == "summary-json":
        text += "\n"
    if args.output_file:
        with atomic_file(Path(args.output_file)) as fh:
            fh.write(text.encode())
        return Outcome(notes=(f"nprof view: wrote {args.output_file}",))
    return Outcome(text)
