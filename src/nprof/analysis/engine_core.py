"""Compiled per-engine loops over the whole instructions columns in table order, reading them in place: no
gathers, no row positions and no end-time column (an engine's rows are those whose code matches).

Contract:
* `merge_code(codes, code, ts, dur)`: the disjoint sorted busy intervals [ts, ts + dur) of the rows whose
  `codes` entry is `code` (empty ones dropped, touching ones joined): exactly
  `nprof.analysis.intervals.merge(ts[m], (ts + dur)[m])` for m = codes == code, which the tests hold it to;
  those rows' `ts` non-decreasing in table order.
* `wait_union_code(codes, code, ts, dur, wait)` takes the same rows and the whole instructions' int64 `ts`,
  `duration` and `wait_ns` columns, and returns `(union, busy)`: the length of the union of every such row's
  [ts - max(wait, 0), max(end, ts)) (W ∪ B) and of its [ts, end) (B), end = ts + dur.
  `nprof.analysis.latency.engine_wait_ns` is `union - busy`; its numpy path (merges) is the reference the
  tests hold this loop to.

How: with rows in ts order, B's union grows by a running reach. W ∪ B keeps its merged blocks on a stack:
every block starts at or before the current ts (each member does), so a new interval [s, e) with e >= ts
overlaps exactly the blocks on top whose end reaches s, which it pops and absorbs (each block is pushed and
popped once: linear). Outputs and stacks are sized by the engine's row count (counted first). numba: see
`nprof.device.core` (wheels, on-disk cache); loaded for big engines only or once numba is loaded anyway.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _count(codes, code):  # type: ignore[no-untyped-def]
    n = 0
    for i in range(codes.size):
        if codes[i] == code:
            n += 1
    return n


@njit(cache=True, nogil=True)
def merge_code(codes, code, ts, dur):  # type: ignore[no-untyped-def]
    """See the module doc: a running reach over intervals in start order."""
    n = _count(codes, code)
    out_start = np.empty(n, np.int64)
    out_end = np.empty(n, np.int64)
    k = -1
    for r in range(codes.size):
        if codes[r] != code:
            continue
        t = ts[r]
        e = t + dur[r]
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
def wait_union_code(codes, code, ts, dur, wait):  # type: ignore[no-untyped-def]
    """See the module doc."""
    n = _count(codes, code)
    block_start = np.empty(n, np.int64)
    block_end = np.empty(n, np.int64)
    top = 0
    busy = 0
    reach = np.iinfo(np.int64).min
    for r in range(codes.size):
        if codes[r] != code:
            continue
        t, w = ts[r], wait[r]
        e = t + dur[r]
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
