"""Timeline queries: the row list and level-of-detail viewport answers (docs/api.md).

Contract: `viewport(cur, meta, t0, t1, width, keys, max_items)` returns, per row,
either the individual events overlapping [t0, t1) (at most `max_items`) or at most
`width` buckets (one per pixel column) with count, busy ns, busy fraction and the
dominant opcode; counter rows return per-pixel min/max/mean. Cost is bounded by
the pixel width, not the profile size: bucket answers read the precomputed `lod`
pyramid at the finest level not finer than a pixel (2**level <= ns per pixel);
windows finer than a row's base level hold few of its events (about 16 per pixel
at most) and are read from `events` and aggregated here. Derived counters (`view_counters`) use the
pyramid 2**SUB times finer than a pixel, so each pixel gets a real min/mean; the DMA counters' max is
the exact instantaneous peak (the pyramid keeps per-bucket maxima, never averages).
"""

from __future__ import annotations

import math
from typing import Any

import duckdb
import numpy as np

from nprof.errors import NprofError
from nprof.store.lod import bucketize
from nprof.store.rows import COUNTER_DMA_THROUGHPUT, COUNTER_PENDING_DMA, COUNTER_TENSOR_UTIL
from nprof.store.view_counters import derived_counters, sampled_counter
from nprof.store.view_read import fetch_events, px_group

MAX_WIDTH = 8192
MAX_ITEMS = 5000


def rows_answer(meta: dict[str, Any]) -> dict[str, Any]:
    out = []
    for r in meta["rows"]:
        item = {"key": r["key"], "label": r["label"], "kind": r["kind"]}
        if r["engine"]:
            item["engine"] = r["engine"]
        if r["kind"] == "counter":
            item["unit"] = r["unit"] or ""
        else:
            item["event_count"] = r["event_count"]
        out.append(item)
    return {"t_min": 0, "t_max": meta["stats"]["t_max"], "rows": out, "opcodes": list(meta["opcodes"])}


def select_rows(meta: dict[str, Any], keys: list[str] | None) -> list[dict[str, Any]]:
    if not keys:
        return list(meta["rows"])
    by_key = {r["key"]: r for r in meta["rows"]}
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        raise NprofError(f"unknown row(s) {', '.join(unknown[:5])}; GET /api/profiles/<id>/rows lists them")
    return [by_key[k] for k in dict.fromkeys(keys)]


