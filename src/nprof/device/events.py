"""The exact discrete-event scheduler: DMA triggers, the DMA pool's fluid sharing, in time order.

Contract: `event_schedule(plan, program) -> (start, end + [0.0])` by program index, by the rules of
`device.schedule`'s module doc. This is the pure-Python pass: `device.core.event_pass` is its compiled
twin (bit-identical results), which `device.schedule` runs when numba is available.

An instruction is *resolved* once everything it waits for is known (`device.waits`). A resolved compute
instruction gets start and end at once. A resolved DMA is *ready* at `max(its dependencies' ends, the
previous transfer start on its queue)`; the trigger server issues ready DMAs in order of readiness, one per
`dma_issue_gap_ns` (FITTED), and the transfer starts the fixed latency after its trigger, once the transfer
ahead of it on its queue has ended (it is *parked* until then). Transfers share the pool: every active
transfer progresses at the same fraction `factor` of its own rate, so one "virtual clock" (ns of stand-alone
progress) serves all: a transfer entering at virtual time v ends at virtual time v + dur. The three event
kinds (trigger, transfer start, transfer end) are processed earliest first; every event not yet known
happens no earlier (it waits for a DMA still untriggered, queued or active), so each is final when
processed. No iteration, no cap. A program that can make no progress raises `NprofError`
(`waits.stuck_error`).
"""

from __future__ import annotations

from heapq import heappop, heappush

import numpy as np

from nprof.arch import cost
from nprof.device.plan import SLOT_MM, Plan
from nprof.device.waits import WaitGraph, stuck_error, successors
from nprof.program.model import Program

_EPS = 1e-6  # ns of stand-alone progress: transfers whose ends are closer than this end together
_INF = float("inf")


