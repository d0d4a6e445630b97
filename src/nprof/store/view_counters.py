"""Counter rows of the viewport: derived counters (TensorMatrix utilisation, pending DMA, DMA throughput)
and the profile's sampled counters, each as per-pixel min/max/mean (docs/api.md).

Contract: `derived_counters(cur, meta, keys, level, t0, t1, b, width, have)` answers the derived counter
rows `keys` from one query over their source rows: from the `lod` pyramid 2**SUB times finer than a
pixel when the zoom allows, else from the events (reusing those the caller read, `have`); the DMA
counters' max is the exact instantaneous peak. `sampled_counter(cur, key, t0, t1, b, width)` answers
one counter row recorded in the profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from nprof.store.lod import bucketize, peaks
from nprof.store.rows import COUNTER_DMA_THROUGHPUT, COUNTER_PENDING_DMA, COUNTER_TENSOR_UTIL
from nprof.store.view_read import fetch_events, px_group

SUB = 3  # counters: 2**SUB sub-buckets per pixel give the min/max


def _counter_values(key: str, busy: np.ndarray, nbytes: np.ndarray, bw: float) -> np.ndarray:
    if key == COUNTER_PENDING_DMA:
        return busy / bw
    if key == COUNTER_DMA_THROUGHPUT:
        return nbytes / bw  # bytes per ns = GB/s
    return np.minimum(busy / bw, 1.0) * 100.0  # share of time the TensorMatrix row is busy (as the analysis)


def _counter_peaks(key: str, d: dict[str, np.ndarray]) -> np.ndarray | None:
    """Exact per-sub-bucket maxima of a DMA counter (`nprof.store.lod.peaks`), None for the others."""
    return d.get({COUNTER_PENDING_DMA: "peak", COUNTER_DMA_THROUGHPUT: "peak_rate"}.get(key, ""))


def _counter_item(
    key: str,
    starts: np.ndarray,
    bw: int,
    values: np.ndarray,
    t0: int,
    b: float,
    width: int,
    peak: np.ndarray | None = None,
) -> dict:
    """Per pixel: min and mean of the sub-bucket means; max of the sub-bucket maxima `peak` (the instantaneous
    peak: a long window keeps its busiest instant) or, without them, of the means."""
    px = px_group(starts, np.full(starts.shape, bw), t0, b, width)
    if px.size == 0:
        return {"key": key, "mode": "counter", "ts": [], "dur": [], "min": [], "max": [], "mean": []}
    cuts = np.flatnonzero(np.diff(px)) + 1
    first = np.concatenate([[0], cuts])
    last = np.concatenate([cuts, [px.size]]) - 1
    return {
        "key": key,
        "mode": "counter",
        "ts": starts[first].tolist(),
        "dur": (starts[last] + bw - starts[first]).tolist(),
        "min": np.round(np.minimum.reduceat(values, first), 6).tolist(),
        "max": np.round(np.maximum.reduceat(values if peak is None else np.maximum(values, peak), first), 6).tolist(),
        "mean": np.round(np.add.reduceat(values, first) / np.diff(np.append(first, px.size)), 6).tolist(),
    }


@dataclass
class _Sources:
    """What the derived counter rows read: the group each key needs (dma or tensor), the groups used,
    their source rows, the DMA rows' indices, the pending-DMA row (the pyramid keeps all DMA queues
    summed under it) and the coarsest base level among the sources."""

    need: dict[str, str]
    used: list[str]
    src: list[dict[str, Any]]
    dma_idx: set[int]
    dma_total: list[dict[str, Any]]
    base: int


def _sources(meta: dict, keys: list[str]) -> _Sources:
    """The source rows of the derived counters `keys`: DMA queues, and TensorMatrix (its moving row if any)."""
    event_rows = [r for r in meta["rows"] if r["kind"] != "counter"]
    tensor = [r for r in event_rows if r["engine"] == "tensor"]
    groups = {
        "dma": [r for r in event_rows if r["kind"] == "dma"],
        "tensor": [r for r in tensor if r["key"] == "tensor.moving"] or tensor,
    }
    dma_total = [r for r in meta["rows"] if r["key"] == COUNTER_PENDING_DMA]
    need = {k: ("tensor" if k == COUNTER_TENSOR_UTIL else "dma") for k in keys}
    used = [g for g in ("dma", "tensor") if g in need.values() and groups[g]]
    src = [r for g in used for r in groups[g]]
    bases = [int(r["base_level"]) for r in (dma_total if "dma" in used and dma_total else [])]
    bases += [int(r["base_level"]) for g in used if g != "dma" or not dma_total for r in groups[g]]
    return _Sources(need, used, src, {int(r["row"]) for r in groups["dma"]}, dma_total, max(bases, default=0))


_Series = tuple[np.ndarray, int, dict[str, dict[str, np.ndarray]]]  # sub-bucket starts, width, per-group arrays


def _lod_series(cur: duckdb.DuckDBPyConnection, s: _Sources, level: int, t0: int, t1: int) -> _Series:
    """Busy ns and bytes per sub-bucket (and the DMA peaks) from the pyramid, SUB levels below `level`."""
    lc = max(s.base, level - SUB)
    bw = 1 << lc
    k0, k1 = t0 // bw, (t1 - 1) // bw
    src, dma_idx = s.src, s.dma_idx
    if s.dma_total and "dma" in s.used:
        src = [r for r in src if int(r["row"]) not in dma_idx] + s.dma_total
        dma_idx = {int(s.dma_total[0]["row"])}
    q = (
        "SELECT row, bucket, busy, nbytes, peak, peak_rate FROM lod "
        "WHERE level = ? AND row IN ({}) AND bucket BETWEEN ? AND ?"
    )
    res = cur.execute(q.format(",".join(str(int(r["row"])) for r in src)), [lc, k0, k1]).fetchnumpy()
    n = int(k1 - k0 + 1)
    starts = (np.arange(n, dtype=np.int64) + k0) * bw
    is_dma = np.isin(res["row"], list(dma_idx))
    pos = res["bucket"].astype(np.int64) - k0
    series: dict[str, dict[str, np.ndarray]] = {}
    for g in s.used:
        m = is_dma == (g == "dma")
        series[g] = {
            "busy": np.bincount(pos[m], weights=res["busy"][m].astype(np.float64), minlength=n)[:n],
            "nbytes": np.bincount(pos[m], weights=res["nbytes"][m], minlength=n)[:n],
        }
        if g == "dma" and s.dma_total:  # one row: the buckets are distinct
            for k in ("peak", "peak_rate"):
                series[g][k] = np.zeros(n)
                series[g][k][pos[m]] = np.ma.filled(res[k][m], 0)
    return starts, bw, series


def _event_series(
    cur: duckdb.DuckDBPyConnection,
    s: _Sources,
    t0: int,
    t1: int,
    b: float,
    have: tuple[dict[str, np.ndarray], set[int]] | None,
) -> _Series:
    """Busy ns and bytes per sub-bucket (and the DMA peaks) from the events of the window, finer than the
    pyramid; reuses the events the caller read (`have`: columns and the rows they cover) when they suffice."""
    wanted = {int(r["row"]) for r in s.src}
    if have is not None and wanted <= have[1]:
        ev = {k: v[np.isin(have[0]["row"], list(wanted))] for k, v in have[0].items()}
    else:
        ev = fetch_events(cur, s.src, t0, t1)
    bw = max(1, math.ceil(b / (1 << SUB)))
    nb = max(1, math.ceil((t1 - t0) / bw))
    starts = t0 + np.arange(nb, dtype=np.int64) * bw
    is_dma = np.isin(ev["row"], list(s.dma_idx))
    series: dict[str, dict[str, np.ndarray]] = {}
    for g in s.used:
        m = is_dma == (g == "dma")
        bk = bucketize(
            ev["ts"][m], ev["dur"][m], ev["op"][m], ev["nbytes"][m], ev["flops"][m], t0, bw, nb, dominant=False
        )
        series[g] = {"busy": bk.busy.astype(float), "nbytes": bk.nbytes}
        if g == "dma":
            series[g]["peak"], series[g]["peak_rate"] = peaks(ev["ts"][m], ev["dur"][m], ev["nbytes"][m], t0, bw, nb)
    return starts, bw, series


def derived_counters(
    cur: duckdb.DuckDBPyConnection,
    meta: dict,
    keys: list[str],
    level: int,
    t0: int,
    t1: int,
    b: float,
    width: int,
    have: tuple[dict[str, np.ndarray], set[int]] | None = None,
) -> dict[str, dict[str, Any]]:
    """The derived counter rows `keys`, from one query over their source rows (DMA queues, TensorMatrix)."""
    s = _sources(meta, keys)
    starts: np.ndarray
    series: dict[str, dict[str, np.ndarray]]
    if not s.src:
        starts, bw, series = np.zeros(0, np.int64), 1, {}
    elif level >= s.base:
        starts, bw, series = _lod_series(cur, s, level, t0, t1)
    else:
        starts, bw, series = _event_series(cur, s, t0, t1, b, have)
    out = {}
    for key, g in s.need.items():
        if g not in series:
            out[key] = _counter_item(key, np.zeros(0, np.int64), 1, np.zeros(0), t0, b, width)
            continue
        d = series[g]
        vals = _counter_values(key, d["busy"], d["nbytes"], float(bw))
        out[key] = _counter_item(key, starts, bw, vals, t0, b, width, _counter_peaks(key, d))
    return out


def sampled_counter(cur: duckdb.DuckDBPyConnection, key: str, t0: int, t1: int, b: float, width: int) -> dict:
    """Per pixel: time span, min, max and mean of the samples of the profile's counter `key` in [t0, t1)."""
    res = cur.execute(
        "SELECT LEAST(?, GREATEST(0, CAST(floor((ts - ?) / ?) AS BIGINT))) AS px, min(ts) AS t, max(ts) AS te, "
        "min(value) AS lo, max(value) AS hi, avg(value) AS mean FROM counters "
        "WHERE name = ? AND ts >= ? AND ts < ? GROUP BY px ORDER BY px",
        [width - 1, t0, b, key.removeprefix("counter:"), t0, t1],
    ).fetchnumpy()
    return {
        "key": key,
        "mode": "counter",
        "ts": res["t"].tolist(),
        "dur": np.maximum(res["te"] - res["t"], 1).tolist(),
        "min": res["lo"].tolist(),
        "max": res["hi"].tolist(),
        "mean": res["mean"].tolist(),
    }
