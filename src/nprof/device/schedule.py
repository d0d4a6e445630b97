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
* DMA transfers that touch HBM share its bandwidth: while the payload rates of
  the active transfers (bytes / their stand-alone transfer time) add up to more
  than `preset.hbm_bandwidth`, every active transfer slows by the same factor
  (a fluid model; per-chunk overhead time uses no HBM bandwidth). E.g. 16 equal
  transfers starting together all end when HBM has moved all their bytes. Because slower DMAs move later
  work, the schedule is recomputed with the shared durations until they stop
  changing (at most `MAX_SHARING_PASSES` passes; then the last pass stands).
  When the queues can never exceed HBM bandwidth, one pass is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _share_hbm(plan: Plan, timing: Timing, dur: list[float]) -> list[float]:
    """Durations of HBM-touching DMAs under fluid sharing of HBM bandwidth, given their start times."""
    hbm = plan.preset.hbm_bandwidth * 1e-9  # bytes per ns
    items = sorted(plan.hbm_bytes, key=lambda i: (timing.start[i], i))
    new = list(dur)
    if not items:
        return new
    # remaining work in ns-at-full-speed, and full-speed byte rate, per active transfer
    active: dict[int, float] = {}
    rate = {i: (plan.hbm_bytes[i] / dur[i] if dur[i] > 0 else 0.0) for i in items}
    now = 0.0
    k = 0
    while k < len(items) or active:
        demand = sum(rate[i] for i in active)
        factor = 1.0 if demand <= hbm or demand == 0 else hbm / demand
        next_start = timing.start[items[k]] if k < len(items) else float("inf")
        if active:
            first = min(active, key=lambda i: (active[i], i))
            finish = now + active[first] / factor
        else:
            finish = float("inf")
        if next_start <= finish:
            step = next_start - now
            for i in active:
                active[i] -= step * factor
            now = next_start
            i = items[k]
            k += 1
            if dur[i] > 0:
                active[i] = dur[i]
            continue
        step = finish - now
        now = finish
        done = []
        for i in active:
            active[i] -= step * factor
            if active[i] <= _EPS:
                done.append(i)
        for i in done:
            del active[i]
            new[i] = now - timing.start[i]
    return new


def _can_exceed_hbm(plan: Plan) -> bool:
    if not plan.hbm_bytes:
        return False
    queues = {plan.slot[i] for i in plan.hbm_bytes}
    return len(queues) * plan.preset.dma_queue_bandwidth > plan.preset.hbm_bandwidth


def schedule(plan: Plan) -> Timing:
    """Start/end/wait of every instruction of `plan` (see module doc)."""
    dur = plan.dur
    timing = _list_schedule(plan, dur)
    if not _can_exceed_hbm(plan):
        return timing
    for _ in range(MAX_SHARING_PASSES):
        shared = _share_hbm(plan, timing, plan.dur)
        if all(abs(shared[i] - timing.end[i] + timing.start[i]) <= _EPS for i in plan.hbm_bytes):
            break
        dur = shared
        timing = _list_schedule(plan, dur)
    return timing