class _Sim:
    """The state of one event-driven run (see module doc)."""

    def __init__(self, plan: Plan, g: WaitGraph) -> None:
        n = plan.n
        self.plan = plan
        self.slot, self.dur, self.deps = plan.slot.tolist(), plan.dur.tolist(), plan.deps
        self.dep1, self.lat1, self.prev = plan.dep1.tolist(), plan.lat1.tolist(), plan.prev.tolist()
        self.pm, self.pl = plan.pm.tolist(), plan.pl.tolist()
        self.offsets, self.succ = g.offsets.tolist(), g.succ.tolist()
        self.s_offsets, self.s_succ = g.s_offsets.tolist(), g.s_succ.tolist()
        self.count = g.wait_count.tolist()
        self.start = [0.0] * (n + 1)  # start[n] = end[n] = 0.0: what "none" points at
        self.end = [0.0] * (n + 1)
        self.ready = np.flatnonzero(g.wait_count == 0)[::-1].tolist()  # popped lowest index first
        self.pooled = (plan.is_dma & (plan.dur > 0)).tolist()
        self.triggers: list[tuple[float, int]] = []  # (ready time, index) of DMAs waiting for their trigger
        self.arrivals: list[tuple[float, int]] = []  # (start, index) of triggered transfers not yet in the pool
        self.active: list[tuple[float, int]] = []  # (virtual end, index) of transfers in the pool
        self.trigger_free = 0.0  # when the trigger server can issue the next DMA
        self.ended = [False] * (n + 1)
        self.parked: dict[int, tuple[float, int]] = {}  # queue predecessor -> (earliest start, triggered DMA)
        self.done = 0

    def release(self, offsets: list[int], succ: list[int], i: int) -> None:
        """One wait of each successor of `i` in (offsets, succ) is over; the free ones become ready."""
        count, ready = self.count, self.ready
        for s in succ[offsets[i] : offsets[i + 1]]:
            c = count[s] - 1
            count[s] = c
            if not c:
                ready.append(s)

    def resolve(self) -> None:
        """Give every ready instruction its start (DMAs: their ready time, into the trigger queue)."""
        start, end, ready = self.start, self.end, self.ready
        slot, dur, deps, dep1, lat1, prev = self.slot, self.dur, self.deps, self.dep1, self.lat1, self.prev
        pm, pl, pooled = self.pm, self.pl, self.pooled
        end_get = end.__getitem__
        count, ended, done = self.count, self.ended, self.done
        offsets, succ, s_offsets, s_succ = self.offsets, self.succ, self.s_offsets, self.s_succ
        while ready:
            i = ready.pop()
            d = dep1[i]
            if d >= 0:
                t = end[d] + lat1[i]
            elif d == -1:
                t = max(map(end_get, deps[i])) + lat1[i]
            elif d == -3:  # DMA: ready once its deps are done and its queue's descriptor stage is free
                di = deps[i]
                t = max(map(end_get, di)) if di else 0.0
                f = start[prev[i]]
                heappush(self.triggers, (t if t >= f else f, i))
                continue
            else:  # TensorE: no latency on TensorE's own results; the partner track (waits.py)
                li = lat1[i]
                di = deps[i]
                t = max([end[j] if slot[j] <= SLOT_MM else end[j] + li for j in di]) if di else li
                f = start[pm[i]] if slot[i] == 0 else end[pl[i]]
                if t < f:
                    t = f
            f = end[prev[i]]
            if t < f:
                t = f
            start[i] = t
            for s in s_succ[s_offsets[i] : s_offsets[i + 1]]:  # inlined `release`: the hot loop
                c = count[s] - 1
                count[s] = c
                if not c:
                    ready.append(s)
            if pooled[i]:
                heappush(self.arrivals, (t, i))
                continue
            end[i] = t + dur[i]
            ended[i] = True
            done += 1
            for s in succ[offsets[i] : offsets[i + 1]]:
                c = count[s] - 1
                count[s] = c
                if not c:
                    ready.append(s)
        self.done = done

    def trigger(self, at: float, gap: float) -> None:
        """Issue the earliest-ready DMA at `at`: its transfer starts the fixed latency later, but not before
        the transfer ahead of it on its queue has ended (a queue's transfers run in order)."""
        _, i = heappop(self.triggers)
        self.trigger_free = at + gap
        t = at + self.lat1[i]
        ahead = self.prev[i]
        if ahead < self.plan.n and not self.ended[ahead]:
            self.parked[ahead] = (t, i)
            return
        f = self.end[ahead]
        self.begin(t if t >= f else f, i)

    def begin(self, t: float, i: int) -> None:
        """DMA `i`'s transfer starts at `t`."""
        self.start[i] = t
        self.release(self.s_offsets, self.s_succ, i)
        if self.pooled[i]:
            heappush(self.arrivals, (t, i))
        else:
            self.finish(t, i)

    def finish(self, t: float, i: int) -> None:
        """Instruction `i` ends at `t`: release what waits for its end, start a DMA parked behind it."""
        self.end[i] = t
        self.ended[i] = True
        self.done += 1
        self.release(self.offsets, self.succ, i)
        parked = self.parked.pop(i, None)
        if parked is not None:
            self.begin(t if t >= parked[0] else parked[0], parked[1])


def event_schedule(plan: Plan, program: Program | None) -> tuple[list[float], list[float]]:
    """(start, end + [0.0]) of every instruction (see module doc)."""
    sim = _Sim(plan, successors(plan))
    dur, rate = sim.dur, plan.dma_rate.tolist()
    cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9  # bytes per ns
    gap = plan.preset.dma_issue_gap_ns
    triggers, arrivals, active, end = sim.triggers, sim.arrivals, sim.active, sim.end
    now = virtual = demand = 0.0
    ready = sim.ready
    while True:
        if ready:
            sim.resolve()
        factor = 1.0 if demand <= cap else cap / demand
        finish = now + (active[0][0] - virtual) / factor if active else _INF
        arrive = arrivals[0][0] if arrivals else _INF
        if triggers:
            at = triggers[0][0] if triggers[0][0] >= sim.trigger_free else sim.trigger_free
            if at <= arrive and at <= finish:
                sim.trigger(at, gap)
                continue
        if arrive <= finish and arrivals:  # a transfer enters the pool
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
            sim.finish(now, i)
        if not active:
            demand = 0.0  # no drift carried into the next busy period
    if sim.done < plan.n:
        raise stuck_error(plan, program, sim.count)
    return sim.start[: plan.n], end
