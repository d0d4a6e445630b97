"""The compiled scheduler core: `device.schedule`'s two passes as numba-compiled loops over flat arrays.

Contract: `list_pass(...)` and `event_pass(...)` compute exactly what the pure-Python passes compute
(`device.schedule.python_list_schedule`, `device.events.event_schedule`): the same floating-point operations
in the same order, so start and end are bit-identical (tests/device/test_core.py holds them to it, and to the
plain reference scheduler, on thousands of random programs). They take numpy arrays (int64 / float64 / bool)
and return `(start, end)` of length n + 1 (index n is "none": 0.0); `event_pass` also returns the number of
instructions that finished and the remaining wait counts (fewer than n finished: the program is stuck, and
`device.waits.stuck_error` names the instruction).

Why numba: it installs from manylinux/macOS/Windows wheels with `pip install` and needs no compiler on the
user's machine (Cython or a Rust/C extension would need one for a source install, or per-platform wheels of
nprof itself). Compiled code is cached on disk (`cache=True`, next to this module or in numba's user cache),
so the JIT cost (a few seconds) is paid once per machine. `device.schedule` imports this module only when
numba is installed, and otherwise runs the pure-Python passes (same results, slower).

The event pass keeps three binary heaps of (time, index) pairs (DMA triggers by ready time, transfers
waiting to enter the pool by start time, active transfers by virtual end), ordered like Python tuples, so the
pop order is the Python heapq's (all pairs of one heap have distinct indices).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EPS = 1e-6  # as device.events: transfers whose virtual ends are closer than this end together
_INF = np.inf
_SLOT_LD, _SLOT_MM = 0, 1  # device.template.SLOT_LD / SLOT_MM


@njit(cache=True, nogil=True)
def _less(k1: float, i1: int, k2: float, i2: int) -> bool:
    """(k1, i1) < (k2, i2) as Python compares tuples."""
    return k1 < k2 or (k1 == k2 and i1 < i2)


@njit(cache=True, nogil=True)
def _push(keys: np.ndarray, idx: np.ndarray, size: int, k: float, i: int) -> int:
    """Push (k, i) on the heap held in keys[:size], idx[:size]; returns the new size."""
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if _less(k, i, keys[parent], idx[parent]):
            keys[pos] = keys[parent]
            idx[pos] = idx[parent]
            pos = parent
        else:
            break
    keys[pos] = k
    idx[pos] = i
    return size + 1


@njit(cache=True, nogil=True)
def _pop(keys: np.ndarray, idx: np.ndarray, size: int) -> int:
    """Remove the smallest pair (read it from keys[0], idx[0] first); returns the new size."""
    size -= 1
    k, i = keys[size], idx[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and _less(keys[child + 1], idx[child + 1], keys[child], idx[child]):
            child += 1
        if _less(keys[child], idx[child], k, i):
            keys[pos] = keys[child]
            idx[pos] = idx[child]
            pos = child
        else:
            break
    if size > 0:
        keys[pos] = k
        idx[pos] = i
    return size


@njit(cache=True, nogil=True)
def _deps_end(end: np.ndarray, off: np.ndarray, flat: np.ndarray, i: int) -> float:
    """The latest end among the dependencies of i (-inf when none)."""
    t = -_INF
    for j in range(off[i], off[i + 1]):
        e = end[flat[j]]
        if e > t:
            t = e
    return t


@njit(cache=True, nogil=True)
def _tensor_deps_end(end: np.ndarray, slot: np.ndarray, off: np.ndarray, flat: np.ndarray, i: int, li: float,
                     none: float) -> float:  # fmt: skip
    """When TensorE instruction `i`'s inputs are ready: a TensorE producer's end, any other's end + `li`
    (its fixed latency); `none` when it has no dependencies."""
    if off[i + 1] <= off[i]:
        return none
    t = -_INF
    for k in range(off[i], off[i + 1]):
        j = flat[k]
        x = end[j] if slot[j] <= _SLOT_MM else end[j] + li
        if x > t:
            t = x
    return t


@njit(cache=True, nogil=True)
def list_pass(order: np.ndarray, slot: np.ndarray, dur: np.ndarray, lat0: np.ndarray, lat1: np.ndarray,
              dep1: np.ndarray, off: np.ndarray, flat: np.ndarray, prev: np.ndarray,
              is_tr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The in-order pass (`device.schedule.python_list_schedule`): (start, end), index n = 0.0."""
    n = slot.shape[0]
    start = np.zeros(n + 1)
    end = np.zeros(n + 1)
    last_mm_start = 0.0
    ld_end = 0.0
    for i in order:
        p, d, li, du = prev[i], dep1[i], lat1[i], dur[i]
        if d >= 0 or d == -1:
            t = (end[d] if d >= 0 else _deps_end(end, off, flat, i)) + li
            f = end[p]
            if t < f:
                t = f
            e = t + du
        elif d == -3:  # DMA: the queue's descriptor stage
            t = _deps_end(end, off, flat, i) if off[i + 1] > off[i] else 0.0
            f = start[p]
            if t < f:
                t = f
            t += li
            f = end[p]
            if t < f:
                t = f
            e = t + du
        else:  # TensorE
            f = end[p]
            t = _tensor_deps_end(end, slot, off, flat, i, li, lat0[i])
            if t < f:
                t = f
            if slot[i] == _SLOT_LD:
                if last_mm_start > t:
                    t = last_mm_start
                e = t + du
                ld_end = e
            else:
                if ld_end > t:
                    t = ld_end
                last_mm_start = t
                e = t + du
                if is_tr[i]:
                    ld_end = e
        start[i] = t
        end[i] = e
    return start, end


