"""Vectorised interval arithmetic on numpy arrays of nanosecond [start, end) intervals.

Contract: every function takes int64 `start`/`end` arrays of equal length (any
order unless stated) and returns numpy results; nothing loops in Python per
interval. "Union" means the set of instants covered by at least one interval.
"""

from __future__ import annotations

import numpy as np

_I64 = np.int64


def is_sorted(a: np.ndarray) -> bool:
    """True when `a` is non-decreasing (cheap check that lets callers skip a sort)."""
    return a.size < 2 or bool(np.all(a[1:] >= a[:-1]))


def _nonempty(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`start`/`end` as int64 arrays without the empty intervals (order kept)."""
    start = np.asarray(start, dtype=_I64)
    end = np.asarray(end, dtype=_I64)
    keep = end > start
    if not keep.all():
        start, end = start[keep], end[keep]
    return start, end


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into the disjoint, sorted intervals of their union (empty ones dropped)."""
    start, end = _nonempty(start, end)
    if start.size == 0:
        return start, end
    if is_sorted(start):
        reach = np.maximum.accumulate(end)
    else:
        # The union depends only on the multisets of starts and ends: with both sorted on their own, the k-th
        # start and the k-th end bound intervals of the same union (the count covering t is #starts <= t minus
        # #ends <= t), ordered by start and by end at once. Two sorts (timsort: fast on nearly sorted times)
        # instead of an argsort and two gathers.
        start, reach = np.sort(start, kind="stable"), np.sort(end, kind="stable")
    # a new merged interval begins where the start is beyond everything seen so far
    new = np.empty(start.size, dtype=bool)
    new[0] = True
    np.greater(start[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = start.size - 1
    return start[first], reach[last]


def merge_by_end(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`merge` for intervals whose ends are non-decreasing (e.g. waits [ts - wait, ts) of time-sorted rows):
    no sort. Going back from the last interval, the running minimum of the starts is where the block reaching
    each end begins; a block closes before an interval whose end is below every later start."""
    start, end = _nonempty(start, end)
    if start.size == 0:
        return start, end
    low = np.minimum.accumulate(start[::-1])[::-1]  # low[i] = min(start[i:])
    close = np.empty(start.size, dtype=bool)
    close[-1] = True
    np.less(end[:-1], low[1:], out=close[:-1])
    last = np.flatnonzero(close)
    first = np.empty_like(last)
    first[0] = 0
    first[1:] = last[:-1] + 1
    return low[first], end[last]


def union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Total time covered by at least one interval."""
    s, e = merge(start, end)
    return int((e - s).sum())


def intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of (union of a) ∩ (union of b); both given as disjoint sorted intervals (from `merge`)."""
    return int(coverage(a, b[0], b[1]).sum())


def coverage(merged: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each query interval, how many ns of it are covered by the disjoint sorted `merged` intervals."""
    ms, me = merged
    if ms.size == 0 or start.size == 0:
        return np.zeros(start.size, dtype=_I64)
    covered = _cumulative(ms, me)
    return _covered_at(ms, me, covered, np.asarray(end, _I64)) - _covered_at(ms, me, covered, np.asarray(start, _I64))


def _cumulative(ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    """covered[i] = total length of merged intervals before interval i."""
    out = np.zeros(ms.size + 1, dtype=_I64)
    np.cumsum(me - ms, out=out[1:])
    return out


def _covered_at(ms: np.ndarray, me: np.ndarray, covered: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Covered time in (-inf, t] for each t."""
    k = np.searchsorted(ms, t, side="right")  # intervals starting at or before t
    idx = np.maximum(k - 1, 0)
    partial = np.clip(t - ms[idx], 0, me[idx] - ms[idx])
    return np.where(k > 0, covered[idx] + partial, 0)


def within_gaps(merged: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each query interval, True when it overlaps none of the disjoint sorted `merged` intervals.

    A zero-length query counts as overlapping when it lies inside a merged interval.
    """
    ms, me = merged
    if ms.size == 0:
        return np.ones(start.size, dtype=bool)
    k = np.searchsorted(ms, start, side="right") - 1  # last merged interval starting at or before `start`
    before_ok = (k < 0) | (me[np.maximum(k, 0)] <= start)  # it ended before the query starts
    nxt = np.minimum(k + 1, ms.size - 1)
    after_ok = (k + 1 >= ms.size) | (ms[nxt] >= end)  # the next one starts after the query ends
    return before_ok & after_ok


def rows_within_gaps(
    merged: tuple[np.ndarray, np.ndarray], start: np.ndarray, end: np.ndarray, batch: int = 1 << 18
) -> np.ndarray:
    """`np.flatnonzero(within_gaps(merged, start, end))` computed `batch` queries at a time (the temporaries
    of a batch, not of every query; tests hold it to the whole computation)."""
    parts = [np.flatnonzero(within_gaps(merged, start[b0 : b0 + batch], end[b0 : b0 + batch])) + b0
             for b0 in range(0, start.size, batch)]  # fmt: skip
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def gaps(merged: tuple[np.ndarray, np.ndarray], t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """The uncovered intervals of [t0, t1) given disjoint sorted `merged` intervals."""
    ms, me = merged
    starts = np.concatenate([[t0], me]).astype(_I64)
    ends = np.concatenate([ms, [t1]]).astype(_I64)
    starts = np.clip(starts, t0, t1)
    ends = np.clip(ends, t0, t1)
    keep = ends > starts
    return starts[keep], ends[keep]
