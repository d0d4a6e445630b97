"""The next-fit allocator of `nprof.nki.alloc.Allocator`, compiled, for placing the tiles of many stamped loop
iterations in one call (`nprof.nki.stamp`).

Contract: `run(state, starts, ends, pinned, steps, iterations, tiles)` applies, for each of `iterations`
iterations, the placement steps (rows of `steps`: kind 1 = allocate `size` bytes aligned to `align` for tile
`tile`, kind 2 = free tile `tile`'s range) exactly as `Allocator.alloc` / `Allocator.free` would, on the live
ranges `starts`/`ends` (sorted, the first `state[N]` valid) and the direct allocations `pinned` [k, 2]. Returns
(offsets [iterations, tiles], starts, ends); `state` (int64: capacity, bank (0: none), default alignment, cursor,
used, high water, pinned bytes, live ranges, then failure: the size that did not fit (0: none), the bytes
live then, the iteration and the step row) is updated in place. On a failure it stops at once (the caller
raises the over-capacity error).
`load(allocator)` / `store(allocator, ...)` convert to and from an `Allocator`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nprof.compiled import njit

CAP, BANK, ALIGN, CURSOR, USED, HIGH, PINNED, N, FAIL, LIVE, FAIL_J, FAIL_R = range(12)


@njit(nogil=True)
def _bisect_right(a: np.ndarray, n: int, x: int) -> int:
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(nogil=True)
def _bisect_left(a: np.ndarray, n: int, x: int) -> int:
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(nogil=True)
def _hits_pinned(pinned: np.ndarray, lo: int, hi: int) -> bool:
    i = 0  # bisect_right(pinned, (lo, 1 << 62)): pinned ranges starting at or before lo
    while i < pinned.shape[0] and pinned[i, 0] <= lo:
        i += 1
    if i > 0 and pinned[i - 1, 1] > lo:
        return True
    return i < pinned.shape[0] and pinned[i, 0] < hi


@njit(nogil=True)
def _fits(state: np.ndarray, starts: np.ndarray, ends: np.ndarray, pinned: np.ndarray, start: int, size: int,
          align: int) -> int:  # fmt: skip
    """`Allocator._fits`: the aligned start, or -1."""
    s = -(-start // align) * align
    bank = state[BANK]
    if bank > 0 and size <= bank and s // bank != (s + size - 1) // bank:
        s = (s // bank + 1) * bank
    if s + size > state[CAP]:
        return -1
    n = state[N]
    i = _bisect_right(starts, n, s)
    if i > 0 and ends[i - 1] > s:
        return -1
    if i < n and starts[i] < s + size:
        return -1
    if pinned.shape[0] and _hits_pinned(pinned, s, s + size):
        return -1
    return s


@njit(nogil=True)
def _alloc(state: np.ndarray, starts: np.ndarray, ends: np.ndarray, pinned: np.ndarray, size: int, align: int) -> int:
    """`Allocator.alloc` (room in starts/ends was made beforehand): the start, or -1 when nothing fits."""
    size = max(size, 1)
    if align <= 0:
        align = state[ALIGN]
    if size > state[CAP]:
        return -1
    n, cursor = state[N], state[CURSOR]
    split = _bisect_left(ends, n, cursor)
    total = 2 + n + pinned.shape[0]
    for c in range(total):  # the cursor, the ends at/after it, 0, the ends before it, the pinned ends
        if c == 0:
            cand = cursor
        elif c <= n - split:
            cand = ends[split + c - 1]
        elif c == n - split + 1:
            cand = 0
        elif c <= n + 1:
            cand = ends[c - (n - split) - 2]
        else:
            cand = pinned[c - n - 2, 1]
        s = _fits(state, starts, ends, pinned, cand, size, align)
        if s >= 0:
            i = _bisect_left(starts, n, s)
            starts[i + 1 : n + 1] = starts[i:n].copy()
            ends[i + 1 : n + 1] = ends[i:n].copy()
            starts[i], ends[i] = s, s + size
            state[N] = n + 1
            state[CURSOR] = s + size
            state[USED] += size
            state[HIGH] = max(state[HIGH], state[USED] + state[PINNED])
            return s
    return -1


@njit(nogil=True)
def _free(state: np.ndarray, starts: np.ndarray, ends: np.ndarray, start: int) -> None:
    n = state[N]
    i = _bisect_left(starts, n, start)
    if i >= n or starts[i] != start:
        return
    state[USED] -= ends[i] - starts[i]
    starts[i : n - 1] = starts[i + 1 : n].copy()
    ends[i : n - 1] = ends[i + 1 : n].copy()
    state[N] = n - 1


@njit(nogil=True)
def run(state: np.ndarray, starts: np.ndarray, ends: np.ndarray, pinned: np.ndarray, steps: np.ndarray,
        iterations: int, tiles: int) -> tuple:  # fmt: skip
    """See module doc."""
    offsets = np.zeros((iterations, max(tiles, 1)), np.int64)
    room = state[N] + steps.shape[0] + 1
    if starts.shape[0] < room:
        grown = np.zeros(room, np.int64)
        grown[: state[N]] = starts[: state[N]]
        starts = grown
        grown = np.zeros(room, np.int64)
        grown[: state[N]] = ends[: state[N]]
        ends = grown
    for j in range(iterations):
        for r in range(steps.shape[0]):
            kind, tile = steps[r, 0], steps[r, 1]
            if kind == 1:
                s = _alloc(state, starts, ends, pinned, steps[r, 2], steps[r, 3])
                if s < 0:
                    state[FAIL], state[LIVE], state[FAIL_J], state[FAIL_R] = max(steps[r, 2], 1), state[USED], j, r
                    return offsets, starts, ends
                offsets[j, tile] = s
            else:
                _free(state, starts, ends, offsets[j, tile])
    return offsets, starts, ends


def load(allocator: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(state, starts, ends, pinned) of an `Allocator`."""
    state = np.zeros(12, np.int64)
    state[[CAP, BANK, ALIGN, CURSOR, USED, HIGH, PINNED, N]] = (
        allocator.capacity, allocator.bank or 0, allocator.align, allocator._cursor, allocator.used,
        allocator.high_water, allocator.pinned_bytes, len(allocator._starts),
    )  # fmt: skip
    pinned = np.asarray(allocator._pinned, np.int64).reshape(-1, 2)
    return state, np.asarray(allocator._starts, np.int64), np.asarray(allocator._end_list, np.int64), pinned


def store(allocator: Any, state: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """Put `run`'s resulting live ranges, cursor and counters back into the `Allocator`."""
    n = int(state[N])
    allocator._starts = starts[:n].tolist()
    allocator._end_list = ends[:n].tolist()
    allocator._ends = dict(zip(allocator._starts, allocator._end_list, strict=True))
    allocator._cursor, allocator.used, allocator.high_water = int(state[CURSOR]), int(state[USED]), int(state[HIGH])
