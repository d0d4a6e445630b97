"""Loads of graph inputs moved to the front of the program in the order the compute needs them.

Contract: every DMA takes a trigger slot (cost model: consecutive triggers `dma_issue_gap_ns` apart) and the
device triggers ready DMAs in program order, so a graph whose kernels load their inputs as they need them
triggers a large weight load behind the small loads of the kernels before it, and the compute waiting for the
weight waits for every slot ahead of it. `hoist_loads(program)` moves every DMA that depends on nothing (a load
of a graph input into an SBUF region no earlier instruction touched, so no dependency was recorded) to the
front, ordered by its latest start: the estimated start of its first consumer with every such load arrived at
time 0 (`nprof.compiler.balance.EngineClock`: engines in program order, the other DMAs' trigger gaps), less
its own duration (fixed latency and transfer, `nprof.arch.cost.instruction_ns`); ties in program order.
Every other instruction keeps its relative order and the dependency indices are renumbered. Measured on
`bench/compile.py`: MNIST MLP backward 11.2 -> 9.7 us (its 2.4 us weight-pack load was fourth in line),
nanoGPT backward 27.7 -> 26.8 us, forward 21.7 -> 21.8 us.

Exact: an instruction without dependencies reads nothing an earlier instruction writes and writes nothing an
earlier instruction reads or writes (the tracer records those as dependencies), so running it first changes
no value; what follows it keeps its order and its dependencies.

After list scheduling, two timed passes on those loads (each kept only when the device's timing model runs the
program strictly faster, within `SEARCH_WORK`): `merge_front_loads` merges runs of equally spaced loads of one
input into one DMA (`front_runs`, `merged_front`), and `search_loads` searches their trigger order.
"""

from __future__ import annotations

import dataclasses

from nprof.arch.cost import instruction_ns
from nprof.arch.isa import Instruction, Opcode, Space
from nprof.arch.presets import get_preset
from nprof.compiler.balance import EngineClock
from nprof.program.model import Program

ENABLED = True  # module switch (tests compare with the program order the kernels emitted)
MERGE_FRONT = True  # module switch of `merge_front_loads` (tests counting the DMAs of other passes turn it off)


def _movable(ins: Instruction) -> bool:
    return (ins.opcode is Opcode.DMA_DIRECT2D and not ins.deps and ins.ins[0].space is Space.HBM
            and ins.outs[0].space is not Space.HBM)  # fmt: skip


def hoist_loads(program: Program) -> Program:
    """`program` with its dependency-free input loads first, least slack first (see module doc)."""
    instructions = tuple(program.instructions)
    loads = [i for i, ins in enumerate(instructions) if _movable(ins)]
    if not ENABLED or not loads:
        return program
    preset = get_preset(program.preset)
    clock = EngineClock(preset)
    need = {i: float("inf") for i in loads}
    for i, ins in enumerate(instructions):
        if i in need:
            clock.arrived(i)
        else:
            clock.add(i, ins)
    for j, ins in enumerate(instructions):
        for d in ins.deps:
            if d in need:
                need[d] = min(need[d], clock.started(j))
    loads.sort(key=lambda i: (need[i] - instruction_ns(instructions[i], preset), i))
    moved = set(loads)
    order = loads + [i for i in range(len(instructions)) if i not in moved]
    if order == list(range(len(instructions))):
        return program
    new_index = {old: new for new, old in enumerate(order)}

    def renumbered(ins: Instruction) -> Instruction:
        deps = tuple(sorted(new_index[d] for d in ins.deps))
        return ins if deps == ins.deps else dataclasses.replace(ins, deps=deps)

    return dataclasses.replace(program, instructions=tuple(renumbered(instructions[i]) for i in order))


# instructions timed (evaluations x program size) each search of this module and `compiler.tailstage` may spend,
# at most `SEARCH_EVALS` programs: a timing costs ~2 ms CPU per 300 instructions (nanoGPT forward), so the
# resnet-shaped CNN's 3851-instruction backward gets 12 timings a pass
SEARCH_WORK = 50_000
SEARCH_EVALS = 48


