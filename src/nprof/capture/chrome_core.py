"""The compiled nesting passes of Chrome-trace import: `chrome_tree.nest` and `select_work` as numba loops.

Contract: `nest_pass(order, track, start, end, clamp)` returns (parent, clamped end) and `work_pass(order, parent,
candidate)` returns (emitted, owner) exactly as the pure-Python loops of `chrome_tree` compute them (the
readable references; tests/capture/test_chrome_core.py holds the two to each other on random nestings).
Inputs are int64 / bool numpy arrays. `chrome_tree` loads this module only for large traces (see
`chrome_tree.compiled_core`): loading numba costs ~0.5 s CPU once per process, the Python loops ~1 us per
slice. Why numba: see `nprof.device.core` (wheels everywhere, no compiler needed).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def nest_pass(order: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray, clamp: bool) -> tuple:
    """(parent, clamped end) of slices visited in `order` (by track, start, -duration): a stack per track
    (`clamp`: see `chrome_tree.nest`)."""
    n = len(order)
    parent = np.full(len(start), -1, dtype=np.int64)
    end_out = end.copy()
    stack = np.empty(n, dtype=np.int64)
    top = 0
    prev = np.int64(-1)
    first = True
    for k in range(n):
        i = order[k]
        t = track[i]
        s = start[i]
        if first or t != prev:
            top = 0
            prev = t
            first = False
        while top > 0 and (end_out[stack[top - 1]] <= s or (not clamp and end_out[stack[top - 1]] < end_out[i])):
            top -= 1
        if top > 0:
            p = stack[top - 1]
            parent[i] = p
            if end_out[i] > end_out[p]:
                end_out[i] = end_out[p]
        stack[top] = i
        top += 1
    return parent, end_out


@njit(cache=True, nogil=True)
def work_pass(order: np.ndarray, parent: np.ndarray, candidate: np.ndarray) -> tuple:
    """(emitted, owner): top-down, a candidate without an emitted ancestor is emitted; owner = emitted
    ancestor-or-self, -1 if none."""
    n = len(parent)
    owner = np.full(n, -1, dtype=np.int64)
    emitted = np.zeros(n, dtype=np.bool_)
    for k in range(len(order)):
        i = order[k]
        p = parent[i]
        up = owner[p] if p >= 0 else -1
        if up >= 0:
            owner[i] = up
        elif candidate[i]:
            emitted[i] = True
            owner[i] = i
    return emitted, owner
