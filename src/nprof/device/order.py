"""The compiler's instruction order within an engine queue: a window, not strict program order.

Public source: NKI `nki.language.no_reorder` ("Without this directive, the compiler scheduler is free to
reorder independent operations"). Contract: `track_order(...) -> (order, prev)`:

* `est[i]`, the compiler's estimate of when instruction i can start: the latest of its dependencies'
  estimated ends plus its dependency latency (`lat0` without dependencies); on in-order tracks (TensorE and
  its partner couplings, DMA queues, Sync, CC) not before the estimate of the instruction before it; on the
  reorderable engines (VectorE, ScalarE, GpSimdE) not before the estimate of the instruction `window`
  places before it on its engine (so nothing moves more than `window - 1` places ahead).
* Every engine runs its instructions in order of (est, program index): a ready instruction overtakes
  earlier ones that wait longer. That order is one linear extension of every wait (dependencies, in-order
  tracks, windows), so no two engines can wait for each other (no deadlock by construction).
* `order`: all instructions by (est, index): the order a single pass can schedule them in.
  `prev`: the instruction before each one on its track in that order (n: none; elided instructions are on
  no track). `window` 1 keeps program order exactly.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from nprof.device.template import SLOT_GPSIMD, SLOT_LD, SLOT_MM, SLOT_SCALAR, SLOT_VECTOR

REORDERABLE = (SLOT_VECTOR, SLOT_SCALAR, SLOT_GPSIMD)


def dep_lists(offsets: np.ndarray, flat: np.ndarray) -> list[tuple[int, ...]]:
    """The dependency tuple of each instruction from the CSR arrays (offsets [n + 1], flat)."""
    values = flat.tolist()
    bounds = offsets.tolist()
    return [tuple(values[a:b]) for a, b in pairwise(bounds)]


def by_slot(slot: np.ndarray) -> np.ndarray:
    """Indices sorted by slot, program order within a slot (a stable radix sort: slots are small ints)."""
    small = len(slot) == 0 or int(slot.max()) < 2**15
    return np.argsort(slot.astype(np.int16) if small else slot, kind="stable")


def partners(slot: np.ndarray, is_tr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TensorE couplings (n where none): pm, for an LDWEIGHTS the MATMUL/TRANSPOSE before it (it waits for
    its start); pl, for a MATMUL/TRANSPOSE the LDWEIGHTS/TRANSPOSE before it (it waits for its end)."""
    n = len(slot)
    mm = np.flatnonzero(slot == SLOT_MM)
    ld = np.flatnonzero(slot == SLOT_LD)
    stationary = np.flatnonzero((slot == SLOT_LD) | is_tr)
    pm = np.full(n, n, np.int64)
    pl = np.full(n, n, np.int64)
    if len(ld) and len(mm):
        pos = np.searchsorted(mm, ld)
        pm[ld] = np.where(pos > 0, mm[np.maximum(pos - 1, 0)], n)
    if len(mm) and len(stationary):
        pos = np.searchsorted(stationary, mm)  # a transpose finds itself: the one before it is pos - 1
        pl[mm] = np.where(pos > 0, stationary[np.maximum(pos - 1, 0)], n)
    return pm, pl


def _estimates(slot: list[int], dur: list[float], lat: list[float], lat0: list[float], deps: list,
               prev: list[int], partner: list[int], on_track: list[bool], window: int) -> list[float]:  # fmt: skip
    """`est` of every instruction (module doc), in program order (est[n] = 0.0 and dur[n] = 0.0: "none")."""
    n = len(slot)
    est = [0.0] * (n + 1)
    end = [0.0] * (n + 1)  # est + dur
    end_get = end.__getitem__
    hist: list[list[int]] = [[] for _ in range(max(REORDERABLE) + 1)]
    movable = [s in REORDERABLE for s in range(max(slot, default=0) + 1)]
    for i, s, d, li, l0, ok in zip(range(n), slot, deps, lat, lat0, on_track, strict=True):
        t = (end[d[0]] if len(d) == 1 else max(map(end_get, d))) + li if d else l0
        if not ok:
            pass
        elif movable[s]:
            h = hist[s]
            if len(h) >= window:
                f = est[h[-window]]
                if f > t:
                    t = f
            h.append(i)
        else:
            f = est[prev[i]]
            if f > t:
                t = f
            f = est[partner[i]]
            if f > t:
                t = f
        est[i] = t
        end[i] = t + dur[i]
    return est[:n]


def track_order(slot: np.ndarray, elided: np.ndarray, prev: np.ndarray, partner: np.ndarray,
                dur: np.ndarray, lat: np.ndarray, lat0: np.ndarray, offsets: np.ndarray, flat: np.ndarray,
                window: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(order, prev) by the rules of the module doc; `prev`/`partner` are the program-order track links."""
    n = len(slot)
    if window <= 1 or n == 0 or not np.isin(slot, REORDERABLE).any():
        return np.arange(n, dtype=np.int64), prev
    on_track = (~elided).tolist()
    deps = dep_lists(offsets, flat)
    est = np.asarray(_estimates(slot.tolist(), dur.tolist(), lat.tolist(), lat0.tolist(), deps, prev.tolist(),
                                partner.tolist(), on_track, window))  # fmt: skip
    idx = np.arange(n, dtype=np.int64)
    order = np.lexsort((idx, est))
    new_prev = prev.copy()
    movable = np.isin(slot, REORDERABLE) & ~elided
    on = order[movable[order]]  # reorderable instructions in (est, index) order
    grouped = on[by_slot(slot[on])]
    same = slot[grouped][1:] == slot[grouped][:-1]
    new_prev[movable] = n
    new_prev[grouped[1:][same]] = grouped[:-1][same]
    return order, new_prev
