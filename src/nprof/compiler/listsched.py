"""The program order of the engines' work chosen by a list scheduler, not by the order the kernels emitted it.

Contract: the device runs every engine's instructions in program order (`nprof.device.schedule`, window 1), so in
the order the kernels emitted them an engine waits for its next instruction's operands while later, independent work
on it is ready: a convolution's weight preparation (the block-diagonal stationaries of `kernels.conv_spread`, which
need only the weights) waits on GpSimdE behind the previous layer's batch-norm chain, which waits for that layer's
matmuls; a reload waits behind input loads it does not need. `list_schedule(program)` reorders the program. A list
scheduler follows a cost-model clock (`nprof.arch.cost`: durations, dependency latencies) and, each time an engine
is free, starts on VectorE, ScalarE or GpSimdE a ready instruction (dependencies estimated done): the first in
program order, or the one leading the longest estimated path to the program's end (ties: program order); when none
is ready, the one ready first. DMAs are triggered as the device triggers them: in order of readiness,
`dma_issue_gap_ns` apart, a queue's transfers a fixed latency apart and in order (or, a second clock, without the
queues and in program order among the DMAs ready by a trigger slot). TensorE, Sync and CC keep their program order
among themselves (TensorE's weight loads pair with the matmul after them), interleaved with the rest by the same
clock. A candidate order is the order in which the scheduler started the instructions. The clock is an estimate (no
DMA pool sharing), so `list_schedule` keeps, of the kernel order and two candidates (program-order priority, each
DMA clock), the one the device's own timing model (`nprof.device.schedule`, what `simulate` reports, a fraction of a
second per graph) runs fastest; the kernel order on ties. A program with collectives keeps the kernel order.

Measured on `bench/compile.py` (simulated us, kernel order -> scheduled): resnet-shaped CNN forward 218.5 ->
208.8, backward 308.8 -> 275.8; resnet18 forward 456.8 -> 425.8, backward 699.5 -> 662.8; nanoGPT backward
26.8 -> 24.3.

Exact: every candidate is a topological order of the recorded dependencies (an instruction is placed only after
all of them). The tracer records every read-after-write, write-after-read and write-after-write conflict as a
dependency or as a chain of them (`nprof.nki.deps`: a write waits for the writers and readers of what it
overlaps, and replaces what it covers), so every pair of conflicting instructions keeps its order and every
value is computed from the same operands as before.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any

from nprof.arch.cost import dependency_latency_ns, instruction_ns
from nprof.arch.isa import Engine, Instruction
from nprof.arch.presets import Preset, get_preset
from nprof.device.columns import Columns, attach_columns, instruction_columns
from nprof.device.columns_order import permuted_columns
from nprof.device.plan import adopt_plan
from nprof.program.model import Program

ENABLED = True  # module switch (tests compare with the order the kernels emitted)
REORDERABLE = frozenset({Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD})


def _latency(ins: Instruction, dep: Instruction, preset: Preset) -> float:
    """The estimated time between `dep`'s end and the start of `ins` that depends on it."""
    if ins.engine is Engine.DMA or (ins.engine is Engine.TENSOR and dep.engine is Engine.TENSOR):
        return 0.0  # a DMA's latency is inside its duration; TensorE pipelines its own results
    return dependency_latency_ns(ins.engine, preset)


def _priorities(instructions: tuple[Instruction, ...], durations: list[float], preset: Preset) -> list[float]:
    """Per instruction, the longest estimated path from its start to the end of the program (its own duration,
    then the latency and path of its longest successor)."""
    n = len(instructions)
    level = [0.0] * n
    tail = [0.0] * n  # the longest latency + level among the successors seen so far
    for i in range(n - 1, -1, -1):
        ins = instructions[i]
        level[i] = durations[i] + tail[i]
        for d in ins.deps:
            tail[d] = max(tail[d], _latency(ins, instructions[d], preset) + level[i])
    return level


class _Lanes:
    """Per engine the instructions waiting to start: in-order engines a FIFO of program order, the reorderable
    ones a heap by estimated ready time and a heap by priority of those ready by the engine's free time."""

    def __init__(self, instructions: tuple[Instruction, ...], level: list[float]) -> None:
        self.level = level
        self.fifo: dict[Engine, list[int]] = {}
        for i, ins in enumerate(instructions):
            if ins.engine not in REORDERABLE and ins.engine is not Engine.DMA:
                self.fifo.setdefault(ins.engine, []).append(i)
        for queue in self.fifo.values():
            queue.reverse()  # popped from the end
        self.pending: dict[Engine, list[tuple[float, float, int]]] = {e: [] for e in REORDERABLE}
        self.ready: dict[Engine, list[tuple[float, int]]] = {e: [] for e in REORDERABLE}
        self.released: dict[int, float] = {}  # instruction -> estimated ready time (all dependencies placed)

    def release(self, i: int, engine: Engine, at: float) -> None:
        self.released[i] = at
        if engine in REORDERABLE:
            heapq.heappush(self.pending[engine], (at, -self.level[i], i))

    def candidate(self, engine: Engine, free: float) -> tuple[float, float, int] | None:
        """(start, -priority, instruction) of what `engine` (free at `free`) would start next, or None."""
        if engine not in REORDERABLE:
            queue = self.fifo.get(engine)
            if not queue or queue[-1] not in self.released:
                return None
            i = queue[-1]
            return max(free, self.released[i]), -self.level[i], i
        pending, ready = self.pending[engine], self.ready[engine]
        while pending and pending[0][0] <= free:
            _, key, i = heapq.heappop(pending)
            heapq.heappush(ready, (key, i))
        if ready:
            return free, ready[0][0], ready[0][1]
        if pending:
            return pending[0]
        return None

    def take(self, engine: Engine, i: int) -> None:
        if engine not in REORDERABLE:
            self.fifo[engine].pop()
        elif self.ready[engine] and self.ready[engine][0][1] == i:
            heapq.heappop(self.ready[engine])
        else:
            heapq.heappop(self.pending[engine])