class _Ops:
    """Collects global opcode codes used in one answer and renumbers them densely."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.used: dict[int, int] = {}

    def map(self, ops: np.ndarray) -> list[int]:
        uniq, inv = np.unique(ops, return_inverse=True)
        local = np.array([self._code(int(u)) for u in uniq], dtype=np.int64)
        return local[inv].tolist() if ops.size else []

    def _code(self, op: int) -> int:
        if op < 0:
            return -1
        if op not in self.used:
            self.used[op] = len(self.used)
        return self.used[op]

    def table(self) -> list[str]:
        return [self.names[op] for op in self.used]


def _events_item(
    key: str, ev: dict[str, np.ndarray], sl: slice, ops: _Ops, layers: _Ops | None = None
) -> dict[str, Any]:
    item = {
        "key": key,
        "mode": "events",
        "id": ev["id"][sl].tolist(),
        "ts": ev["ts"][sl].tolist(),
        "dur": ev["dur"][sl].tolist(),
        "op": ops.map(ev["op"][sl]),
    }
    if layers is not None and "layer" in ev:
        item["layer"] = layers.map(ev["layer"][sl])
    return item


def _buckets_item(
    key: str, ts: np.ndarray, dur: np.ndarray, count: np.ndarray, busy: np.ndarray, op: np.ndarray, ops: _Ops
) -> dict[str, Any]:
    keep = (np.asarray(count) > 0) | (np.asarray(busy) > 0)
    ts, dur, count, busy, op = ts[keep], dur[keep], count[keep], busy[keep], op[keep]
    frac = np.minimum(1.0, busy / np.maximum(dur, 1))
    return {
        "key": key,
        "mode": "buckets",
        "ts": ts.tolist(),
        "dur": dur.tolist(),
        "count": count.tolist(),
        "busy": busy.tolist(),
        "busy_frac": np.round(frac, 4).tolist(),
        "op": ops.map(op),
    }


def _pyramid_buckets(
    cur: duckdb.DuckDBPyConnection, rows: list[dict], level: int, t0: int, t1: int, b: float, width: int
) -> dict[int, dict[str, np.ndarray]]:
    """Level-`level` buckets of `rows` over the window, merged per pixel column (by bucket centre).

    The scan is a plain range read (zone maps prune it to the level's few row groups); the merge is
    done in numpy, which is faster than a SQL GROUP BY for these few thousand buckets per row.
    """
    B = 1 << level
    k0, k1 = t0 // B, (t1 - 1) // B
    q = "SELECT row, bucket, count, busy, op FROM lod WHERE level = ? AND row IN ({}) AND bucket BETWEEN ? AND ?"
    res = cur.execute(q.format(",".join(str(int(r["row"])) for r in rows)), [level, k0, k1]).fetchnumpy()
    out: dict[int, dict[str, np.ndarray]] = {}
    if len(res["row"]) == 0:
        return out
    row = res["row"].astype(np.int64)
    bucket = res["bucket"].astype(np.int64)
    busy = res["busy"].astype(np.int64)
    px = np.clip(np.floor((bucket * B + B / 2.0 - t0) / b), 0, width - 1).astype(np.int64)
    count = res["count"].astype(np.int64)
    op = res["op"].astype(np.int64)
    key = row * (width + 1) + px
    if np.any(key[1:] < key[:-1]):  # the scan usually returns storage order, already sorted
        order = np.argsort(key, kind="stable")
        row, bucket, busy, px, count, op, key = (a[order] for a in (row, bucket, busy, px, count, op, key))
    first = np.concatenate([[0], np.flatnonzero(np.diff(key)) + 1])
    sizes = np.diff(np.append(first, key.size))
    g_row = row[first]
    k_lo = np.minimum.reduceat(bucket, first)
    k_hi = np.maximum.reduceat(bucket, first)
    top = np.repeat(np.maximum.reduceat(busy, first), sizes)
    pick = np.maximum.reduceat(np.where(busy == top, np.arange(key.size), -1), first)  # the busiest bucket
    merged = {
        "ts": k_lo * B,
        "dur": (k_hi + 1 - k_lo) * B,
        "count": np.add.reduceat(count, first),
        "busy": np.add.reduceat(busy, first),
        "op": op[pick],
    }
    cuts = np.flatnonzero(np.diff(g_row)) + 1
    for part in np.split(np.arange(g_row.size), cuts):
        out[int(g_row[part[0]])] = {k: v[part] for k, v in merged.items()}
    return out


def _bucket_layers(
    cur: duckdb.DuckDBPyConnection,
    items: dict[str, dict[str, Any]],
    rows: list[dict],
    t0: int,
    t1: int,
    b: float,
    width: int,
    layers: _Ops,
) -> None:
    """Give each bucket item of `rows` a `layer` list: the layer with the most event time in its pixel column.

    One grouped scan of the window's events (only for colour-by-layer: without it buckets would be grey).
    """
    want = [r for r in rows if r["key"] in items and items[r["key"]]["mode"] == "buckets"]
    if not want:
        return
    q = (
        "SELECT row, LEAST(GREATEST(CAST(floor((ts + dur / 2 - ?) / ?) AS BIGINT), 0), ?) AS px, "
        "arg_max(layer, dur) FROM events WHERE row IN ({}) AND ts < ? AND ts + dur >= ? AND layer >= 0 GROUP BY row, px"
    ).format(",".join(str(int(r["row"])) for r in want))
    best: dict[tuple[int, int], int] = {
        (int(r), int(p)): int(v) for r, p, v in cur.execute(q, [t0, b, width - 1, t1, t0]).fetchall()
    }
    for r in want:
        it = items[r["key"]]
        ri = int(r["row"])
        ts = np.asarray(it["ts"], dtype=np.float64)
        dur = np.asarray(it["dur"], dtype=np.float64)
        px = px_group(ts, dur, t0, b, width).tolist()
        it["layer"] = layers.map(np.array([best.get((ri, p), -1) for p in px], dtype=np.int64))


MAX_LABELLED = 5000


def _dma_tensors(
    cur: duckdb.DuckDBPyConnection,
    items: dict[str, dict[str, Any]],
    rows: list[dict],
    ev: dict[str, np.ndarray] | None = None,
    names: list[str] | None = None,
) -> list[str]:
    """Give DMA rows drawn as events a `tensor` list (index into the returned names, in order of first
    appearance; -1 = none): bars are labelled by the tensor they move. Skipped (no lists) above MAX_LABELLED
    transfers in the answer. From the fetched events' `tensor` codes (`ev`, into the store's `names`) when
    the store has that column, else looked up in the `dma` table by id (stores ingested before it)."""
    dma = [r for r in rows if r["kind"] == "dma" and items.get(r["key"], {}).get("mode") == "events"]
    n = sum(len(items[r["key"]]["id"]) for r in dma)
    if not n or n > MAX_LABELLED:
        return []
    if ev is not None and names is not None and "tensor" in ev:
        return _tensors_from_codes(items, dma, ev, names)
    ids = [i for r in dma for i in items[r["key"]]["id"]]
    got = dict(cur.execute(f"SELECT id, tensor FROM dma WHERE id IN ({','.join(map(str, ids))})").fetchall())
    local: dict[str, int] = {}
    for r in dma:
        it = items[r["key"]]
        it["tensor"] = [-1 if (t := got.get(i)) is None else local.setdefault(t, len(local)) for i in it["id"]]
    return list(local)


def _tensors_from_codes(
    items: dict[str, dict[str, Any]], dma: list[dict], ev: dict[str, np.ndarray], names: list[str]
) -> list[str]:
    """`_dma_tensors` from the fetched events: each row's codes (its slice of `ev`, as its item was built)
    renumbered in order of first appearance across the rows."""
    per_row = []
    for r in dma:
        if not items[r["key"]]["id"]:
            per_row.append(np.zeros(0, np.int64))
            continue
        ri = int(r["row"])
        lo, hi = (int(x) for x in np.searchsorted(ev["row"], [ri, ri + 1]))
        per_row.append(ev["tensor"][lo:hi].astype(np.int64))
    codes = np.concatenate(per_row)
    have = codes >= 0
    uniq, first = np.unique(codes[have], return_index=True)
    by_first = np.argsort(first, kind="stable")
    renumber = np.empty(uniq.size, np.int64)
    renumber[by_first] = np.arange(uniq.size)
    local = np.full(codes.size, -1, np.int64)
    local[have] = renumber[np.searchsorted(uniq, codes[have])]
    at = 0
    for r, c in zip(dma, per_row, strict=True):
        items[r["key"]]["tensor"] = local[at : at + c.size].tolist()
        at += c.size
    return [names[int(u)] for u in uniq[by_first]]


def _estimate(agg: dict[int, dict[str, np.ndarray]], row: dict[str, Any]) -> int:
    """Events starting in the pyramid buckets covering the window (a close upper estimate of the overlap)."""
    a = agg.get(int(row["row"]))
    return 0 if a is None else int(a["count"].sum())


def viewport(
    cur: duckdb.DuckDBPyConnection,
    meta: dict[str, Any],
    t0: int,
    t1: int,
    width: int,
    keys: list[str] | None = None,
    max_items: int = 2000,
    color: str | None = None,
) -> dict[str, Any]:
    """Drawable items per row for [t0, t1) at `width` pixels (see module doc and docs/api.md).

    `color="layer"` also gives bucket rows their dominant layer per pixel (one extra scan).
    """
    if not 1 <= width <= MAX_WIDTH:
        raise NprofError(f"width must be between 1 and {MAX_WIDTH} pixels")
    if not 1 <= max_items <= MAX_ITEMS:
        raise NprofError(f"max_items must be between 1 and {MAX_ITEMS}")
    if t0 < 0 or t1 <= t0:
        raise NprofError("need 0 <= t0 < t1 (nanoseconds since execution start)")
    rows = select_rows(meta, keys)
    b = (t1 - t0) / width
    level = math.floor(math.log2(b)) if b >= 1 else -1
    ops = _Ops(meta["opcodes"])
    with_layer = bool(meta["stats"].get("events_layer"))
    layers = _Ops(meta.get("sources", [])) if with_layer else None
    items: dict[str, dict[str, Any]] = {}
    event_rows = [r for r in rows if r["kind"] != "counter" and r["event_count"] > 0]
    # rows whose pyramid reaches this zoom level answer from it; finer windows read their few events
    pyramid = [r for r in event_rows if level >= r["base_level"]]
    agg = _pyramid_buckets(cur, pyramid, level, t0, t1, b, width) if pyramid else {}
    fetch = [r for r in event_rows if r not in pyramid or _estimate(agg, r) <= max_items]
    ev = fetch_events(cur, fetch, t0, t1, with_layer, "tensors" in meta) if fetch else None
    fetched = {int(r["row"]) for r in fetch}
    bw = max(1, math.ceil(b))
    nb = max(1, math.ceil((t1 - t0) / bw))
    for r in event_rows:
        ri = int(r["row"])
        if ev is not None and ri in fetched:
            lo, hi = (int(x) for x in np.searchsorted(ev["row"], [ri, ri + 1]))
            if hi - lo <= max_items:
                items[r["key"]] = _events_item(r["key"], ev, slice(lo, hi), ops, layers)
                continue
            if level < r["base_level"]:  # too many for events, finer than the pyramid: aggregate them here
                sl = slice(lo, hi)
                bk = bucketize(ev["ts"][sl], ev["dur"][sl], ev["op"][sl], ev["nbytes"][sl], ev["flops"][sl], t0, bw, nb)
                starts = t0 + np.arange(nb, dtype=np.int64) * bw
                items[r["key"]] = _buckets_item(
                    r["key"], starts, np.full(nb, bw, np.int64), bk.count, bk.busy, bk.op.astype(np.int64), ops
                )
                continue
        a = agg.get(ri)
        if a is not None:
            items[r["key"]] = _buckets_item(r["key"], a["ts"], a["dur"], a["count"], a["busy"], a["op"], ops)
    if color == "layer" and layers is not None:
        _bucket_layers(cur, items, event_rows, t0, t1, b, width, layers)
    derived = [r["key"] for r in rows if r["key"] in (COUNTER_TENSOR_UTIL, COUNTER_PENDING_DMA, COUNTER_DMA_THROUGHPUT)]
    if derived:
        have = (ev, fetched) if ev is not None else None
        items.update(derived_counters(cur, meta, derived, level, t0, t1, b, width, have))
    for r in rows:
        if r["kind"] == "counter":
            if r["key"] not in items:
                items[r["key"]] = sampled_counter(cur, r["key"], t0, t1, b, width)
        elif r["key"] not in items:
            items[r["key"]] = {"key": r["key"], "mode": "events", "id": [], "ts": [], "dur": [], "op": []}
    tensors = _dma_tensors(cur, items, rows, ev, meta.get("tensors"))
    out = {
        "t0": t0,
        "t1": t1,
        "width": width,
        "bucket_ns": b,
        "opcodes": ops.table(),
        "rows": [items[r["key"]] for r in rows],
    }
    if layers is not None:
        out["layers"] = layers.table()
    if tensors:
        out["tensors"] = tensors
    return out
