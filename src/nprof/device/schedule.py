"""The timing model: when every instruction of a Plan starts and ends.

Contract: `schedule(plan) -> Timing` (start/end/wait lists in float ns, by
program index). The rules, all deterministic:

* Every slot (engine track, DMA queue, CC-core) runs its instructions in
  program order, one at a time. An instruction starts at
  `max(slot free, last dependency end + dependency latency)` (the latency is
  the consumer engine's static access overhead; TensorE instructions pay none
  for dependencies on TensorE itself: weight loads and PSUM accumulation
  pipeline back to back); instructions
  without dependencies start when their slot is free (DMAs and collectives:
  not before their fixed latency, `lat0`). `wait` is the time it spent at the
  head of its slot waiting (start - slot free).
* TensorE has two tracks: LDWEIGHTS (tensor.stationary) may start once the
  MATMUL using the previous weights has *started* (background weight load into
  the shadow buffer), so it overlaps that MATMUL; a MATMUL (tensor.moving)
  waits for the latest LDWEIGHTS to end. TRANSPOSE loads its own operand and
  so occupies both tracks.
* DMA transfers share the core's DMA pool (its 16 engines, capped by its HBM
  share: `arch.cost.dma_pool_bandwidth`). Alone, a transfer runs at its own
  rate (`min(16, chunks)` engines); while the active transfers' rates add up
  to more than the pool, every active transfer slows by the same factor (a
  fluid model). E.g. 16 equal transfers starting together all end when the
  pool has moved all their bytes. Because slower DMAs move later work, the
  schedule is recomputed with the shared durations until they stop changing
  (at most `MAX_SHARING_PASSES` passes; then the last pass stands). When the
  queues can never exceed the pool, one pass is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heappop, heappush
from operator import itemgetter

import numpy as np

from nprof.arch import cost
from nprof.device.plan import SLOT_LD, SLOT_MM, Plan

MAX_SHARING_PASSES = 6
_EPS = 1e-6  # ns: durations closer than this count as unchanged


@dataclass(frozen=True)
class Timing:
    """Start, end and head-of-queue wait of every instruction, in ns (floats)."""

    start: list[float]
    end: list[float]
    wait: list[float]

    @property
    def makespan(self) -> float:
        return max(self.end, default=0.0)


def _list_schedule(plan: Plan, dur: list[float]) -> tuple[list[float], list[float]]:
    """One pass of in-order list scheduling with fixed durations: (start, end + [0.0]) by program index.

    A track is free at the end of `plan.prev` (the instruction before on the same track; index n, whose end
    stays 0.0, when none). The common case (not TensorE, at most one dependency) is the first branch:
    `plan.dep1` points at the dependency, or at end[n] with `lat1` = lat0 when there is none. The float
    operations are the rule's own (`max(dependency ends) + lat`, then `max` with the track's free time, `+ dur`).
    """
    n = plan.n
    slot = plan.slot
    lat0 = plan.lat0
    deps = plan.deps
    start = [0.0] * n
    end = [0.0] * (n + 1)  # end[n] stays 0.0: the "dependency" of instructions without any
    end_get = end.__getitem__
    transposes = plan.transposes
    last_mm_start = 0.0
    ld_end = 0.0  # end of the last LDWEIGHTS or TRANSPOSE: when tensor.stationary is free
    for i, p, d, li, du in zip(range(n), plan.prev_list, plan.dep1, plan.lat1, dur, strict=True):
        if d >= 0:
            t = end[d] + li
            f = end[p]
            if t < f:
                t = f
            e = t + du
        elif d == -1:
            t = max(map(end_get, deps[i])) + li
            f = end[p]
            if t < f:
                t = f
            e = t + du
        else:  # TensorE
            f = end[p]
            d = deps[i]
            if d:
                # TensorE's own results (weights loaded, PSUM accumulation) need no semaphore: no latency
                t = max([end[j] if slot[j] <= SLOT_MM else end[j] + li for j in d])
                if t < f:
                    t = f
            else:
                t = lat0[i]
                if t < f:
                    t = f
            if slot[i] == SLOT_LD:
                if last_mm_start > t:
                    t = last_mm_start
                e = t + du
                ld_end = e
            else:
                if ld_end > t:
                    t = ld_end
                last_mm_start = t
                e = t + du
                if i in transposes:
                    ld_end = e
        start[i] = t
        end[i] = e
    return start, end


def _share_pool(
    plan: Plan, dma_start: np.ndarray, dma_dur: np.ndarray, moving: np.ndarray, dur: list[float]
) -> list[float]:
    """`dur` with the DMAs' durations under fluid sharing of the DMA pool, given their start times.

    `dma_start` and `dma_dur` are the start and stand-alone duration of every DMA (`plan.dma_index`
    order), `moving` selects those with a transfer time (`dma_dur` > 0). Every active transfer progresses
    at the same fraction of its own rate, so one "virtual clock" (ns of stand-alone progress) serves all:
    a transfer started at virtual time v ends at virtual time v + dur. Transfers enter in (start, index)
    order.
    """
    cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9  # bytes per ns
    idx = plan.dma_index[moving]
    by_start = np.argsort(dma_start[moving], kind="stable")
    order = idx[by_start]
    items = order.tolist()
    starts = dma_start[moving][by_start].tolist()
    durs = dma_dur[moving][by_start].tolist()
    rates = plan.dma_rate[order].tolist()
    inf = float("inf")
    starts.append(inf)
    new = list(dur)
    heap: list[tuple[float, int, int]] = []  # (virtual end, DMA index, position in items): ties by DMA index
    virtual = now = demand = 0.0
    k, n_items = 0, len(items)
    while True:
        if not heap:  # idle pool (demand is 0.0, factor 1.0): the next transfer starts
            if k == n_items:
                break
            s = starts[k]
            virtual += s - now
            now = s
            demand = rates[k]
            ve = virtual + durs[k]
            finish = now + (ve - virtual) / (1.0 if demand <= cap else cap / demand)
            if starts[k + 1] > finish:  # it runs alone: done without the heap
                virtual, now = ve, finish
                new[items[k]] = finish - s
                demand = 0.0
            else:
                heap.append((ve, items[k], k))
            k += 1
            continue
        factor = 1.0 if demand <= cap else cap / demand
        next_start = starts[k]
        finish = now + (heap[0][0] - virtual) / factor
        if next_start <= finish:
            virtual += (next_start - now) * factor
            now = next_start
            heappush(heap, (virtual + durs[k], items[k], k))
            demand += rates[k]
            k += 1
            continue
        virtual, now = heap[0][0], finish
        while heap and heap[0][0] <= virtual + _EPS:
            _, i, j = heappop(heap)
            demand -= rates[j]
            new[i] = now - starts[j]
        if not heap:
            demand = 0.0  # no drift carried into the next busy period
    return new


def _can_exceed_pool(plan: Plan) -> bool:
    """Could the queues together ever ask the pool for more than it has? (If not, one pass is exact.)"""
    idx = plan.dma_index
    if not len(idx):
        return False
    queues = np.asarray(plan.slot, np.int64)[idx]
    rates = plan.dma_rate[idx]
    fastest = np.zeros(int(queues.max()) + 1, np.float64)
    np.maximum.at(fastest, queues, rates)
    _, first = np.unique(queues, return_index=True)
    in_order = fastest[queues[np.sort(first)]].tolist()  # queues in order of their first DMA, as summed before
    return sum(in_order) > cost.dma_pool_bandwidth(plan.preset) * 1e-9 * (1 + 1e-12)


def _timing(plan: Plan, start: list[float], end: list[float]) -> Timing:
    """Timing lists; `wait` = start - the end of the instruction that freed the track (0.0 when none)."""
    wait = np.asarray(start, np.float64) - np.asarray(end, np.float64)[plan.prev]
    return Timing(start, end[: plan.n], wait.tolist())


def schedule(plan: Plan) -> Timing:
    """Start/end/wait of every instruction of `plan` (see module doc)."""
    start, end = _list_schedule(plan, plan.dur)
    if not _can_exceed_pool(plan):
        return _timing(plan, start, end)
    dmas = plan.dma_index.tolist()
    at = itemgetter(*dmas, dmas[0])  # a tuple of the DMAs' entries (plus one, so even a single DMA gives a tuple)
    dma_dur = np.asarray(at(plan.dur)[:-1], np.float64)
    moving = dma_dur > 0
    for _ in range(MAX_SHARING_PASSES):
        s = np.asarray(at(start)[:-1], np.float64)
        shared = _share_pool(plan, s, dma_dur, moving, plan.dur)
        actual = np.asarray(at(end)[:-1], np.float64) - s
        if bool(np.all(np.abs(np.asarray(at(shared)[:-1], np.float64) - actual) <= _EPS)):
            break
        start, end = _list_schedule(plan, shared)
    return _timing(plan, start, end)
