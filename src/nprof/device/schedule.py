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


def _list_schedule(plan: Plan, dur: list[float]) -> Timing:
    """One pass of in-order list scheduling with fixed durations."""
    n = plan.n
    slot = plan.slot
    lat = plan.lat
    lat0 = plan.lat0
    deps = plan.deps
    free = [0.0] * len(plan.slot_tracks)
    start = [0.0] * n
    end = [0.0] * n
    wait = [0.0] * n
    end_get = end.__getitem__
    transposes = plan.transposes
    last_mm_start = 0.0
    ld_end = 0.0
    for i in range(n):
        s = slot[i]
        f = free[s]
        d = deps[i]
        if d:
            if s <= SLOT_MM:
                # TensorE's own results (weights loaded, PSUM accumulation) need no semaphore: no latency
                li = lat[i]
                t = max([end[j] if slot[j] <= SLOT_MM else end[j] + li for j in d])
            else:
                t = max(map(end_get, d)) + lat[i]
            if t < f:
                t = f
        else:
            t = lat0[i]
            if t < f:
                t = f
        if s <= SLOT_MM:
            if s == SLOT_LD:
                if last_mm_start > t:
                    t = last_mm_start
                e = t + dur[i]
                ld_end = e
            else:
                if ld_end > t:
                    t = ld_end
                tr = i in transposes
                if tr and free[SLOT_LD] > t:
                    t = free[SLOT_LD]
                last_mm_start = t
                e = t + dur[i]
                if tr:
                    free[SLOT_LD] = e
                    ld_end = e
        else:
            e = t + dur[i]
        free[s] = e
        start[i] = t
        end[i] = e
        wait[i] = t - f
    return Timing(start, end, wait)


def _share_pool(plan: Plan, timing: Timing, dur: list[float]) -> list[float]:
    """Durations of the DMAs under fluid sharing of the DMA pool, given their start times.

    Every active transfer progresses at the same fraction of its own rate, so one "virtual clock" (ns of
    stand-alone progress) serves all: a transfer started at virtual time v ends at virtual time v + dur.
    """
    cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9  # bytes per ns
    rates = plan.dma_rate
    start = timing.start
    items = sorted((i for i in rates if dur[i] > 0), key=lambda i: (start[i], i))
    new = list(dur)
    heap: list[tuple[float, int]] = []  # (virtual end, DMA)
    virtual = now = demand = 0.0
    k, n_items, inf = 0, len(items), float("inf")
    while k < n_items or heap:
        factor = 1.0 if demand <= cap else cap / demand
        next_start = start[items[k]] if k < n_items else inf
        finish = now + (heap[0][0] - virtual) / factor if heap else inf
        if next_start <= finish:
            virtual += (next_start - now) * factor
            now = next_start
            i = items[k]
            k += 1
            heappush(heap, (virtual + dur[i], i))
            demand += rates[i]
            continue
        virtual, now = heap[0][0], finish
        while heap and heap[0][0] <= virtual + _EPS:
            i = heappop(heap)[1]
            demand -= rates[i]
            new[i] = now - start[i]
        if not heap:
            demand = 0.0  # no drift carried into the next busy period
    return new


def _can_exceed_pool(plan: Plan) -> bool:
    """Could the queues together ever ask the pool for more than it has? (If not, one pass is exact.)"""
    fastest: dict[int, float] = {}
    for i, rate in plan.dma_rate.items():
        q = plan.slot[i]
        fastest[q] = max(fastest.get(q, 0.0), rate)
    return sum(fastest.values()) > cost.dma_pool_bandwidth(plan.preset) * 1e-9 * (1 + 1e-12)


def schedule(plan: Plan) -> Timing:
    """Start/end/wait of every instruction of `plan` (see module doc)."""
    dur = plan.dur
    timing = _list_schedule(plan, dur)
    if not _can_exceed_pool(plan):
        return timing
    for _ in range(MAX_SHARING_PASSES):
        shared = _share_pool(plan, timing, plan.dur)
        if all(abs(shared[i] - (timing.end[i] - timing.start[i])) <= _EPS for i in plan.dma_rate):
            break
        dur = shared
        timing = _list_schedule(plan, dur)
    return timing