def search_loads(program: Program) -> Program:
    """`program` with its dependency-free input loads first, in the order of a local search (one load moved to
    another place in the order at a time, kept when the device's timing model, `nprof.device.schedule`, runs
    the program strictly faster; first improvement, until no move improves or the budget is spent); `program`
    itself when no order is faster. The device triggers ready DMAs in order of readiness, ties in program order,
    so the loads' order is their trigger order, and each trigger waits `dma_issue_gap_ns` for the one before:
    the estimate `hoist_loads` orders by counts the engines but not the other loads' triggers (nanoGPT forward:
    its layer-norm weights, needed second, were the fourth load). Exact as `hoist_loads` (module doc)."""
    from nprof.compiler.listsched import makespan, reordered

    instructions = tuple(program.instructions)
    loads = [i for i, ins in enumerate(instructions) if _movable(ins)]
    if not ENABLED or len(loads) < 2:
        return program
    budget = min(SEARCH_EVALS, SEARCH_WORK // max(len(instructions), 1))
    preset = get_preset(program.preset)
    moved = set(loads)
    rest = [i for i in range(len(instructions)) if i not in moved]
    order, best_ns = list(loads), makespan(program, preset)
    spent = 0
    while spent < budget:
        found = _better_move(order, best_ns, lambda o: makespan(reordered(program, o + rest), preset), budget - spent)
        spent += found[2]
        if found[0] is None:
            break
        order, best_ns = found[0], found[1]
    return program if order == loads else reordered(program, order + rest)


def _better_move(order: list[int], best_ns: float, timed: object, budget: int) -> tuple[list[int] | None, float, int]:
    """(the first order, one load of `order` moved to an earlier place, that `timed` runs faster than `best_ns`;
    its time; orders timed), or (None, best_ns, orders timed) when none is within `budget`."""
    spent = 0
    for a in range(1, len(order)):
        for b in range(a):
            if spent >= budget:
                return None, best_ns, spent
            candidate = [*order[:b], order[a], *order[b:a], *order[a + 1 :]]
            ns = timed(candidate)  # type: ignore[operator]
            spent += 1
            if ns < best_ns:
                return candidate, ns, spent
    return None, best_ns, spent


def _front_key(ins: Instruction) -> tuple[object, ...]:
    hbm, chip = ins.ins[0], ins.outs[0]
    return (hbm.tensor, hbm.dtype, hbm.partitions, hbm.partition_stride, hbm.free, chip.space, chip.dtype,
            chip.partitions, chip.partition_start, chip.free, ins.attrs)  # fmt: skip


def front_runs(program: Program) -> list[list[int]]:
    """Runs of at least two dependency-free input loads (`_movable`) of the same pattern from one HBM tensor,
    ordered by SBUF offset, at equally spaced HBM offsets and SBUF byte offsets (both steps positive, the SBUF
    step a whole number of elements), at most `dmamerge.MAX_FREE_DIMS` free dimensions once merged."""
    from nprof.arch.isa import ITEMSIZE
    from nprof.compiler.dmamerge import MAX_FREE_DIMS

    groups: dict[tuple[object, ...], list[int]] = {}
    for i, ins in enumerate(program.instructions):
        if _movable(ins) and len(ins.ins) == 1 and len(ins.outs) == 1 and len(ins.outs[0].free) < MAX_FREE_DIMS:
            groups.setdefault(_front_key(ins), []).append(i)
    runs: list[list[int]] = []
    for members in groups.values():
        members.sort(key=lambda i: program.instructions[i].outs[0].offset)
        run = members[:1]
        for i in members[1:]:
            dh, ds = _step(program, run[-1], i)
            steady = dh > 0 and ds > 0 and ds % ITEMSIZE[program.instructions[i].outs[0].dtype] == 0
            if steady and (len(run) == 1 or (dh, ds) == _step(program, run[0], run[1])):
                run.append(i)
                continue
            if len(run) >= 2:
                runs.append(run)
            run = [i]
        if len(run) >= 2:
            runs.append(run)
    return runs


def _step(program: Program, a: int, b: int) -> tuple[int, int]:
    x, y = program.instructions[a], program.instructions[b]
    return y.ins[0].offset - x.ins[0].offset, y.outs[0].offset - x.outs[0].offset


def merged_front(program: Program, run: list[int]) -> Program:
    """`program` with the loads `run` (`front_runs`) replaced by one DMA with one more free dimension,
    outermost, at the earliest member's place: element k * N + e of it is element e of member k on both sides.
    Exact: the members depend on nothing and every user of a member comes after the earliest member."""
    from nprof.arch.isa import ITEMSIZE

    ins = program.instructions
    first, second = ins[run[0]], ins[run[1]]
    k = len(run)
    hbm, chip = first.ins[0], first.outs[0]
    dh, ds = second.ins[0].offset - hbm.offset, second.outs[0].offset - chip.offset
    src = dataclasses.replace(hbm, free=((dh, k), *hbm.free))
    dst = dataclasses.replace(chip, free=((ds // ITEMSIZE[chip.dtype], k), *chip.free))
    load = dataclasses.replace(first, ins=(src,), outs=(dst,))
    at, members = min(run), set(run)
    new_index: dict[int, int] = {}
    out: list[Instruction] = []
    for i, x in enumerate(ins):
        if i == at:
            out.append(load)
        if i not in members:
            out.append(x)
        new_index[i] = len(out) - 1
    for m in members:
        new_index[m] = new_index[at]
    fixed = [x if not x.deps else dataclasses.replace(x, deps=tuple(sorted({new_index[d] for d in x.deps})))
             for x in out]  # fmt: skip
    return dataclasses.replace(program, instructions=tuple(fixed))


def merge_front_loads(program: Program) -> Program:
    """`program` with each run of `front_runs` merged into one load when the device's timing model runs the
    program strictly faster with it (runs tried one at a time, in program order, each on the best so far):
    one trigger slot and one fixed latency instead of several, the consumers of the first member waiting for
    all of them (MNIST MLP backward: the log-probabilities and their gradient, neighbours in the small-input
    pack)."""
    from nprof.compiler.listsched import makespan

    if not (ENABLED and MERGE_FRONT):
        return program
    runs = front_runs(program)
    budget = min(SEARCH_EVALS, SEARCH_WORK // max(len(program.instructions), 1))
    if not runs or budget < 2:
        return program
    preset = get_preset(program.preset)
    best, best_ns = program, makespan(program, preset)
    loads = [[program.instructions[i] for i in run] for run in runs]  # dependency-free: kept as they are
    for members in loads[: budget - 1]:
        where = {id(x): i for i, x in enumerate(best.instructions)}
        candidate = merged_front(best, [where[id(x)] for x in members])
        ns = makespan(candidate, preset)
        if ns < best_ns:
            best, best_ns = candidate, ns
    return best
