"""`analyze_group` for many simulated ranks at once: the same answer from one table of every rank's rows.

Contract: `analyze_table(collectives, ranks) -> dict | None` equals `analyze_group(facts).to_json()` (module
`nprof.analysis.collectives`, the plain reference the tests hold this to) where `collectives` holds, for every
rank, the rows of its own `collectives` table whose `rank` is that rank (columns id, kind, bytes, rank, ts,
duration, wait_ns, algorithm), `ranks` lists each rank's {"rank", "profile_id", "nd_idx", "nc_idx",
"total_time_ns"}, and no rank has host exchange rows. It covers the simulated (device-clock) operations of a
multi-worker capture; when any row is a host-measured collective it returns None (use `analyze_group`).
Column arithmetic in numpy (one sort by op, one by rank) instead of a pass per rank and row, and the JSON
built directly (no dataclass round trip): a 1,024-rank job in tens of milliseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from nprof.analysis.collectives import union_length
from nprof.capture.host_collectives import ALGORITHM as HOST_ALGORITHM


def _per_rank(cols: dict[str, np.ndarray], ranks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each rank's summary without the caused waits (see `nprof.analysis.collectives.RankSummary`)."""
    order = np.lexsort((cols["ts"], cols["rank"]))
    rk, ts, dur, wait, ids = (cols[k][order] for k in ("rank", "ts", "duration", "wait_ns", "id"))
    out = {}
    for info in sorted(ranks, key=lambda r: r["rank"]):
        r = int(info["rank"])
        a, b = np.searchsorted(rk, r, side="left"), np.searchsorted(rk, r, side="right")
        out[r] = {"rank": r, "profile_id": info["profile_id"], "nd_idx": int(info["nd_idx"]),
                  "nc_idx": int(info["nc_idx"]), "total_time_ns": int(info["total_time_ns"]),
                  "cc_op_count": int(np.unique(ids[a:b]).size),
                  "cc_op_time_ns": union_length(ts[a:b], ts[a:b] + dur[a:b]),
                  "cc_wait_ns": int(wait[a:b].sum()), "host_wait_ns": 0, "caused_wait_ns": 0,
                  "caused_host_wait_ns": 0}  # fmt: skip
    return out


def _op(cols: dict[str, np.ndarray], text: dict[str, list], seg: np.ndarray) -> tuple[dict[str, Any], int | None]:
    """One operation's summary from its rows `seg` (in rank order), and the rank credited with its wait."""
    rank, ts, wait, dur = (cols[k][seg] for k in ("rank", "ts", "wait_ns", "duration"))
    least = int(wait.min())
    late = np.flatnonzero(wait == least)  # in rank order: late[0] is the lowest rank among the last to arrive
    s = int(late[0])
    begins = ts + wait
    head = int(seg[0])
    total = int(wait.sum())
    per = zip(rank.tolist(), ts.tolist(), wait.tolist(), dur.tolist(), strict=True)
    op = {"id": int(cols["id"][head]), "kind": str(text["kind"][head]), "bytes": int(cols["bytes"][head]),
          "algorithm": text["algorithm"][head], "clock": "device", "start": int(begins.min()),
          "end": int((ts + dur).max()), "transfer_ns": int(dur[s] - wait[s]), "straggler": int(rank[s]),
          "max_wait_ns": int(wait.max()), "total_wait_ns": total,
          "launch_skew_ns": int(begins.max() - begins.min()), "host_straggler": None, "host_max_wait_ns": None,
          "host_total_wait_ns": None,
          "ranks": [{"rank": r, "arrival": a, "wait_ns": w, "duration": d, "host_arrival": None, "host_wait_ns": None}
                    for r, a, w, d in per]}  # fmt: skip
    return op, int(rank[s]) if late.size == 1 and total > 0 else None


def analyze_table(collectives: pa.Table, ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cross-rank analysis of every rank's own collectives rows, as `analyze_group(...).to_json()`; None
    when a row was measured on the host (see module doc)."""
    text = {k: collectives.column(k).to_pylist() for k in ("kind", "algorithm")}
    if HOST_ALGORITHM in text["algorithm"]:
        return None
    names = ("id", "rank", "ts", "duration", "wait_ns", "bytes")
    cols = {k: collectives.column(k).to_numpy(zero_copy_only=False).astype(np.int64) for k in names}
    per_rank = _per_rank(cols, ranks)
    order = np.lexsort((cols["rank"], cols["id"]))
    cuts = np.flatnonzero(np.diff(cols["id"][order])) + 1
    ops = []
    for seg in np.split(order, cuts) if order.size else []:
        op, credited = _op(cols, text, seg)
        ops.append(op)
        if credited is not None:
            per_rank[credited]["caused_wait_ns"] += op["total_wait_ns"]
    summaries = [per_rank[r] for r in sorted(per_rank)]
    culprit = max(summaries, key=lambda s: (s["caused_wait_ns"], -s["rank"]), default=None)
    slowest = max(summaries, key=lambda s: (s["total_time_ns"], s["caused_wait_ns"], -s["rank"]), default=None)
    return {
        "ranks": summaries,
        "ops": ops,
        "straggler": culprit["rank"] if culprit is not None and culprit["caused_wait_ns"] > 0 else None,
        "slowest_rank": slowest["rank"] if slowest is not None else None,
        "total_wait_ns": sum(op["total_wait_ns"] for op in ops),
        "host_straggler": None,
        "host_total_wait_ns": 0,
    }
