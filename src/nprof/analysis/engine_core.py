"""Compiled per-engine loops over an engine's time-sorted rows, reading the whole columns in place (no gathers).

Contract:
* `merge_rows(rows, ts, end)`: the disjoint sorted busy intervals of the rows' [ts, end) (empty ones dropped,
  touching ones joined): exactly `nprof.analysis.intervals.merge(ts[rows], end[rows])`, which the tests hold
  it to; `rows` ascending with non-decreasing `ts`.
* `wait_union(rows, ts, end, wait)` takes the engine's table positions `rows` (ascending, their `ts`
non-decreasing) and the whole instructions' int64 `ts`, `end` and `wait_ns` columns, and returns
`(union, busy)`: the length of the union of every row's [ts - max(wait, 0), max(end, ts)) (W ∪ B) and of its
[ts, end) (B). `nprof.analysis.latency.engine_wait_ns` is `union - busy`; its numpy path (merges) is the
reference the tests hold this loop to.

How: with rows in ts order, B's union grows by a running reach. W ∪ B keeps its merged blocks on a stack:
every block starts at or before the current ts (each member does), so a new interval [s, e) with e >= ts
overlaps exactly the blocks on top whose end reaches s, which it pops and absorbs (each block is pushed and
popped once: linear). numba: see `nprof.device.core` (wheels, on-disk cache); loaded for big engines only
or once numba is loaded anyway.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def merge_rows(rows, ts, end):  # type: ignore[no-untyped-def]
    """See the module doc: a running reach over intervals in start order."""
    out_start = np.empty(rows.size, np.int64)
    out_end = np.empty(rows.size, np.int64)
    k = -1
    for i in range(rows.size):
        r = rows[i]
        t, e = ts[r], end[r]
        if e <= t:
            continue
        if k >= 0 and t <= out_end[k]:
            if e > out_end[k]:
                out_end[k] = e
        else:
            k += 1
            out_start[k] = t
            out_end[k] = e
    return out_start[: k + 1].copy(), out_end[: k + 1].copy()


@njit(cache=True, nogil=True)
def wait_union(rows, ts, end, wait):  # type: ignore[no-untyped-def]
    """See the module doc."""
    n = rows.size
    block_start = np.empty(n, np.int64)
    block_end = np.empty(n, np.int64)
    top = 0
    busy = 0
    reach = np.iinfo(np.int64).min
    for i in range(n):
        r = rows[i]
        t, e, w = ts[r], end[r], wait[r]
        if e > t:  # B: intervals in start order, a running reach
            if t >= reach:
                busy += e - t
                reach = e
            elif e > reach:
                busy += e - reach
                reach = e
        s = t - w if w > 0 else t
        stop = e if e > t else t
        if stop <= s:
            continue
        while top > 0 and block_end[top - 1] >= s:
            top -= 1
            s = min(s, block_start[top])
            stop = max(stop, block_end[top])
        block_start[top] = s
        block_end[top] = stop
        top += 1
    union = 0
    for k in range(top):
        union += block_end[k] - block_start[k]
    return union, busy
