"""A plain, slow, obviously correct scheduler: the rules of `nprof.device.schedule`, written out directly.

It repeats two steps until every instruction has ended: (1) give a start time to every instruction whose
waits are all known (rules below, each a direct scan of the program); (2) advance the DMA pool to its next
event (a transfer starting or finishing), moving every running transfer's remaining work at the shared rate.
Rules: an instruction starts at the latest of
* each dependency's end, plus its own dependency latency (none between two TensorE instructions);
  with no dependencies, its fixed latency `lat0`;
* the end of the instruction before it on its track (LDWEIGHTS: the last LDWEIGHTS or TRANSPOSE before it);
* LDWEIGHTS: the start of the last MATMUL/TRANSPOSE before it; MATMUL/TRANSPOSE: the end of the last
  LDWEIGHTS/TRANSPOSE before it.
A DMA instead is ready at max(its dependencies' ends (0 without any), the start of the DMA before it on its
queue); ready DMAs are triggered earliest-ready first (ties: lowest index), each at least the preset's
`dma_issue_gap_ns` after the previous trigger, and start their latency after the trigger. Elided
instructions (plan.elided) are on no track.
A DMA with a transfer time then runs in the pool: while the running transfers' stand-alone rates add up to
more than the pool's bandwidth, each runs at rate * (pool / sum of rates).
"""

from __future__ import annotations

from nprof.arch import cost
from nprof.device.plan import SLOT_LD, SLOT_MM, Plan

_DONE = 1e-6  # ns of stand-alone work: a transfer with less left has finished


def _last(i: int, ok) -> int | None:
    """The last instruction before `i` for which `ok(j)` holds (None when none)."""
    found = None
    for j in range(i):
        if ok(j):
            found = j
    return found


def _earliest(plan: Plan, i: int, start: list, end: list) -> float | None:
    """Start time of `i` by the rules of the module doc, or None while something it waits for is unknown."""
    slot = plan.slot
    tensor = slot[i] <= SLOT_MM
    times: list[float | None] = []
    for d in plan.deps[i]:
        gap = 0.0 if tensor and slot[d] <= SLOT_MM else plan.lat[i]
        times.append(None if end[d] is None else end[d] + gap)
    if not plan.deps[i]:
        times.append(plan.lat0[i])
    is_tr = plan.transposes.__contains__
    on_track = lambda j: not plan.elided[j]  # noqa: E731
    if plan.elided[i]:
        before = None
    elif slot[i] == SLOT_LD:
        before = _last(i, lambda j: (slot[j] == SLOT_LD or is_tr(j)) and on_track(j))
        partner = _last(i, lambda j: slot[j] == SLOT_MM)
        times.append(0.0 if partner is None else start[partner])
    else:
        before = _last(i, lambda j: slot[j] == slot[i] and on_track(j))
        if slot[i] == SLOT_MM:
            partner = _last(i, lambda j: slot[j] == SLOT_LD or is_tr(j))
            times.append(0.0 if partner is None else end[partner])
    if before is not None:
        times.append(end[before])
    if any(t is None for t in times):
        return None
    return max(times)


def _dma_ready(plan: Plan, i: int, start: list, end: list) -> float | None:
    """Ready time of DMA `i` (module doc), or None while something it waits for is unknown."""
    times = [end[d] for d in plan.deps[i]] or [0.0]
    queue_before = _last(i, lambda j: plan.slot[j] == plan.slot[i])
    if queue_before is not None:
        times.append(start[queue_before])
    return None if any(t is None for t in times) else max(times)


def reference_schedule(plan: Plan) -> tuple[list[float], list[float]]:
    """(start, end) of every instruction; RuntimeError when nothing can proceed."""
    n = plan.n
    start: list[float | None] = [None] * n
    end: list[float | None] = [None] * n
    ready: dict[int, float] = {}  # DMAs ready and waiting for their trigger
    left: dict[int, float] = {}  # DMA -> stand-alone ns of transfer still to do
    cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9
    now = trigger_free = 0.0
    while any(e is None for e in end):
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if start[i] is not None or i in ready:
                    continue
                if plan.is_dma[i]:
                    if (r := _dma_ready(plan, i, start, end)) is not None:
                        ready[i], changed = r, True
                elif (t := _earliest(plan, i, start, end)) is not None:
                    start[i], end[i], changed = t, t + plan.dur[i], True
        running = [i for i in left if start[i] <= now]
        upcoming = [start[i] - now for i in left if start[i] > now]
        demand = sum(float(plan.dma_rate[i]) for i in running)
        factor = min(1.0, cap / demand) if demand else 1.0
        step = min([left[i] / factor for i in running] + upcoming, default=float("inf"))
        if ready:
            first = min(ready, key=lambda j: (ready[j], j))
            at = max(ready[first], trigger_free)
            if at <= now + step:
                del ready[first]
                trigger_free = at + plan.preset.dma_issue_gap_ns
                start[first] = at + plan.lat[first]
                if plan.dur[first] > 0:
                    left[first] = plan.dur[first]
                else:
                    end[first] = start[first]
                continue
        if not running and not upcoming:
            if any(e is None for e in end):
                raise RuntimeError("stuck")
            break
        now += step
        for i in running:
            left[i] -= step * factor
            if left[i] <= _DONE:
                end[i] = now
                del left[i]
    return start, end  # type: ignore[return-value]
