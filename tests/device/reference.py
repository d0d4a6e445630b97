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
`dma_issue_gap_ns` after the previous trigger, and start their latency after the trigger but not before
the DMA before them on their queue has ended. Elided
instructions (plan.elided) are on no track.
Engine order (the compiler's window, nprof.device.order): VectorE, ScalarE and GpSimdE run their
instructions in order of (est, index), where est is the latest of each dependency's est + duration, plus the
dependency latency (lat0 without dependencies), and of the est of the instruction `sched_window` places
before on the engine; every other track keeps program order (its est is also not below the est of the
instruction before it on its track and of its TensorE partner).
A DMA with a transfer time then runs in the pool: while the running transfers' stand-alone rates add up to
more than the pool's bandwidth, each runs at rate * (pool / sum of rates).
"""

from __future__ import annotations

from nprof.arch import cost
from nprof.device.plan import SLOT_GPSIMD, SLOT_LD, SLOT_MM, SLOT_SCALAR, SLOT_VECTOR, Plan

_DONE = 1e-6  # ns of stand-alone work: a transfer with less left has finished


def _last(i: int, ok) -> int | None:
    """The last instruction before `i` for which `ok(j)` holds (None when none)."""
    found = None
    for j in range(i):
        if ok(j):
            found = j
    return found


REORDERABLE = (SLOT_VECTOR, SLOT_SCALAR, SLOT_GPSIMD)


def _program_before(plan: Plan, i: int) -> tuple[int | None, int | None]:
    """(the instruction before `i` on its track in program order, its TensorE partner), None when none."""
    slot, elided, is_tr = plan.slot, plan.elided, plan.transposes.__contains__
    if elided[i]:
        return None, None
    if slot[i] == SLOT_LD:
        before = _last(i, lambda j: (slot[j] == SLOT_LD or is_tr(j)) and not elided[j])
        return before, _last(i, lambda j: slot[j] == SLOT_MM)
    before = _last(i, lambda j: slot[j] == slot[i] and not elided[j])
    if slot[i] == SLOT_MM:
        return before, _last(i, lambda j: slot[j] == SLOT_LD or is_tr(j))
    return before, None


def engine_keys(plan: Plan) -> list[tuple[float, int]]:
    """(est, index) of every instruction (module doc)."""
    est: list[float] = []
    window = plan.preset.sched_window
    for i in range(plan.n):
        deps = plan.deps[i]
        t = max(est[d] + plan.dur[d] for d in deps) + plan.lat[i] if deps else plan.lat0[i]
        if plan.elided[i]:
            pass
        elif plan.slot[i] in REORDERABLE:
            same = [j for j in range(i) if plan.slot[j] == plan.slot[i] and not plan.elided[j]]
            if len(same) >= window:
                t = max(t, est[same[-window]])
        else:
            for j in _program_before(plan, i):
                if j is not None:
                    t = max(t, est[j])
        est.append(t)
    return [(e, i) for i, e in enumerate(est)]


def _before(plan: Plan, i: int, keys: list[tuple[float, int]]) -> int | None:
    """The instruction before `i` on its track in its engine's order (None when none)."""
    if plan.slot[i] not in REORDERABLE or plan.elided[i]:
        return _program_before(plan, i)[0]
    same = [j for j in range(plan.n) if plan.slot[j] == plan.slot[i] and not plan.elided[j] and keys[j] < keys[i]]
    return max(same, key=lambda j: keys[j]) if same else None


def _earliest(plan: Plan, i: int, start: list, end: list, keys: list) -> float | None:
    """Start time of `i` by the rules of the module doc, or None while something it waits for is unknown."""
    slot = plan.slot
    tensor = slot[i] <= SLOT_MM
    times: list[float | None] = []
    for d in plan.deps[i]:
        gap = 0.0 if tensor and slot[d] <= SLOT_MM else plan.lat[i]
        times.append(None if end[d] is None else end[d] + gap)
    if not plan.deps[i]:
        times.append(plan.lat0[i])
    before = _before(plan, i, keys)
    partner = _program_before(plan, i)[1]
    if partner is not None:
        times.append(start[partner] if slot[i] == SLOT_LD else end[partner])
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
    triggered: dict[int, float] = {}  # DMAs triggered, waiting for the transfer ahead on their queue to end
    left: dict[int, float] = {}  # DMA -> stand-alone ns of transfer still to do
    cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9
    keys = engine_keys(plan)
    now = trigger_free = 0.0
    while any(e is None for e in end):
        changed = True
        while changed:
            changed = False
            for i in range(n):
                if i in triggered:
                    ahead = _last(i, lambda j, q=plan.slot[i]: plan.slot[j] == q)
                    if ahead is None or end[ahead] is not None:
                        start[i] = max(triggered.pop(i), 0.0 if ahead is None else end[ahead])
                        changed = True
                        if plan.dur[i] > 0:
                            left[i] = plan.dur[i]
                        else:
                            end[i] = start[i]
                    continue
                if start[i] is not None or i in ready:
                    continue
                if plan.is_dma[i]:
                    if (r := _dma_ready(plan, i, start, end)) is not None:
                        ready[i], changed = r, True
                elif (t := _earliest(plan, i, start, end, keys)) is not None:
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
                triggered[first] = at + plan.lat[first]
                continue
        if not running and not upcoming and not triggered:
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
