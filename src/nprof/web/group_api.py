"""JSON API of the multi-worker aggregated view: `GET /api/groups/{group_id}/collectives` and friends.

Contract: `group_router(store)` returns an APIRouter (mounted before the main API's catch-all) with

* `GET /api/groups/{group_id}/collectives?bins=N[&rows=R]` (N in 16..4000 dividing 4800 when the group has
  an index, default 400) ->
  `{"id", "display_name", "t_max" (ns, the longest rank or operation), "bins", "bin_ns",
    "ranks": [{"rank", "profile_id", "nd_idx", "nc_idx", "total_time_ns", "cc_op_count", "cc_op_time_ns",
               "cc_wait_ns", "host_wait_ns", "caused_wait_ns", "caused_host_wait_ns", "busy": [N floats]}],
    "ops": [{"id", "kind", "bytes", "algorithm", "clock" ("device": simulated | "host": measured), "start", "end",
             "transfer_ns", "straggler", "max_wait_ns", "total_wait_ns", "launch_skew_ns", "host_straggler",
             "host_max_wait_ns", "host_total_wait_ns",
             "ranks": [{"rank", "arrival", "wait_ns", "duration", "host_arrival", "host_wait_ns"}]}],
    "straggler", "host_straggler" (rank or null), "slowest_rank", "total_wait_ns", "host_total_wait_ns",
    "lod": null}`
  (`nprof.analysis.collectives.analyze_group` over every rank's `collectives` rows and its host exchange
  rows: each op's waits are on its own clock, the host_* fields measured on the host — see that module).
  `busy[i]` is the mean number of compute engines busy in bin i of [0, N * bin_ns) — event time credited to
  the bin where the event starts, capped at 5 (`nprof.store.group_index`). With `rows=R` and more ranks
  than R, level of detail over ranks: the ranks lose `busy`, the ops lose `ranks`, and `"lod"` is
  `{"band_size", "bands": [{"first", "last", "n", "busy", "busy_max" (per-bin median, maximum of its ranks),
  "total_time_ns", "cc_wait_ns", "caused_wait_ns" (each [min, median, max]), "ops": [{"id", "n",
  "wait": [min, median, max], "arrival": [min, median, max], "last": the band's last rank to arrive,
  "most_waited": the rank that waited longest}]}]}` (bands of ceil(ranks / R) consecutive ranks:
  `nprof.analysis.rank_bands`).
* `GET /api/groups/{group_id}/waits?op=ID&buckets=B&top=K` -> the wait distribution of one operation (or of
  every operation without `op`; each op's waits on its own clock): `{"op", "n", "min", "median", "max",
  "edges", "counts"}` (B equal buckets, `rank_bands.wait_histogram`) and `"latest"`: the K last ranks to
  arrive (`rank`, `op`, `arrival`, `wait_ns`; latest first, ties by rank).
* `POST /api/groups/{group_id}/ranks/{rank}` -> the rank's catalog entry, ingesting it first when the group
  was indexed but the rank not yet ingested (`nprof.store.group_ingest.ensure_rank`).
Groups ingested before the index existed are answered from their rank databases; a stale index (another
version) of a group whose ranks are not all ingested is rebuilt from the group's files. Results are cached per
(group, arguments, the group's ingest stamp). Unknown groups: 404 via NotFound.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import APIRouter, Query

from nprof.analysis.collectives import EXCHANGE_TRACK, RankFacts, analyze_group, exchange_facts
from nprof.analysis.group_table import analyze_table
from nprof.analysis.rank_bands import band_argmax, band_bounds, band_rows, band_stats, wait_histogram
from nprof.analysis.thresholds import Thresholds
from nprof.errors import NprofError
from nprof.store import Store
from nprof.store.catalog import check_id
from nprof.store.group_index import COMPUTE_ENGINES, GroupIndex, busy_bins, read_index
from nprof.store.group_ingest import build_index, ensure_rank, index_dir
from nprof.web.api import JSON

_CACHE_SIZE = 16


def _busy(store: Store, profile_id: str, t_max: int, bins: int) -> list[float]:
    """One rank's busy bins read from its profile database (groups without an index)."""
    width = max(1.0, t_max / bins)
    with store.cursor(profile_id) as cur:
        rows = cur.execute(
            "SELECT LEAST((ts * ?) // ?, ?) AS b, SUM(duration) FROM instructions "
            f"WHERE ts >= 0 AND engine IN ({', '.join('?' for _ in COMPUTE_ENGINES)}) GROUP BY b",
            [bins, max(t_max, 1), bins - 1, *COMPUTE_ENGINES],
        ).fetchall()
    out = np.zeros(bins)
    for b, total in rows:
        if b is not None and 0 <= b < bins:
            out[int(b)] = float(total) / width
    return [round(float(v), 3) for v in np.minimum(out, len(COMPUTE_ENGINES))]


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


