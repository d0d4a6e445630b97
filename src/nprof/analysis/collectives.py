"""Cross-rank analysis of a multi-worker run: per-op waits, the straggler, per-rank collective totals.

Contract: `analyze_group(ranks) -> GroupAnalysis` where `ranks` maps rank -> `RankFacts` (its `collectives`
table — only the rows describing that rank are used — its total time, nd/nc indices, and optionally its
host exchange rows: `exchange_facts`). Pure, deterministic.

Two clocks, never mixed (docs/system.md "Two clocks"): an operation's `clock` is `"host"` for collectives
measured on the host (algorithm `gloo (host, measured)`) and `"device"` for the others (the virtual device's
simulated collectives). Its `wait_ns` per rank, `max_wait_ns`, `total_wait_ns` and `straggler` are the ones
of its own clock, read from the rows' `wait_ns` (a simulated wait is the model's; a host wait was measured).
A device operation of a system profile can also carry the host's measured side: the wait of the rank's
data exchange for it (`host_wait_ns` per rank, `host_max_wait_ns`, `host_total_wait_ns`, `host_straggler`;
None when not recorded); a host operation's host_* fields are its own waits.

* Per operation (by shared op id): kind, bytes, the rank's `arrival` (row ts on the shared axis), `wait_ns`,
  `duration`; `start` = the earliest end of a wait (ts + wait_ns) and `end` = the latest ts + duration over
  its ranks — on one clock (a simulated job, or host ops) the common transfer window; for the simulated
  collectives of a system profile each rank's transfer sits at its own launch plus simulated time, so the
  ranks' windows differ by how far apart the host launched them (`launch_skew_ns` = max - min of ts + wait).
  The *straggler* is the last to arrive: the rank with the smallest wait (ties: lowest rank); `transfer_ns` is
  its duration minus its wait (the transfer once everyone arrived).
* Per rank: total_time_ns, cc_op_count, cc_op_time_ns (union of its op intervals), cc_wait_ns (sum of its
  device waits), host_wait_ns (sum of its measured host waits: host ops and exchanges), `caused_wait_ns` /
  `caused_host_wait_ns` (the total waits of the operations it alone arrived last at, per clock).
* The job: `straggler` / `host_straggler` = the rank with the largest caused wait on that clock (None when
  nobody waited), `total_wait_ns` (device ops) / `host_total_wait_ns` (host ops and exchanges),
  `slowest_rank` = the rank with the longest total time (ties: the one that made others wait most, then the
  lowest rank).
`to_json()` gives the dict the web API and `summary-json` print.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from nprof.capture.host_collectives import ALGORITHM as HOST_ALGORITHM
from nprof.capture.system import EXCHANGE_TRACK

__all__ = ["EXCHANGE_TRACK", "HOST_ALGORITHM", "GroupAnalysis", "RankFacts", "analyze_group", "exchange_facts"]


@dataclass(frozen=True)
class RankFacts:
    """What the analysis needs of one rank's profile."""

    collectives: pa.Table
    total_time_ns: int
    nd_idx: int = 0
    nc_idx: int = 0
    profile_id: str | None = None
    exchanges: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # op id -> (host ts, measured wait)


@dataclass
class OpWait:
    rank: int
    arrival: int
    wait_ns: int
    duration: int
    host_arrival: int | None = None
    host_wait_ns: int | None = None


@dataclass
class OpSummary:
    id: int
    kind: str
    bytes: int
    algorithm: str | None
    clock: str
    start: int
    end: int
    transfer_ns: int
    straggler: int
    max_wait_ns: int
    total_wait_ns: int
    launch_skew_ns: int
    host_straggler: int | None
    host_max_wait_ns: int | None
    host_total_wait_ns: int | None
    ranks: list[OpWait] = field(default_factory=list)


@dataclass
class RankSummary:
    rank: int
    profile_id: str | None
    nd_idx: int
    nc_idx: int
    total_time_ns: int
    cc_op_count: int
    cc_op_time_ns: int
    cc_wait_ns: int
    host_wait_ns: int
    caused_wait_ns: int = 0
    caused_host_wait_ns: int = 0


@dataclass
class GroupAnalysis:
    ranks: list[RankSummary]
    ops: list[OpSummary]
    straggler: int | None
    slowest_rank: int | None
    total_wait_ns: int
    host_straggler: int | None
    host_total_wait_ns: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def exchange_facts(hlo_names: list[str | None], ts: list[int], wait_ns: list[int]) -> dict[int, tuple[int, int]]:
    """op id -> (host ts, measured wait) of a rank's `nprof.exchange` rows (their hlo_name ends in `#<op id>`)."""
    out = {}
    for name, t, w in zip(hlo_names, ts, wait_ns, strict=True):
        head, _, op = str(name or "").rpartition("#")
        if head and op.isdigit():
            out[int(op)] = (int(t), int(w))
    return out


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length covered by the intervals [starts[i], ends[i])."""
    if starts.size == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    total, cur_s, cur_e = 0, int(s[0]), int(e[0])
    for a, b in zip(s[1:].tolist(), e[1:].tolist(), strict=True):
        if a > cur_e:
            total += cur_e - cur_s
            cur_s = a
        cur_e = max(cur_e, b)
    return total + cur_e - cur_s


def _last(waits: list[tuple[int, int]]) -> tuple[int, bool]:
    """(the straggler: smallest wait, lowest rank on ties; whether it is the only one) of (rank, wait) pairs."""
    least = min(w for _, w in waits)
    late = sorted(r for r, w in waits if w == least)
    return late[0], len(late) == 1


def _host_side(op_id: int, clock: str, waits: list[OpWait], ranks: Mapping[int, RankFacts]) -> None:
    """Fill each OpWait's host arrival and measured wait (a host op: its own; a device op: its exchange)."""
    for w in waits:
        if clock == "host":
            w.host_arrival, w.host_wait_ns = w.arrival, w.wait_ns
        elif op_id in ranks[w.rank].exchanges:
            w.host_arrival, w.host_wait_ns = ranks[w.rank].exchanges[op_id]