# Integer state of the event pass, one small array so helpers can update it: sizes of the ready stack and of
# the three heaps, and the number of instructions that ended.
_READY, _ARRIVALS, _TRIGGERS, _ACTIVE, _DONE = range(5)


@njit(cache=True, nogil=True)
def _release(g_off: np.ndarray, g_succ: np.ndarray, i: int, count: np.ndarray, ready: np.ndarray,
             st: np.ndarray) -> None:  # fmt: skip
    """One wait of each successor of i in (g_off, g_succ) is over; the free ones go on the ready stack."""
    for k in range(g_off[i], g_off[i + 1]):
        s = g_succ[k]
        c = count[s] - 1
        count[s] = c
        if c == 0:
            ready[st[_READY]] = s
            st[_READY] += 1


@njit(cache=True, nogil=True)
def _begin_chain(t: float, i: int, start: np.ndarray, end: np.ndarray, ended: np.ndarray, pooled: np.ndarray,
                 park_t: np.ndarray, park_i: np.ndarray, e_off: np.ndarray, e_succ: np.ndarray,
                 s_off: np.ndarray, s_succ: np.ndarray, count: np.ndarray, ready: np.ndarray,
                 arr_k: np.ndarray, arr_i: np.ndarray, st: np.ndarray, finish_first: bool) -> None:  # fmt: skip
    """`events._Sim.begin(t, i)` (or `finish(t, i)` when `finish_first`), with the chain of DMAs parked behind
    each finished one started in turn (a loop where the Python pass recurses)."""
    if not finish_first:
        start[i] = t
        _release(s_off, s_succ, i, count, ready, st)
        if pooled[i]:
            st[_ARRIVALS] = _push(arr_k, arr_i, st[_ARRIVALS], t, i)
            return
    while True:
        end[i] = t
        ended[i] = True
        st[_DONE] += 1
        _release(e_off, e_succ, i, count, ready, st)
        nxt = park_i[i]
        if nxt < 0:
            return
        park_i[i] = -1
        pt = park_t[i]
        t = t if t >= pt else pt
        i = nxt
        start[i] = t
        _release(s_off, s_succ, i, count, ready, st)
        if pooled[i]:
            st[_ARRIVALS] = _push(arr_k, arr_i, st[_ARRIVALS], t, i)
            return


