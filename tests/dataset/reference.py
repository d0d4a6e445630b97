"""A plain-Python reference of the cross-rank queries, computed straight from the Profiles.

Each function returns the rows `nprof.dataset.queries` defines, in the same order, from dicts and
loops only, so the SQL run by DuckDB and Spark is held to an obviously correct answer.
"""

from __future__ import annotations

import math
from collections import defaultdict

from nprof.profile import Profile


def _rows(table) -> list[dict]:
    return table.to_pylist()


def rank_totals(profiles: dict[int, Profile]) -> list[tuple]:
    out = []
    for rank, p in sorted(profiles.items()):
        dma = _rows(p.dma)
        cc = [r for r in _rows(p.collectives) if r["rank"] == rank]
        out.append(
            (rank, p.info.nd_idx, p.info.nc_idx, p.total_time_ns, p.instructions.num_rows, len(dma),
             sum(r["bytes"] for r in dma), len(cc), sum(r["wait_ns"] for r in cc))
        )
    return out


def _arrivals(profiles: dict[int, Profile]) -> dict[int, list[dict]]:
    """Collective rows by op id, each rank's own rows only."""
    ops: dict[int, list[dict]] = defaultdict(list)
    for rank, p in profiles.items():
        for r in _rows(p.collectives):
            if r["rank"] == rank:
                ops[r["id"]].append(r)
    return ops


def collective_ops(profiles: dict[int, Profile]) -> list[tuple]:
    out = []
    for op_id, rows in sorted(_arrivals(profiles).items()):
        last = max(r["ts"] for r in rows)
        waited = sum(r["wait_ns"] for r in rows) > 0
        straggler = min(r["rank"] for r in rows if r["ts"] == last) if waited else None
        out.append(
            (op_id, min(r["kind"] for r in rows), max(r["bytes"] for r in rows), len(rows),
             min(r["ts"] for r in rows), last, max(r["ts"] + r["duration"] for r in rows),
             max(r["wait_ns"] for r in rows), sum(r["wait_ns"] for r in rows), straggler)
        )
    return out


def stragglers(profiles: dict[int, Profile]) -> list[tuple]:
    caused: dict[int, list[int]] = defaultdict(list)
    for rows in _arrivals(profiles).values():
        last = max(r["ts"] for r in rows)
        latest = [r["rank"] for r in rows if r["ts"] == last]
        total = sum(r["wait_ns"] for r in rows)
        if len(latest) == 1 and total > 0:
            caused[latest[0]].append(total)
    return sorted(((r, len(w), sum(w)) for r, w in caused.items()), key=lambda t: (-t[2], t[0]))


def engine_utilisation(profiles: dict[int, Profile]) -> list[tuple]:
    out = []
    for rank, p in sorted(profiles.items()):
        busy: dict[str, list[int]] = defaultdict(list)
        for r in _rows(p.instructions):
            busy[r["engine"]].append(r["duration"])
        for engine in sorted(busy):
            d = busy[engine]
            out.append((rank, engine, len(d), sum(d), sum(d) * 100 / p.total_time_ns))
    return out


def top_ops(profiles: dict[int, Profile], top: int) -> list[tuple]:
    per: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rank, p in profiles.items():
        for r in _rows(p.instructions):
            per[(r["opcode"], r["engine"])][rank].append(r["duration"])
    out = []
    for (opcode, engine), by_rank in per.items():
        totals = {rank: sum(d) for rank, d in by_rank.items()}
        slowest = min(totals, key=lambda r: (-totals[r], r))
        total = sum(totals.values())
        out.append(
            (opcode, engine, sum(len(d) for d in by_rank.values()), total, len(totals), total / len(totals),
             max(totals.values()), slowest)
        )
    return sorted(out, key=lambda t: (-t[3], t[0], t[1]))[:top]


def wait_histogram(profiles: dict[int, Profile]) -> list[tuple]:
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for rows in _arrivals(profiles).values():
        for r in rows:
            bucket = -1 if r["wait_ns"] <= 0 else math.floor(math.log2(r["wait_ns"]))
            counts[(r["kind"], bucket)] += 1
    return [(k, b, n, 0 if b < 0 else 2**b) for (k, b), n in sorted(counts.items())]