def _op(op_id: int, parts: list[tuple[int, dict[str, Any]]], ranks: Mapping[int, RankFacts]) -> OpSummary:
    """One operation's summary from its (rank, row) parts (module doc)."""
    waits = [
        OpWait(r, int(d["ts"]), int(d["wait_ns"]), int(d["duration"])) for r, d in sorted(parts, key=lambda x: x[0])
    ]
    head = parts[0][1]
    clock = "host" if head.get("algorithm") == HOST_ALGORITHM else "device"
    _host_side(op_id, clock, waits, ranks)
    straggler, _ = _last([(w.rank, w.wait_ns) for w in waits])
    last = next(w for w in waits if w.rank == straggler)
    begins = [w.arrival + w.wait_ns for w in waits]
    hosts = [(w.rank, w.host_wait_ns) for w in waits if w.host_wait_ns is not None]
    known = len(hosts) == len(waits)
    return OpSummary(
        op_id, str(head["kind"]), int(head["bytes"]), head.get("algorithm"), clock, min(begins),
        max(w.arrival + w.duration for w in waits), last.duration - last.wait_ns, straggler,
        max(w.wait_ns for w in waits),
        sum(w.wait_ns for w in waits), max(begins) - min(begins),
        _last(hosts)[0] if known else None,
        max(w for _, w in hosts) if known else None,
        sum(w for _, w in hosts) if known else None,
        waits,
    )  # fmt: skip


def _rank_summary(rank: int, facts: RankFacts, data: dict[str, list[Any]], mine: list[int]) -> RankSummary:
    """A rank's totals from its own collectives rows `mine` (indices into `data`)."""
    ts = np.asarray([data["ts"][i] for i in mine], np.int64)
    dur = np.asarray([data["duration"][i] for i in mine], np.int64)
    host = [i for i in mine if data["algorithm"][i] == HOST_ALGORITHM]
    device = [i for i in mine if data["algorithm"][i] != HOST_ALGORITHM]
    return RankSummary(
        rank, facts.profile_id, facts.nd_idx, facts.nc_idx, int(facts.total_time_ns),
        len({data["id"][i] for i in mine}), union_length(ts, ts + dur),
        int(sum(data["wait_ns"][i] for i in device)),
        int(sum(data["wait_ns"][i] for i in host)) + sum(w for _, w in facts.exchanges.values()),
    )  # fmt: skip


def analyze_group(ranks: Mapping[int, RankFacts]) -> GroupAnalysis:
    """Per-op and per-rank collective facts of a multi-worker run (see module doc)."""
    rows: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    per_rank: dict[int, RankSummary] = {}
    for rank, facts in sorted(ranks.items()):
        t = facts.collectives
        data = t.to_pydict() if t.num_rows else {n: [] for n in t.schema.names}
        mine = [i for i, r in enumerate(data.get("rank", [])) if r == rank]
        per_rank[rank] = _rank_summary(rank, facts, data, mine)
        for i in mine:
            rows.setdefault(int(data["id"][i]), []).append((rank, {k: data[k][i] for k in data}))
    ops = [_op(op_id, rows[op_id], ranks) for op_id in sorted(rows)]
    for op in ops:
        straggler, alone = _last([(w.rank, w.wait_ns) for w in op.ranks])
        if op.clock == "device" and alone and op.total_wait_ns > 0:
            per_rank[straggler].caused_wait_ns += op.total_wait_ns
        if op.host_straggler is not None and op.host_total_wait_ns:
            hs, alone = _last([(w.rank, int(w.host_wait_ns or 0)) for w in op.ranks])
            if alone:
                per_rank[hs].caused_host_wait_ns += op.host_total_wait_ns
    summaries = [per_rank[r] for r in sorted(per_rank)]
    culprit = max(summaries, key=lambda s: (s.caused_wait_ns, -s.rank), default=None)
    host = max(summaries, key=lambda s: (s.caused_host_wait_ns, -s.rank), default=None)
    slowest = max(summaries, key=lambda s: (s.total_time_ns, s.caused_wait_ns, -s.rank), default=None)
    return GroupAnalysis(
        summaries,
        ops,
        culprit.rank if culprit is not None and culprit.caused_wait_ns > 0 else None,
        slowest.rank if slowest is not None else None,
        sum(op.total_wait_ns for op in ops if op.clock == "device"),
        host.rank if host is not None and host.caused_host_wait_ns > 0 else None,
        sum(op.host_total_wait_ns or 0 for op in ops),
    )
