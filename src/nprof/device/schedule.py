"""The timing model: when every instruction of a Plan starts and ends.

Contract: `schedule(plan) -> Timing` (start/end/wait lists in float ns, by
program index). The rules, all deterministic:

* Every slot (engine track, DMA queue, CC-core) runs its instructions one at
  a time, in program order except where the compiler's scheduler moved an
  independent instruction ahead within a window (`device.order`; `plan.prev`
  is the instruction before on the track in that order). An instruction starts at
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
* DMA queues (`arch.cost` cites the rules): a DMA's transfer starts at
  `max(its dependencies' end, the previous transfer start on its queue) +
  dma latency` (the queue's descriptor stage holds one DMA for the fixed
  latency), and not before the previous transfer of its queue has ended
  (a queue's transfers run in order). DMA triggers (FITTED
  `dma_issue_gap_ns`): ready DMAs are triggered in order of readiness, at
  least the gap apart, and the transfer starts the latency after its trigger.
  `wait` of a DMA: start - max(previous start on its queue + latency,
  previous end on its queue).
* Elided instructions (`plan.elided`: PSUM zero-fills that start an
  accumulation group) take no time and no place on a track: they end when
  their dependencies end.
* DMA transfers share the core's DMA pool (its 16 engines, capped by its HBM
  share: `arch.cost.dma_pool_bandwidth`). Alone, a transfer runs at its own
  rate (one engine per 8 partitions); while the active transfers' rates add up
  to more than the pool, every active transfer slows by the same factor (a
  fluid model). E.g. 16 equal transfers starting together all end when the
  pool has moved all their bytes.
* Exact by construction: when the queues can never ask for more than the pool
  (`_can_exceed_pool` is false) and triggers are not spaced (gap 0), no
  transfer is ever slowed and one in-order pass (`python_list_schedule`) is the
  schedule. Otherwise `device.events` runs a discrete-event simulation that
  processes DMA triggers, transfer starts and transfer ends in time order.
  There is no iteration and no cap.
* The fixed per-launch cost (`launch_ns`, FITTED: 0, since the model is
  already above the one published small-kernel time, `arch.presets`) delays
  every instruction.
* A program whose schedule cannot be computed (an instruction waiting for a
  later one: a dependency cycle or a semaphore nobody signals) raises
  `NprofError` naming the first stuck instruction, never hangs.

Two implementations of the same passes: the compiled core (`device.core`, numba) and the pure-Python passes
(`python_schedule`: `python_list_schedule` here, `device.events`), the readable reference. Both give
bit-identical start/end; `schedule` runs the compiled core for large plans or once it or numba is loaded
(`compiled_core`; a torch.compile process has numba loaded by the compiler, and the core's cached machine
code then costs ~0.1 s CPU once), the Python passes otherwise and when numba is unavailable.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np

from nprof.arch import cost
from nprof.compiled import load_compiled
from nprof.device.events import event_schedule
from nprof.device.plan import SLOT_LD, SLOT_MM, Plan
from nprof.device.waits import stuck_error
from nprof.program.model import Program


@dataclass(frozen=True)
class Timing:
    """Start, end and head-of-queue wait of every instruction, in ns (float64 arrays by program index)."""

    start: np.ndarray
    end: np.ndarray
    wait: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def python_list_schedule(plan: Plan) -> tuple[list[float], list[float]]:
    """One pass of in-order list scheduling with fixed durations: (start, end + [0.0]) by program index.

    Instructions are taken in `plan.order` (program order unless the compiler's window reordered an engine's
    queue, `device.order`), which every wait respects.
    A track is free at the end of `plan.prev` (the instruction before on the same track; index n, whose end
    stays 0.0, when none). The common case (not TensorE, at most one dependency) is the first branch:
    `plan.dep1` points at the dependency, or at end[n] with `lat1` = lat0 when there is none. The float
    operations are the rule's own (`max(dependency ends) + lat`, then `max` with the track's free time, `+ dur`).
    """
    n = plan.n
    slot, lat0, dur = plan.slot.tolist(), plan.lat0.tolist(), plan.dur.tolist()
    deps = plan.deps
    start = [0.0] * (n + 1)  # start[n] stays 0.0: the "previous DMA" of the first one
    end = [0.0] * (n + 1)  # end[n] stays 0.0: the "dependency" of instructions without any
    end_get = end.__getitem__
    transposes = plan.transposes
    last_mm_start = 0.0
    ld_end = 0.0  # end of the last LDWEIGHTS or TRANSPOSE: when tensor.stationary is free
    prev_list, dep1, lat1 = plan.prev.tolist(), plan.dep1.tolist(), plan.lat1.tolist()
    for i in plan.order.tolist():
        p, d, li, du = prev_list[i], dep1[i], lat1[i], dur[i]
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
        elif d == -3:  # DMA: the queue's descriptor stage (no trigger spacing on this path)
            dd = deps[i]
            t = max(map(end_get, dd)) if dd else 0.0
            f = start[p]
            if t < f:
                t = f
            t += li
            f = end[p]  # a queue's transfers run in order
            if t < f:
                t = f
            e = t + du
        else:  # TensorE
            f = end[p]
            ds = deps[i]
            if ds:
                # TensorE's own results (weights loaded, PSUM accumulation) need no semaphore: no latency
                t = max([end[j] if slot[j] <= SLOT_MM else end[j] + li for j in ds])
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
    return start[:n], end


def _can_exceed_pool(plan: Plan) -> bool:
    """Could the transfers together ever ask the pool for more than it has? (If not, one pass is exact.)

    Transfers of one queue may overlap (module doc), so the only safe bound is the sum of all their rates.
    """
    rates = plan.dma_rate[plan.dma_index]
    return float(rates.sum()) > cost.dma_pool_bandwidth(plan.preset) * 1e-9 * (1 + 1e-12)


def _timing(plan: Plan, start: np.ndarray, end: np.ndarray) -> Timing:
    """Timing of (start, end + [0.0]); `wait` = start - when the track was free for it (module doc; 0.0 for
    elided ones)."""
    st = np.asarray(start, np.float64)
    en = np.asarray(end, np.float64)
    launch = plan.preset.launch_ns
    if launch:  # the fixed per-launch cost: everything starts that much later
        st = st + launch
        en = en + launch  # en[n] too: a track is free from the launch on
    free = en[plan.prev]
    dma = plan.is_dma & (plan.prev < plan.n)
    free[dma] = np.maximum(st[plan.prev[dma]] + plan.lat[dma], en[plan.prev[dma]])
    wait = np.maximum(st - free, 0.0)
    wait[plan.elided] = 0.0
    return Timing(st, en[: plan.n], wait)


# Instructions from which a process loads the compiled core: loading numba and the cached machine code costs
# ~0.5 s CPU once per process, while the pure-Python passes take ~2-5 us per instruction. Once loaded, the
# core serves every size. Both give bit-identical results, so the switch never changes a timing.
COMPILED_FROM = 100_000


def compiled_core(n: int) -> ModuleType | None:
    """`device.core` for a plan of `n` instructions (module doc), or None: the pure-Python passes then run
    (small plans before the core or numba is loaded, or numba not installed)."""
    return load_compiled("nprof.device.core", n, COMPILED_FROM, loaded="numba")


def _one_pass(plan: Plan) -> bool:
    """True when one in-order pass is exact: no transfer can be slowed and triggers are not spaced."""
    return not _can_exceed_pool(plan) and plan.preset.dma_issue_gap_ns == 0


def python_schedule(plan: Plan, program: Program | None = None) -> Timing:
    """`schedule` computed by the pure-Python passes (the readable reference of the compiled core)."""
    if _one_pass(plan):
        start, end = python_list_schedule(plan)
    else:
        start, end = event_schedule(plan, program)
    return _timing(plan, np.asarray(start[: plan.n]), np.asarray(end))


def schedule(plan: Plan, program: Program | None = None) -> Timing:
    """Start/end/wait of every instruction of `plan` (see module doc); `program` names a stuck instruction."""
    core = compiled_core(plan.n)
    if core is None:
        return python_schedule(plan, program)
    return _compiled_schedule(core, plan, program)


def _stable(*arrays: np.ndarray) -> list[np.ndarray]:
    """`arrays` as the compiled core's one signature per pass takes them: C-contiguous and writable (a copy only
    of an array that is not, e.g. a read-only one read from a cached program's buffer). numba compiles a new
    specialization, seconds of CPU on a cold cache, for every new combination of layout and read-only flag."""
    return [np.require(a, requirements=("C", "W")) for a in arrays]


def _compiled_schedule(core: ModuleType, plan: Plan, program: Program | None) -> Timing:
    """`schedule` by the compiled core `core` (`device.core`)."""
    if _one_pass(plan):
        start, end = core.list_pass(*_stable(plan.order, plan.slot, plan.dur, plan.lat0, plan.lat1, plan.dep1,
                                             plan.deps_offsets, plan.deps_flat, plan.prev, plan.is_tr))  # fmt: skip
    else:
        offsets, flat, slot, dur, prev, pm, pl, is_dma = _stable(
            plan.deps_offsets, plan.deps_flat, plan.slot, plan.dur, plan.prev, plan.pm, plan.pl, plan.is_dma
        )
        e_off, e_succ, s_off, s_succ, count = core.wait_graph(offsets, flat, is_dma, prev, pm, pl)
        cap = cost.dma_pool_bandwidth(plan.preset) * 1e-9  # bytes per ns
        pooled = is_dma & (dur > 0)
        start, end, done = core.event_pass(
            slot, dur, *_stable(plan.lat1, plan.dep1), offsets, flat, prev, pm, pl, pooled,
            *_stable(plan.dma_rate), e_off, e_succ, s_off, s_succ, count, float(cap),
            float(plan.preset.dma_issue_gap_ns),
        )  # fmt: skip
        if done < plan.n:
            raise stuck_error(plan, program, count)
    return _timing(plan, start[: plan.n], end)


def warm_core() -> None:
    """Compile (or load from numba's on-disk cache) the compiled core's passes, both of them, with the one
    signature `schedule` calls each with, by scheduling an empty program on each path; nothing without numba."""
    core = compiled_core(COMPILED_FROM)
    if core is None:
        return
    from dataclasses import replace

    from nprof.arch.presets import get_preset
    from nprof.device.plan import build_plan

    preset = get_preset("trn1")
    empty = Program("warm-up", preset.name, (), ())
    for gap in (0.0, max(preset.dma_issue_gap_ns, 1.0)):  # the list pass (no spacing, no pool), the event pass
        _compiled_schedule(core, build_plan(empty, replace(preset, dma_issue_gap_ns=gap)), None)