@njit(cache=True, nogil=True)
def _resolve(slot: np.ndarray, dur: np.ndarray, lat1: np.ndarray, dep1: np.ndarray, off: np.ndarray,
             flat: np.ndarray, prev: np.ndarray, pm: np.ndarray, pl: np.ndarray, pooled: np.ndarray,
             start: np.ndarray, end: np.ndarray, ended: np.ndarray, e_off: np.ndarray, e_succ: np.ndarray,
             s_off: np.ndarray, s_succ: np.ndarray, count: np.ndarray, ready: np.ndarray, st: np.ndarray,
             arr_k: np.ndarray, arr_i: np.ndarray, trig_k: np.ndarray, trig_i: np.ndarray) -> None:  # fmt: skip
    """`events._Sim.resolve`: every ready instruction gets its start (a DMA its ready time, as a trigger)."""
    while st[_READY] > 0:
        st[_READY] -= 1
        i = ready[st[_READY]]
        d = dep1[i]
        if d >= 0:
            t = end[d] + lat1[i]
        elif d == -1:
            t = _deps_end(end, off, flat, i) + lat1[i]
        elif d == -3:
            t = _deps_end(end, off, flat, i) if off[i + 1] > off[i] else 0.0
            f = start[prev[i]]
            st[_TRIGGERS] = _push(trig_k, trig_i, st[_TRIGGERS], t if t >= f else f, i)
            continue
        else:  # TensorE
            li = lat1[i]
            t = _tensor_deps_end(end, slot, off, flat, i, li, li)
            f = start[pm[i]] if slot[i] == _SLOT_LD else end[pl[i]]
            if t < f:
                t = f
        f = end[prev[i]]
        if t < f:
            t = f
        start[i] = t
        _release(s_off, s_succ, i, count, ready, st)
        if pooled[i]:
            st[_ARRIVALS] = _push(arr_k, arr_i, st[_ARRIVALS], t, i)
            continue
        end[i] = t + dur[i]
        ended[i] = True
        st[_DONE] += 1
        _release(e_off, e_succ, i, count, ready, st)


@njit(cache=True, nogil=True)
def event_pass(slot: np.ndarray, dur: np.ndarray, lat1: np.ndarray, dep1: np.ndarray, off: np.ndarray,
               flat: np.ndarray, prev: np.ndarray, pm: np.ndarray, pl: np.ndarray, pooled: np.ndarray,
               rate: np.ndarray, e_off: np.ndarray, e_succ: np.ndarray, s_off: np.ndarray, s_succ: np.ndarray,
               count: np.ndarray, cap: float, gap: float) -> tuple[np.ndarray, np.ndarray, int]:  # fmt: skip
    """The event-driven pass (`device.events.event_schedule`): (start, end, finished); `count` is updated in
    place (what is left is the stuck instructions' waits)."""
    n = slot.shape[0]
    start = np.zeros(n + 1)
    end = np.zeros(n + 1)
    ended = np.zeros(n + 1, np.bool_)
    park_t = np.zeros(n + 1)
    park_i = np.full(n + 1, -1, np.int64)
    ready = np.empty(n + 1, np.int64)
    arr_k, arr_i = np.empty(n + 1), np.empty(n + 1, np.int64)
    trig_k, trig_i = np.empty(n + 1), np.empty(n + 1, np.int64)
    act_k, act_i = np.empty(n + 1), np.empty(n + 1, np.int64)
    st = np.zeros(5, np.int64)
    for i in range(n - 1, -1, -1):  # popped lowest index first, as the Python pass
        if count[i] == 0:
            ready[st[_READY]] = i
            st[_READY] += 1
    now = virtual = demand = 0.0
    trigger_free = 0.0
    while True:
        if st[_READY] > 0:
            _resolve(slot, dur, lat1, dep1, off, flat, prev, pm, pl, pooled, start, end, ended, e_off, e_succ,
                     s_off, s_succ, count, ready, st, arr_k, arr_i, trig_k, trig_i)  # fmt: skip
        factor = 1.0 if demand <= cap else cap / demand
        finish = now + (act_k[0] - virtual) / factor if st[_ACTIVE] > 0 else _INF
        arrive = arr_k[0] if st[_ARRIVALS] > 0 else _INF
        if st[_TRIGGERS] > 0:
            at = trig_k[0] if trig_k[0] >= trigger_free else trigger_free
            if at <= arrive and at <= finish:  # the earliest-ready DMA is triggered
                i = trig_i[0]
                st[_TRIGGERS] = _pop(trig_k, trig_i, st[_TRIGGERS])
                trigger_free = at + gap
                t = at + lat1[i]
                ahead = prev[i]
                if ahead < n and not ended[ahead]:
                    park_t[ahead] = t
                    park_i[ahead] = i
                    continue
                f = end[ahead]
                _begin_chain(t if t >= f else f, i, start, end, ended, pooled, park_t, park_i, e_off, e_succ,
                             s_off, s_succ, count, ready, arr_k, arr_i, st, False)  # fmt: skip
                continue
        if arrive <= finish and st[_ARRIVALS] > 0:  # a transfer enters the pool
            t, i = arr_k[0], arr_i[0]
            st[_ARRIVALS] = _pop(arr_k, arr_i, st[_ARRIVALS])
            if st[_ACTIVE] > 0:
                virtual += (t - now) * factor
            now = t
            st[_ACTIVE] = _push(act_k, act_i, st[_ACTIVE], virtual + dur[i], i)
            demand += rate[i]
            continue
        if st[_ACTIVE] == 0:
            break
        virtual, now = act_k[0], finish
        while st[_ACTIVE] > 0 and act_k[0] <= virtual + _EPS:  # transfers end
            i = act_i[0]
            st[_ACTIVE] = _pop(act_k, act_i, st[_ACTIVE])
            demand -= rate[i]
            _begin_chain(now, i, start, end, ended, pooled, park_t, park_i, e_off, e_succ, s_off, s_succ, count,
                         ready, arr_k, arr_i, st, True)  # fmt: skip
        if st[_ACTIVE] == 0:
            demand = 0.0
    return start, end, st[_DONE]


