"""Level of detail over ranks: bands of consecutive ranks summarised by min / median / max, and wait histograms.

When a group has more ranks than the screen has rows, the aggregated view draws bands of `k` consecutive
ranks (in rank order) instead of ranks, each showing the minimum, median and maximum of its ranks. Pure,
deterministic numpy; the tests hold every function to a plain loop.

Contract:
* `band_bounds(n, rows) -> list[(start, stop)]`: index ranges [start, stop) covering 0..n-1 with
  k = ceil(n / rows) ranks per band (the last may be shorter); one band per rank when n <= rows.
* `band_stats(values, bounds) -> float64 [bands, 3]`: per band, (min, median, max) of the finite values of
  `values[start:stop]` (NaN marks "not taking part"; a band with none is all NaN). Median: numpy's (the mean
  of the two middle values for an even count).
* `band_argmax(values, bounds) -> int64 [bands]`: per band, the index of its largest finite value (ties: the
  first), -1 when it has none.
* `band_rows(matrix, bounds) -> float64 [bands, 3, cols]`: `band_stats` per column of a [ranks, cols] matrix.
* `wait_histogram(waits, buckets) -> (edges, counts)`: `buckets` equal-width buckets over [0, max(waits)]
  (integer ns edges, edges[-1] = max); wait w goes to bucket min(w * buckets // max, buckets - 1); all in
  bucket 0 when the largest wait is 0. Negative waits raise ValueError.
"""

from __future__ import annotations

import numpy as np


def band_bounds(n: int, rows: int) -> list[tuple[int, int]]:
    """[start, stop) of each band of ceil(n / rows) consecutive ranks (see module doc)."""
    if n <= 0:
        return []
    k = max(1, -(-n // max(1, rows)))
    return [(a, min(a + k, n)) for a in range(0, n, k)]


def _segments(values: np.ndarray, bounds: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite values sorted within each band, the band id of each, and each band's first position."""
    band = np.empty(values.shape[0], np.int64)
    for i, (a, b) in enumerate(bounds):
        band[a:b] = i
    ok = np.isfinite(values)
    v, g = values[ok], band[ok]
    order = np.lexsort((v, g))
    v, g = v[order], g[order]
    first = np.searchsorted(g, np.arange(len(bounds)), side="left")
    return v, g, first


def band_stats(values: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """(min, median, max) per band of the finite values (see module doc)."""
    values = np.asarray(values, np.float64)
    out = np.full((len(bounds), 3), np.nan)
    if not bounds:
        return out
    v, _g, first = _segments(values, bounds)
    count = np.diff(np.append(first, v.size))
    has = count > 0
    lo = first[has]
    hi = lo + count[has] - 1
    out[has, 0] = v[lo]
    out[has, 2] = v[hi]
    out[has, 1] = (v[lo + (count[has] - 1) // 2] + v[lo + count[has] // 2]) / 2
    return out


def band_argmax(values: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """Index of each band's largest finite value, first on ties; -1 for a band without one."""
    values = np.asarray(values, np.float64)
    out = np.full(len(bounds), -1, np.int64)
    for i, (a, b) in enumerate(bounds):
        seg = values[a:b]
        ok = np.isfinite(seg)
        if ok.any():
            out[i] = a + int(np.argmax(np.where(ok, seg, -np.inf)))
    return out


def band_rows(matrix: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """float64 [bands, 3, cols]: (min, median, max) per band of every column of `matrix` [ranks, cols]."""
    matrix = np.asarray(matrix, np.float64)
    out = np.full((len(bounds), 3, matrix.shape[1]), np.nan)
    if bounds and np.isfinite(matrix).all():  # no gaps: plain reductions (the common case: activity bins)
        for i, (a, b) in enumerate(bounds):
            seg = matrix[a:b]
            out[i, 0], out[i, 1], out[i, 2] = seg.min(axis=0), np.median(seg, axis=0), seg.max(axis=0)
        return out
    for i, (a, b) in enumerate(bounds):
        seg = matrix[a:b]
        ok = np.isfinite(seg).any(axis=0)
        if ok.any():
            part = seg[:, ok]
            out[i, 0, ok] = np.nanmin(part, axis=0)
            out[i, 1, ok] = np.nanmedian(part, axis=0)
            out[i, 2, ok] = np.nanmax(part, axis=0)
    return out


def wait_histogram(waits: np.ndarray, buckets: int) -> tuple[list[int], list[int]]:
    """Equal-width histogram of waits over [0, max] (see module doc): (buckets + 1 edges, buckets counts)."""
    w = np.asarray(waits, np.int64)
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    if w.size and int(w.min()) < 0:
        raise ValueError("waits must be >= 0")
    top = int(w.max()) if w.size else 0
    if top == 0:
        return [0] * buckets + [0], [int(w.size)] + [0] * (buckets - 1)
    idx = np.minimum(w * buckets // top, buckets - 1)
    counts = np.bincount(idx, minlength=buckets)
    edges = [i * top // buckets for i in range(buckets)] + [top]
    return edges, [int(c) for c in counts]