class _DmaLane:
    """The DMAs waiting for their trigger, as the device triggers them (`nprof.device.schedule`): in order of
    readiness, `dma_issue_gap_ns` apart, where a DMA is ready once its dependencies ended and its queue took it:
    a queue's transfers start a fixed latency apart and in order, so its next trigger is at least the latency
    after its last one and at most the latency before that one's transfer ends."""

    def __init__(self, instructions: tuple[Instruction, ...], preset: Preset, queues: bool) -> None:
        self.queues = queues  # False: the queues are not modelled (any DMA may be triggered once ready)
        self.queue_of = {i: ins.queue or 0 for i, ins in enumerate(instructions) if ins.engine is Engine.DMA}
        self.waiting: dict[int, list[tuple[float, int]]] = {q: [] for q in set(self.queue_of.values())}
        self.queue_free = dict.fromkeys(self.waiting, 0.0)
        self.latency = preset.dma_latency_ns
        self.gap = preset.dma_issue_gap_ns
        self.last_trigger = -self.gap

    def release(self, i: int, at: float) -> None:
        heapq.heappush(self.waiting[self.queue_of[i]], (at, i))

    def candidate(self) -> tuple[float, float, int] | None:
        """(trigger, readiness or program index, DMA) of the next DMA triggered, or None."""
        best = None
        for q, heap in self.waiting.items():
            if heap:
                ready = max(heap[0][0], self.queue_free[q])
                key = ready if self.queues else float(heap[0][1])  # without queues: program order among the ready
                found = (max(ready, self.last_trigger + self.gap), key, heap[0][1])
                best = found if best is None or found < best else best
        return best

    def take(self, i: int, trigger: float, end: float) -> None:
        q = self.queue_of[i]
        heapq.heappop(self.waiting[q])
        self.last_trigger = trigger
        if self.queues:
            self.queue_free[q] = max(trigger + self.latency, end - self.latency)


def schedule_order(instructions: tuple[Instruction, ...], preset: Preset, by_path: bool = False,
                   queues: bool = True, durations: list[float] | None = None) -> list[int]:  # fmt: skip
    """The program indices in the order the list scheduler of the module doc starts them: among the ready
    instructions of an engine the first in program order, or (`by_path`) the one leading the longest path;
    `queues`: the clock holds each DMA queue's transfers a fixed latency apart and in order; `durations`: each
    instruction's `instruction_ns` on `preset` when the caller has them."""
    n = len(instructions)
    if durations is None:
        durations = [instruction_ns(ins, preset) for ins in instructions]
    level = _priorities(instructions, durations, preset) if by_path else [float(-i) for i in range(n)]
    lanes, dmas = _Lanes(instructions, level), _DmaLane(instructions, preset, queues)
    waiting = [len(ins.deps) for ins in instructions]
    users: list[list[int]] = [[] for _ in range(n)]
    for i, ins in enumerate(instructions):
        for d in ins.deps:
            users[d].append(i)
    ready_at = [0.0] * n
    engines = [ins.engine for ins in instructions]
    latency = {e: 0.0 if e is Engine.DMA else dependency_latency_ns(e, preset) for e in set(engines)}  # `_latency`

    def release(i: int, at: float) -> None:
        if instructions[i].engine is Engine.DMA:
            dmas.release(i, at)
        else:
            lanes.release(i, instructions[i].engine, at)

    for i, ins in enumerate(instructions):
        if not ins.deps:
            release(i, 0.0)
    free: dict[Engine, float] = {e: 0.0 for e in {ins.engine for ins in instructions} if e is not Engine.DMA}
    order: list[int] = []
    while len(order) < n:
        start, _, i, engine = _next(lanes, dmas, free)
        end = start + durations[i]
        if engine is Engine.DMA:
            dmas.take(i, start, end)
        else:
            lanes.take(engine, i)
            free[engine] = end
        order.append(i)
        tensor = engine is Engine.TENSOR
        for u in users[i]:  # `_latency` from a table (a 224x224 conv backward has ~40 dependencies an instruction)
            lat = 0.0 if tensor and engines[u] is Engine.TENSOR else latency[engines[u]]
            ready_at[u] = max(ready_at[u], end + lat)
            waiting[u] -= 1
            if waiting[u] == 0:
                release(u, ready_at[u])
    return order


