"""Vectorised nesting passes of Chrome-trace import: `chrome_tree.nest`, `select_work` and the nearest
marked ancestor, as a few numpy sorts and pointer-jumping rounds instead of a loop per slice.

Contract (each held to the plain loops of `chrome_tree` in tests/capture/test_chrome_core.py):
* `vector_nest(order, track, start, end) -> (parent, end) | None`: what `chrome_tree.python_nest`
  computes for slices visited in `order` (by track, start, -duration) when no slice overruns its parent
  (the parent is the innermost open slice of the same track); None when one does (the loop then clamps it
  to its parent's end: a ProfilerStep annotation starting inside a short Python frame, for instance).
* `first_marked(parent, marked)`: per slice, the root-most ancestor-or-self that is marked (-1 if none).
* `nearest_marked(parent, marked)`: per slice, the nearest (innermost) ancestor-or-self marked (-1 if none).

How (`vector_nest`): when no slice overruns its parent, the loop's stack just before slice i is pushed
holds exactly the earlier slices j of its track with end[j] > start[i] (ends along the stack never increase
upwards, so the pops remove exactly the slices that ended). Its size (i's depth) is a count by
`searchsorted`, and i's parent is the last earlier slice of depth - 1 (the slot below i on the stack was
last written by it). The parents found are checked: if no child ends after its parent, they are the loop's
(by induction over the visit order, the loop never clamps and its stack is the one counted).
"""

from __future__ import annotations

import numpy as np

TRACK_SHIFT = 45  # key = track << TRACK_SHIFT | ts; ts < 2**45 ns (~9.7 hours)


def vector_nest(
    order: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """(parent, end) per slice (original indices), or None if a slice overruns its parent (see module doc)."""
    n = len(order)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent, end.astype(np.int64, copy=True)
    t = track[order].astype(np.int64)
    s, e = start[order].astype(np.int64), end[order].astype(np.int64)
    pos = np.arange(n, dtype=np.int64)
    first = np.concatenate([[True], t[1:] != t[:-1]])
    gstart = np.maximum.accumulate(np.where(first, pos, 0))  # first position of each slice's track
    par = _parents((t << TRACK_SHIFT) | s, t, e, pos, gstart)
    inner = par >= 0
    if (e[inner] > e[par[inner]]).any():
        return None
    parent[order] = np.where(inner, order[np.maximum(par, 0)], -1)
    return parent, end.astype(np.int64, copy=True)


def _parents(keys: np.ndarray, t: np.ndarray, ends: np.ndarray, pos: np.ndarray, gstart: np.ndarray) -> np.ndarray:
    """The parent position of each sorted slice given the (assumed settled) ends: see the module doc."""
    n = len(pos)
    pop = np.searchsorted(keys, (t << TRACK_SHIFT) | ends, side="left")  # first later start >= the end
    pop = np.maximum(pop, pos + 1)  # a zero-length slice is popped by the next one
    closed = np.searchsorted(np.sort(pop), pos, side="right") - gstart
    depth = (pos - gstart) - closed
    level = np.sort(depth * n + pos)
    q = np.searchsorted(level, (depth - 1) * n + pos, side="left") - 1
    found = level[np.maximum(q, 0)]
    cand = found - (depth - 1) * n
    ok = (depth > 0) & (q >= 0) & (cand >= gstart) & (cand < pos)
    return np.where(ok, cand, -1)


def first_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per node, the root-most ancestor-or-self with `marked` set, -1 if none (pointer jumping)."""
    out = np.where(marked, np.arange(len(parent)), -1)
    up = parent.copy()
    live = np.flatnonzero(up >= 0)
    while len(live):
        a = up[live]
        above = out[a]
        out[live] = np.where(above >= 0, above, out[live])
        up[live] = up[a]
        live = live[up[live] >= 0]
    return out


def nearest_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Per node, the innermost ancestor-or-self with `marked` set, -1 if none (pointer jumping)."""
    out = np.where(marked, np.arange(len(parent)), -1)
    up = parent.copy()
    live = np.flatnonzero((up >= 0) & (out < 0))
    while len(live):
        a = up[live]
        out[live] = out[a]
        up[live] = up[a]
        live = live[(up[live] >= 0) & (out[live] < 0)]
    return out