@njit(cache=True, nogil=True)
def _add_edge(src: int, dst: int, off: np.ndarray, succ: np.ndarray, count: np.ndarray, fill: bool) -> None:
    """Count (fill=False) or place (fill=True, `off` then holds each group's next free slot) one edge."""
    if fill:
        succ[off[src]] = dst
        off[src] += 1
    else:
        off[src + 1] += 1
        count[dst] += 1


@njit(cache=True, nogil=True)
def wait_graph(off: np.ndarray, flat: np.ndarray, is_dma: np.ndarray, prev: np.ndarray, pm: np.ndarray,
               pl: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """`device.waits.successors` as one counting sort: (offsets, succ, s_offsets, s_succ, wait_count), the
    successors of each instruction in the same order (dependency edges by owner, then track, then partner)."""
    n = prev.shape[0]
    count = np.zeros(n, np.int64)
    e_off = np.zeros(n + 1, np.int64)
    s_off = np.zeros(n + 1, np.int64)
    e_succ = np.empty(0, np.int64)
    s_succ = np.empty(0, np.int64)
    for fill in (False, True):
        if fill:
            e_succ = np.empty(e_off[n], np.int64)  # e_off[i]: group i's next free slot (then its end)
            s_succ = np.empty(s_off[n], np.int64)
        for i in range(n):  # dependencies: successors wait for their end
            for k in range(off[i], off[i + 1]):
                _add_edge(flat[k], i, e_off, e_succ, count, fill)
        for i in range(n):  # the track: a DMA waits for the previous transfer's start, others for its end
            if prev[i] < n and not is_dma[i]:
                _add_edge(prev[i], i, e_off, e_succ, count, fill)
        for i in range(n):
            if pl[i] < n:
                _add_edge(pl[i], i, e_off, e_succ, count, fill)
        for i in range(n):
            if prev[i] < n and is_dma[i]:
                _add_edge(prev[i], i, s_off, s_succ, count, fill)
        for i in range(n):
            if pm[i] < n:
                _add_edge(pm[i], i, s_off, s_succ, count, fill)
        if not fill:
            for i in range(n):
                e_off[i + 1] += e_off[i]
                s_off[i + 1] += s_off[i]
    e_off[1:] = e_off[:-1].copy()
    e_off[0] = 0
    s_off[1:] = s_off[:-1].copy()
    s_off[0] = 0
    return e_off, e_succ, s_off, s_succ, count