def _next(lanes: _Lanes, dmas: _DmaLane, free: dict[Engine, float]) -> tuple[float, float, int, Engine]:
    """(start, key, instruction, engine) of the instruction that starts first (ties: key, then index)."""
    found = dmas.candidate()
    best = (*found, Engine.DMA) if found is not None else None
    for engine, at in free.items():
        found = lanes.candidate(engine, at)
        if found is not None and (best is None or found < best[:3]):
            best = (*found, engine)
    if best is None:
        raise AssertionError("list_schedule: no instruction can start (a dependency cycle)")
    return best


def list_schedule(program: Program) -> Program:
    """Of `program` and its orders by `schedule_order` (program-order priority, with and without the DMA queues),
    the one the device's timing model (`nprof.device.schedule`: the makespan `simulate` reports, without
    numerics or profile tables) runs fastest; the kernel order on ties (an order equal to one already timed is
    not timed again: it cannot be strictly faster). The program's instruction columns are made from its objects
    once; each candidate's are a permutation of them (`device.columns_order`), and the kept program carries its
    columns (`device.columns.attach_columns`: the file's table converts nothing) and, when an order was timed,
    the plan that timed it (`device.plan.adopt_plan`: its simulation does not build it again)."""
    instructions = tuple(program.instructions)
    if not ENABLED or not instructions or any(ins.engine is Engine.CC for ins in instructions):
        return program  # collectives: their timing needs the other ranks, the kernel order stays
    preset = get_preset(program.preset)
    cols = instruction_columns(instructions)
    durations = [instruction_ns(ins, preset) for ins in instructions]  # (both orders read them)
    best: tuple[list[int] | None, Columns] = (None, cols)
    best_ns, plans = None, [None]  # (the plan of the best order, once timed)
    tried = [list(range(len(instructions)))]  # orders timed (or the kernel order): the same order times the same
    for queues in (True, False):  # the longest-path priority won by under 0.1% where it won (resnet18 forward)
        order = schedule_order(instructions, preset, False, queues, durations)
        if order in tried:
            continue  # not strictly faster than itself: the choice stays
        tried.append(order)
        candidate = permuted_columns(cols, order, [instructions[i].attrs for i in order])
        if best_ns is None:
            best_ns, plans[0] = _timed(cols, preset, program.name)
        ns, plan = _timed(candidate, preset, program.name)
        if ns < best_ns:
            best, best_ns, plans[0] = (order, candidate), ns, plan
    kept = dataclasses.replace(program) if best[0] is None else _reordered(program, best[0], best[1])
    attach_columns(kept, best[1])
    if plans[0] is not None:  # the simulation of the kept program reads it (`device.plan.plan_for`)
        adopt_plan(kept, preset, plans[0])
    return kept


def makespan(program: Program, preset: Preset) -> float:
    """The simulated time of `program` on `preset` (`nprof.device.schedule`; what `simulate` reports, rounded)."""
    from nprof.device.plan import build_plan
    from nprof.device.schedule import schedule

    return float(schedule(build_plan(program, preset), program).makespan)


def _timed(cols: Columns, preset: Preset, name: str) -> tuple[float, Any]:
    """(`makespan`, plan) of the program of instruction columns `cols` (named `name`)."""
    from nprof.device.plan import plan_from_columns
    from nprof.device.schedule import schedule

    plan = plan_from_columns(cols, preset, name)
    return float(schedule(plan).makespan), plan


def reordered(program: Program, order: list[int]) -> Program:
    """`program` with its instructions in `order` (old indices) and the dependency indices renumbered."""
    instructions = program.instructions
    new_index = {old: new for new, old in enumerate(order)}

    def renumbered(ins: Instruction) -> Instruction:
        deps = tuple(sorted(new_index[d] for d in ins.deps))
        return ins if deps == ins.deps else dataclasses.replace(ins, deps=deps)

    return dataclasses.replace(program, instructions=tuple(renumbered(instructions[i]) for i in order))


def _reordered(program: Program, order: list[int], cols: Columns) -> Program:
    """`reordered(program, order)` with the renumbered, sorted dependency lists read from `cols`, the columns of
    the reordered program (`permuted_columns`); an instruction whose list is unchanged is kept as it is."""
    instructions = program.instructions
    deps, at = cols.deps_flat.tolist(), cols.deps_offsets.tolist()
    out = []
    for j, i in enumerate(order):
        ins = instructions[i]
        new = tuple(deps[at[j] : at[j + 1]])
        out.append(ins if new == ins.deps else Instruction(ins.engine, ins.opcode, ins.outs, ins.ins, ins.attrs, new,
                                                           ins.queue, ins.source, ins.layer, ins.hlo_name))  # fmt: skip
    return dataclasses.replace(program, instructions=tuple(out))
