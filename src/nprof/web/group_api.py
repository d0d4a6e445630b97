"""JSON API of the multi-worker aggregated view: `GET /api/groups/{group_id}/collectives`.

Contract: `group_router(store)` returns an APIRouter (mounted before the main API's catch-all) with

* `GET /api/groups/{group_id}/collectives?bins=N` (N in 16..4000, default 400) ->
  `{"id", "display_name", "t_max" (ns, the longest rank), "bins", "bin_ns",
    "ranks": [{"rank", "profile_id", "nd_idx", "nc_idx", "total_time_ns", "cc_op_count", "cc_op_time_ns",
               "cc_wait_ns", "host_wait_ns", "caused_wait_ns", "caused_host_wait_ns", "busy": [N floats]}],
    "ops": [{"id", "kind", "bytes", "algorithm", "clock" ("device": simulated | "host": measured), "start", "end",
             "transfer_ns", "straggler", "max_wait_ns", "total_wait_ns", "launch_skew_ns", "host_straggler",
             "host_max_wait_ns", "host_total_wait_ns",
             "ranks": [{"rank", "arrival", "wait_ns", "duration", "host_arrival", "host_wait_ns"}]}],
    "straggler", "host_straggler" (rank or null), "slowest_rank", "total_wait_ns", "host_total_wait_ns"}`
  (`nprof.analysis.collectives.analyze_group` over every rank's stored `collectives` table and its host exchange
  rows: each op's waits are on its own clock, the host_* fields measured on the host — see that module).
  `busy[i]` is the mean number of compute engines (tensor, vector, scalar, gpsimd, sync) busy in bin i of the
  shared axis [0, t_max) — event time is credited to the bin where the event starts, capped at 5.
Results are cached per (group, bins, the ranks' ingest stamps). Unknown groups: 404 via NotFound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Query

from nprof.analysis.collectives import EXCHANGE_TRACK, RankFacts, analyze_group, exchange_facts
from nprof.store import Store
from nprof.store.catalog import check_id

_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
_CACHE_SIZE = 16


def _busy(store: Store, profile_id: str, t_max: int, bins: int) -> list[float]:
    width = max(1.0, t_max / bins)
    with store.cursor(profile_id) as cur:
        rows = cur.execute(
            "SELECT LEAST(CAST(floor(ts / ?) AS BIGINT), ?) AS b, SUM(duration) FROM instructions "
            f"WHERE engine IN ({', '.join('?' for _ in _ENGINES)}) GROUP BY b",
            [width, bins - 1, *_ENGINES],
        ).fetchall()
    out = np.zeros(bins)
    for b, total in rows:
        if b is not None and 0 <= b < bins:
            out[int(b)] = float(total) / width
    return [round(float(v), 3) for v in np.minimum(out, len(_ENGINES))]


def _facts(store: Store, profile_id: str, entry: dict[str, Any]) -> RankFacts:
    with store.session(profile_id) as (cur, meta):
        table = cur.sql("SELECT * FROM collectives").to_arrow_table()
        manifest = meta.get("manifest") or {}
        names, ts, waits = [], [], []
        if table.num_rows:  # the host's measured exchanges of simulated collectives (system profiles)
            rows = cur.execute(
                "SELECT hlo_name, ts, wait_ns FROM instructions WHERE track = ? ORDER BY ts", [EXCHANGE_TRACK]
            ).fetchall()
            names, ts, waits = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    return RankFacts(
        table,
        int(entry.get("total_time_ns") or 0),
        int(manifest.get("nd_idx", 0) or 0),
        int(manifest.get("nc_idx", 0) or 0),
        profile_id,
        exchange_facts(names, ts, waits),
    )


def group_collectives(store: Store, group_id: str, bins: int = 400) -> dict[str, Any]:
    """The aggregated-view payload of a group (see module doc)."""
    g = store.group(group_id)
    entries = {r["rank"]: (r["profile_id"], store.entry(r["profile_id"])) for r in g["ranks"]}
    facts = {rank: _facts(store, pid, entry) for rank, (pid, entry) in entries.items()}
    analysis = analyze_group(facts).to_json()
    t_max = max([f.total_time_ns for f in facts.values()] + [op["end"] for op in analysis["ops"]] + [1])
    for r in analysis["ranks"]:
        r["busy"] = _busy(store, r["profile_id"], t_max, bins)
    return {
        "id": g["id"],
        "display_name": g.get("display_name") or g["id"],
        "t_max": t_max,
        "bins": bins,
        "bin_ns": t_max / bins,
        **analysis,
    }


def group_router(store: Store) -> APIRouter:
    r = APIRouter(prefix="/api")
    cache: dict[tuple, dict[str, Any]] = {}

    @r.get("/groups/{group_id}/collectives", summary="Multi-worker aggregated view: per-rank activity, op waits")
    def get_group_collectives(group_id: str, bins: int = Query(400, ge=16, le=4000)) -> dict[str, Any]:
        check_id(group_id, "group id")
        g = store.group(group_id)
        stamp = tuple((x["profile_id"], store.entry(x["profile_id"]).get("ingested")) for x in g["ranks"])
        key = (group_id, bins, stamp)
        hit = cache.get(key)
        if hit is None:
            hit = group_collectives(store, group_id, bins)
            if len(cache) >= _CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[key] = hit
        return hit

    return r
