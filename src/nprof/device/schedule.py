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
  pool has moved all their bytes.
* Exact by construction: when the queues can never ask for more than the pool
  (`_can_exceed_pool` is false) no transfer is ever slowed and one in-order
  pass (`_list_schedule`) is the schedule. Otherwise `_event_schedule` runs a
  discrete-event simulation: an instruction is *resolved* (its start known)
  once everything it waits for is; a resolved compute instruction ends at
  start + duration at once, a resolved DMA enters the pool at its start, and
  the pool processes transfer starts and ends in time order, so a DMA's end is
  fixed only when no transfer that could still start before it is unknown.
  There is no iteration and no cap.
* A program whose schedule cannot be computed (an instruction waiting for a
  later one: a dependency cycle or a semaphore nobody signals) raises
  `NprofError` naming the first stuck instruction, never hangs.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heappop, heappush

import numpy as np

from nprof.arch import cost
from nprof.device.plan import SLOT_LD, SLOT_MM, Plan
from nprof.device.waits import stuck_error, successors
from nprof.program.model import Program

_EPS = 1e-6  # ns of stand-alone progress: transfers whose ends are closer than this end together


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


def _event_schedule(plan: Plan, program: Program | None) -> tuple[list[float], list[float]]:
    """The exact schedule under DMA pool sharing: (start, end + [0.0]) by program index (see module doc).

    The start of a resolved instruction follows the same rule, in the same float operations, as
    `_list_schedule`. The pool keeps one "virtual clock" (ns of stand-alone progress): every active transfer
    progresses at the same fraction `factor` of its own rate, so a transfer entering at virtual time v ends at
    virtual time v + dur. Its next event is the earlier of the next known arrival and the first virtual end;
    every arrival not yet known starts no earlier than that (it waits for a transfer still queued or active).
    """
    n = plan.n
    g = successors(plan)
    offsets, succ, count, pm, pl = g.offsets, g.succ, g.count, g.pm, g.pl
    slot, dur, deps, dep1, lat1, prev = plan.slot, plan.dur, plan.deps, plan.dep1, plan.lat1, plan.prev_list
    pooled = (plan.is_dma & (np.asarray(dur) > 0)).tolist()
    rate = plan.dma_rate.tolist()
    cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9  # bytes per ns
    start = [0.0] * (n + 1)  # start[n] = end[n] = 0.0: what "none" points at
    end = [0.0] * (n + 1)
    end_get = end.__getitem__
    ready = np.flatnonzero(np.asarray(count) == 0)[::-1].tolist()  # popped lowest index first
    arrivals: list[tuple[float, int]] = []  # (start, index) of resolved transfers not yet in the pool
    active: list[tuple[float, int]] = []  # (virtual end, index) of transfers in the pool
    now = virtual = demand = 0.0
    done = 0
    inf = float("inf")
    while True:
        while ready:
            i = ready.pop()
            d = dep1[i]
            if d >= 0:
                t = end[d] + lat1[i]
            elif d == -1:
                t = max(map(end_get, deps[i])) + lat1[i]
            else:  # TensorE: no latency on TensorE's own results; partner track (module doc)
                li = lat1[i]
                di = deps[i]
                t = max([end[j] if slot[j] <= SLOT_MM else end[j] + li for j in di]) if di else li
                f = start[pm[i]] if slot[i] == SLOT_LD else end[pl[i]]
                if t < f:
                    t = f
            f = end[prev[i]]
            if t < f:
                t = f
            start[i] = t
            if pooled[i]:
                heappush(arrivals, (t, i))
                continue
            end[i] = t + dur[i]
            done += 1
            for s in succ[offsets[i] : offsets[i + 1]]:
                c = count[s] - 1
                count[s] = c
                if not c:
                    ready.append(s)
        factor = 1.0 if demand <= cap else cap / demand
        finish = now + (active[0][0] - virtual) / factor if active else inf
        if arrivals and arrivals[0][0] <= finish:  # a transfer enters the pool
            t, i = heappop(arrivals)
            if active:
                virtual += (t - now) * factor
            now = t
            heappush(active, (virtual + dur[i], i))
            demand += rate[i]
            continue
        if not active:
            break
        virtual, now = active[0][0], finish
        while active and active[0][0] <= virtual + _EPS:  # transfers end
            _, i = heappop(active)
            demand -= rate[i]
            end[i] = now
            done += 1
            for s in succ[offsets[i] : offsets[i + 1]]:
                c = count[s] - 1
                count[s] = c
                if not c:
                    ready.append(s)
        if not active:
            demand = 0.0  # no drift carried into the next busy period
    if done < n:
        raise stuck_error(plan, program, count)
    return start[:n], end


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


def schedule(plan: Plan, program: Program | None = None) -> Timing:
    """Start/end/wait of every instruction of `plan` (see module doc); `program` names a stuck instruction."""
    if not _can_exceed_pool(plan):
        start, end = _list_schedule(plan, plan.dur)
    else:
        start, end = _event_schedule(plan, program)
    return _timing(plan, start, end)