def _analysis(store: Store, group_id: str) -> tuple[dict[str, Any], GroupIndex | None]:
    """The group's analysis (JSON form) and its index (None: answered from the rank databases)."""
    index = read_index(index_dir(store, group_id))
    g = store.group(group_id)
    stored = store.catalog.profiles()
    if index is None and any(r["profile_id"] not in stored for r in g["ranks"]) and g.get("sources"):
        # an index of an older version (or removed) while ranks wait to be ingested: rebuild it from the files
        build_index(store, [(int(r), Path(p)) for r, p in g["sources"].items()], group_id)
        index = read_index(index_dir(store, group_id))
    if index is not None:
        fast = analyze_table(index.collectives, index.ranks.to_pylist()) if not index.exchanges.num_rows else None
        return fast if fast is not None else analyze_group(index.facts()).to_json(), index
    facts = {r["rank"]: _facts(store, r["profile_id"], store.entry(r["profile_id"])) for r in g["ranks"]}
    return analyze_group(facts).to_json(), index


def _busy_rows(store: Store, analysis: dict[str, Any], index: GroupIndex | None, t_max: int, bins: int) -> tuple:
    """(busy [ranks, bins] in the order of analysis["ranks"], bin width in ns)."""
    if index is not None:
        if not 16 <= bins <= 4000:
            raise NprofError(f"bins={bins} must be in 16..4000")
        return busy_bins(index, bins), index.span / bins
    rows = [_busy(store, r["profile_id"], t_max, bins) for r in analysis["ranks"]]
    return np.asarray(rows, np.float64).reshape(len(rows), bins), t_max / bins


def group_collectives(
    store: Store,
    group_id: str,
    bins: int = 400,
    rows: int | None = None,
    analysed: tuple[dict[str, Any], GroupIndex | None] | None = None,
) -> dict[str, Any]:
    """The aggregated-view payload of a group (see module doc); `analysed`: its `_analysis`, when known."""
    g = store.group(group_id)
    analysis, index = analysed if analysed is not None else _analysis(store, group_id)
    t_max = max([r["total_time_ns"] for r in analysis["ranks"]] + [op["end"] for op in analysis["ops"]] + [1])
    busy, bin_ns = _busy_rows(store, analysis, index, t_max, bins)
    out = {"id": g["id"], "display_name": g.get("display_name") or g["id"], "t_max": t_max, "bins": bins,
           "bin_ns": bin_ns, **analysis, "lod": None}  # fmt: skip
    if rows is not None and len(analysis["ranks"]) > rows:
        out["lod"] = rank_lod(analysis, busy, rows)
        out["ops"] = [{k: v for k, v in op.items() if k != "ranks"} for op in analysis["ops"]]
    else:
        rounded = np.round(busy, 3).tolist()
        out["ranks"] = [{**r, "busy": b} for r, b in zip(analysis["ranks"], rounded, strict=True)]
    return out


def _triple(v: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(x) else round(float(x), 3) for x in v]


def rank_lod(analysis: dict[str, Any], busy: np.ndarray, rows: int) -> dict[str, Any]:
    """The bands of the aggregated view when ranks outnumber `rows` (see module doc)."""
    ranks = [r["rank"] for r in analysis["ranks"]]
    pos = {r: i for i, r in enumerate(ranks)}
    bounds = band_bounds(len(ranks), rows)
    per_rank = {k: np.asarray([r[k] for r in analysis["ranks"]], np.float64)
                for k in ("total_time_ns", "cc_wait_ns", "caused_wait_ns")}  # fmt: skip
    stats = {k: band_stats(v, bounds) for k, v in per_rank.items()}
    spread = band_rows(busy, bounds)
    op_parts = []
    for op in analysis["ops"]:
        wait = np.full(len(ranks), np.nan)
        arrival = np.full(len(ranks), np.nan)
        for w in op["ranks"]:
            wait[pos[w["rank"]]] = w["wait_ns"]
            arrival[pos[w["rank"]]] = w["arrival"]
        op_parts.append((op["id"], band_stats(wait, bounds), band_stats(arrival, bounds),
                         band_argmax(arrival, bounds), band_argmax(wait, bounds), np.isfinite(wait)))  # fmt: skip
    bands = []
    for i, (a, b) in enumerate(bounds):
        ops = [{"id": op_id, "n": int(seen[a:b].sum()), "wait": _triple(ws[i]), "arrival": _triple(ar[i]),
                "last": ranks[int(late[i])] if late[i] >= 0 else None,
                "most_waited": ranks[int(most[i])] if most[i] >= 0 else None}
               for op_id, ws, ar, late, most, seen in op_parts if seen[a:b].any()]  # fmt: skip
        bands.append({"first": ranks[a], "last": ranks[b - 1], "n": b - a,
                      "busy": np.round(spread[i, 1], 3).tolist(), "busy_max": np.round(spread[i, 2], 3).tolist(),
                      **{k: _triple(s[i]) for k, s in stats.items()}, "ops": ops})  # fmt: skip
    return {"band_size": bounds[0][1] - bounds[0][0] if bounds else 0, "bands": bands}


