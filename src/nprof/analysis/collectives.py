"""Cross-rank analysis of a multi-worker run: per-op waits, the straggler, per-rank collective totals.

Contract: `analyze_group(ranks) -> GroupAnalysis` where `ranks` maps rank -> `RankFacts` (its `collectives`
table — only the rows describing that rank are used — its total time, nd/nc indices). Pure, deterministic.

* Per operation (by shared op id): kind, bytes, start = latest arrival, end = latest arrival + duration of the
  latest arriver, every participant's arrival and wait, the *straggler* (the last to arrive; ties: lowest
  rank), `max_wait_ns` and `total_wait_ns` (sum over participants: device time the others lost to it).
* Per rank: total_time_ns, cc_op_count, cc_op_time_ns (union of its op intervals), cc_wait_ns (sum of its
  waits), `caused_wait_ns` (sum of the total waits of the operations it arrived last at, when it was the
  only last arriver).
* The job: `straggler` = the rank with the largest `caused_wait_ns` (None when nobody waited),
  `slowest_rank` = the rank with the longest total time (ties: the one that made others wait most, then the
  lowest rank — collectives end together, so ranks that synchronise often tie).
`to_json()` gives the dict the web API and `summary-json` print.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class RankFacts:
    """What the analysis needs of one rank's profile."""

    collectives: pa.Table
    total_time_ns: int
    nd_idx: int = 0
    nc_idx: int = 0
    profile_id: str | None = None


@dataclass
class OpWait:
    rank: int
    arrival: int
    wait_ns: int
    duration: int


@dataclass
class OpSummary:
    id: int
    kind: str
    bytes: int
    algorithm: str | None
    start: int
    end: int
    straggler: int
    max_wait_ns: int
    total_wait_ns: int
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
    caused_wait_ns: int = 0


@dataclass
class GroupAnalysis:
    ranks: list[RankSummary]
    ops: list[OpSummary]
    straggler: int | None
    slowest_rank: int | None
    total_wait_ns: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


def analyze_group(ranks: Mapping[int, RankFacts]) -> GroupAnalysis:
    """Per-op and per-rank collective facts of a multi-worker run (see module doc)."""
    rows: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    per_rank: dict[int, RankSummary] = {}
    for rank, facts in sorted(ranks.items()):
        t = facts.collectives
        data = t.to_pydict() if t.num_rows else {n: [] for n in t.schema.names}
        mine = [i for i, r in enumerate(data.get("rank", [])) if r == rank]
        ts = np.asarray([data["ts"][i] for i in mine], np.int64)
        dur = np.asarray([data["duration"][i] for i in mine], np.int64)
        per_rank[rank] = RankSummary(
            rank,
            facts.profile_id,
            facts.nd_idx,
            facts.nc_idx,
            int(facts.total_time_ns),
            len({data["id"][i] for i in mine}),
            union_length(ts, ts + dur),
            int(sum(data["wait_ns"][i] for i in mine)),
        )
        for i in mine:
            rows.setdefault(int(data["id"][i]), []).append((rank, {k: data[k][i] for k in data}))
    ops: list[OpSummary] = []
    for op_id in sorted(rows):
        parts = rows[op_id]
        last = max(int(d["ts"]) for _, d in parts)
        late = sorted(r for r, d in parts if int(d["ts"]) == last)
        lr, ld = next((r, d) for r, d in parts if r == late[0])
        waits = [OpWait(r, int(d["ts"]), int(d["wait_ns"]), int(d["duration"])) for r, d in sorted(parts)]
        total_wait = sum(w.wait_ns for w in waits)
        ops.append(
            OpSummary(
                op_id,
                str(ld["kind"]),
                int(ld["bytes"]),
                ld.get("algorithm"),
                last,
                last + int(ld["duration"]),
                lr,
                max((w.wait_ns for w in waits), default=0),
                total_wait,
                waits,
            )
        )
        if len(late) == 1 and total_wait > 0:
            per_rank[lr].caused_wait_ns += total_wait
    summaries = [per_rank[r] for r in sorted(per_rank)]
    culprit = max(summaries, key=lambda s: (s.caused_wait_ns, -s.rank), default=None)
    slowest = max(summaries, key=lambda s: (s.total_time_ns, s.caused_wait_ns, -s.rank), default=None)
    return GroupAnalysis(
        summaries,
        ops,
        culprit.rank if culprit is not None and culprit.caused_wait_ns > 0 else None,
        slowest.rank if slowest is not None else None,
        sum(op.total_wait_ns for op in ops),
    )
