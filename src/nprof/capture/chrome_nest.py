"""Vectorised nesting passes of Chrome-trace import: `chrome_tree.nest`, `select_work` and the nearest
marked ancestor, as a few numpy sorts and pointer-jumping rounds instead of a loop per slice.

Contract (each held to the plain loops of `chrome_tree` in tests/capture/test_chrome_core.py):
* `vector_nest(order, track, start, end) -> (parent, end) | None`: what `chrome_tree.python_nest`
  computes for slices visited in `order` (by track, start, -duration) when no slice overruns its parent
  (the parent is the innermost open slice of the same track); None when one does (the loop then clamps it
  to its parent's end: a ProfilerStep annotation starting inside a short Python frame, for instance).
* `first_marked(parent, marked)`: per slice, the root-most ancestor-or-self that is marked (-1 if none).
* `nearest_marked(parent, marked)`: per slice, the nearest (innermost) ancestor-or-self marked (-1 if none).
* `fold_down(parent, labels, step)`: a value per node folded down from the roots (`step(parent's value or None,
  label)`), as codes into its distinct values; `step` runs once per distinct (parent value, label) pair.

How (`vector_nest`): when no slice overruns its parent, the loop's stack just before slice i is pushed
holds exactly the earlier slices j of its track with end[j] > start[i] (ends along the stack never increase
upwards, so the pops remove exactly the slices that ended). Its size (i's depth) is a count by
`searchsorted`, and i's parent is the last earlier slice of depth - 1 (the slot below i on the stack was
last written by it). The parents found are checked: if no child ends after its parent, they are the loop's
(by induction over the visit order, the loop never clamps and its stack is the one counted).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np

V = TypeVar("V", bound=Hashable)

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


def fold_down(parent: np.ndarray, labels: np.ndarray, step: Callable[[V | None, int], V]) -> tuple[np.ndarray, list[V]]:
    """(code per node, distinct values): node i's value is values[code[i]] = step(None, labels[i]) at a root,
    else step(value of parent[i], labels[i]) (values hashable, never None; equal values share one code).

    One depth at a time: the nodes whose parents have codes get theirs by one `np.unique` over (parent code,
    label) keys, `step` running once per distinct key; once a depth holds too few nodes to pay for the numpy
    passes (a long chain), the rest are done one by one, up their ancestors (tests/capture/test_chrome_host.py holds
    it to the plain recursion). A cycle in `parent` raises ValueError."""
    parent, labels = np.asarray(parent, np.int64), np.asarray(labels, np.int64)
    n = len(parent)
    width = int(labels.max()) + 1 if n else 1
    code = np.full(n, -1, np.int64)
    values: list[V] = []
    index: dict[V, int] = {}
    by_key: dict[int, int] = {}  # (parent code + 1) * width + label -> code

    def code_of(key: int) -> int:
        got = by_key.get(key)
        if got is None:
            above = key // width - 1
            value = step(values[above] if above >= 0 else None, key % width)
            got = by_key[key] = index.setdefault(value, len(values))
            if got == len(values):
                values.append(value)
        return got

    pending = np.arange(n, dtype=np.int64)
    while len(pending):
        p = parent[pending]
        above = np.where(p >= 0, code[np.maximum(p, 0)], -1)
        ready = (p < 0) | (above >= 0)
        k = int(np.count_nonzero(ready))
        if k < 64 + len(pending) // 64:  # a thin depth: numpy passes cost more than a loop over what is left
            break
        keys, inverse = np.unique((above[ready] + 1) * width + labels[pending[ready]], return_inverse=True)
        code[pending[ready]] = np.fromiter(map(code_of, keys.tolist()), np.int64, len(keys))[inverse.reshape(-1)]
        pending = pending[~ready]
    if len(pending):
        _fold_rest(pending.tolist(), parent.tolist(), labels.tolist(), code, width, code_of)
    return code, values


def _fold_rest(
    pending: list[int], parent: list[int], labels: list[int], code: np.ndarray, width: int,
    code_of: Callable[[int], int],
) -> None:  # fmt: skip
    """`fold_down`'s codes for the nodes `pending`, one at a time up their ancestors (`code` updated)."""
    codes = code.tolist()
    for i in pending:
        chain, node = [], i
        while node >= 0 and codes[node] < 0:
            chain.append(node)
            node = parent[node]
            if len(chain) > len(parent):
                raise ValueError("parent has a cycle")
        above = codes[node] if node >= 0 else -1
        for node in reversed(chain):
            above = codes[node] = code_of((above + 1) * width + labels[node])
    code[:] = codes