def group_waits(analysis: dict[str, Any], op_id: int | None, buckets: int, top: int) -> dict[str, Any]:
    """The wait distribution and the last ranks to arrive of one operation, or of all (see module doc)."""
    ops = [op for op in analysis["ops"] if op_id is None or op["id"] == op_id]
    if op_id is not None and not ops:
        raise NprofError(f"op={op_id}: no such collective operation; ids are 0..{len(analysis['ops']) - 1}")
    rows = [(w["arrival"], w["rank"], op["id"], w["wait_ns"]) for op in ops for w in op["ranks"]]
    waits = np.asarray([r[3] for r in rows], np.int64)
    edges, counts = wait_histogram(waits, buckets)
    latest = sorted(rows, key=lambda r: (-r[0], r[1], r[2]))[:top]
    return {"op": op_id, "n": int(waits.size), "min": int(waits.min()) if waits.size else None,
            "median": float(np.median(waits)) if waits.size else None,
            "max": int(waits.max()) if waits.size else None, "edges": edges, "counts": counts,
            "latest": [{"rank": r, "op": o, "arrival": a, "wait_ns": w} for a, r, o, w in latest]}  # fmt: skip


def group_router(store: Store) -> APIRouter:
    r = APIRouter(prefix="/api")
    cache: dict[tuple, Any] = {}
    ingesting = threading.Lock()

    def cached(key: tuple, make: Any) -> Any:
        g = store.group(key[0])
        index = index_dir(store, key[0]) / "index.json"
        if index.exists():
            stamp: tuple = (index.stat().st_mtime_ns, str(g.get("fingerprint")))
        else:
            stamp = tuple((x["profile_id"], store.entry(x["profile_id"]).get("ingested")) for x in g["ranks"])
        full = (*key, stamp)
        if full not in cache:
            if len(cache) >= _CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[full] = make()
        return cache[full]

    @r.get("/groups/{group_id}/collectives", summary="Multi-worker aggregated view: per-rank activity, op waits",
           response_class=JSON)  # fmt: skip
    def get_group_collectives(
        group_id: str, bins: int = Query(400, ge=16, le=4000), rows: int | None = Query(None, ge=1, le=100000)
    ) -> JSON:
        check_id(group_id, "group id")
        analysed = cached((group_id, "analysis"), lambda: _analysis(store, group_id))
        return JSON(cached(
            (group_id, "collectives", bins, rows), lambda: group_collectives(store, group_id, bins, rows, analysed)
        ))  # fmt: skip

    @r.get("/groups/{group_id}/waits", summary="Wait distribution and last ranks to arrive, per collective",
           response_class=JSON)  # fmt: skip
    def get_group_waits(
        group_id: str,
        op: int | None = Query(None, ge=0),
        buckets: int = Query(20, ge=1, le=1000),
        top: int = Query(10, ge=0, le=10000),
    ) -> JSON:
        check_id(group_id, "group id")
        analysis, _index = cached((group_id, "analysis"), lambda: _analysis(store, group_id))
        return JSON(group_waits(analysis, op, buckets, top))

    @r.post("/groups/{group_id}/ranks/{rank}", summary="The profile of one rank, ingested on first use")
    def post_group_rank(group_id: str, rank: int) -> dict[str, Any]:
        check_id(group_id, "group id")
        g = store.group(group_id)
        with ingesting:
            return ensure_rank(store, g, rank, Thresholds(**(g.get("thresholds") or {})))

    return r
