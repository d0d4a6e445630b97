"""DMAs that move equally spaced tiles between one HBM tensor and SBUF merged into one DMA of one more dimension.

Contract: every DMA takes a trigger slot (cost model: consecutive triggers `dma_issue_gap_ns` apart, on any
queue) and a fixed latency, and the kernels move a tensor tile by tile: a weight in per-channel-block loads, an
activation in per-block stores. `merge_dmas(program)` finds *runs* of DMAs (in program order) that copy the same
pattern between the same HBM tensor and SBUF — same direction, dtypes, partitions, partition stride, free
pattern, layer and graph node, no attributes — at HBM offsets h0 + k*dh and SBUF byte offsets s0 + k*ds
(dh, ds > 0, ds a whole number of elements), and replaces each run by one DMA whose two access patterns have
one more free dimension, outermost: (dh, K) on the HBM side, (ds / itemsize, K) on the SBUF side. Element k*N
+ e of the merged transfer (N elements per member) is element e of member k on both sides, so it moves exactly
the bytes the members moved. A run keeps at most `MAX_FREE_DIMS` free dimensions (AWS, NKI Access Patterns
deep dive, "Hardware Capability": the access logic "supports accessing elements from up to four-dimensional
arrays" within a partition), only on-chip sides of at least `MIN_PARTITIONS` partitions (a transfer spreads
over one DMA engine per 8 partitions, `nprof.arch.cost.dma_engines`: merged, narrower DMAs would lose the
engines the separate ones used in parallel), and only while the merged transfer alone takes no longer than
one fixed DMA latency (`dma_latency_ns`): a queue runs its transfers in order, and a longer merged transfer
holds up the DMAs behind it on its queue by more than the triggers it saves. The merged DMA keeps the first
member's queue and source line.

Only stores merge by default (`MERGE_LOADS`): a merged load makes the consumer of its first tile wait for
every tile, and the kernels consume a weight's tiles one matmul after another. Measured (`bench/compile.py`,
simulated, cost model v3): resnet-shaped CNN forward 199.0 -> 197.0 us; resnet18 forward 426.0 -> 424.6 us,
backward 662.8 -> 662.3 us; MNIST MLP and nanoGPT have no runs. Loads merged too: resnet18 backward 663.3 us;
without the latency cap (every run merged): resnet18 forward 483.2 us, its merged 2.4-4.7 MB weight loads
holding up the small DMAs queued behind them. The trigger gap is not what these steps wait for:
`bench/dma_sensitivity.py` times the same programs with `dma_issue_gap_ns` set to 0 (resnet18 418.4 + 651.8
us, nanoGPT 18.7 + 23.8 us), an upper bound of what fewer DMAs can gain.

Exact: the merged DMA is placed right after the latest instruction any member depends on (at the first
member's place when that is earlier), and a run only grows while that place is before every instruction that
depends on a member (not a member itself) and no member depends on another; merged DMAs placed around each
other that would still depend on a later instruction go back to their members. Then every recorded dependency
keeps its direction, and the tracer records every conflict as a dependency or a chain of them
(`nprof.nki.deps`), so every value is computed from the same operands; the merged DMA reads and writes exactly
the union of what its members did.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from nprof.arch.cost import dma_chunks, dma_partitions, dma_transfer_ns
from nprof.arch.isa import ITEMSIZE, Access, Instruction, Opcode, Space
from nprof.arch.presets import Preset, get_preset
from nprof.program.model import Program

ENABLED = True  # module switch (tests compare with the unmerged program)
MAX_FREE_DIMS = 4
MERGE_LOADS = False  # stores only by default (module doc: merged loads measured slower)
MIN_PARTITIONS = 121  # all 16 engines of a trn1/trn2 core (one per 8 partitions)


def _sides(ins: Instruction) -> tuple[Access, Access] | None:
    """(HBM side, SBUF side) of a plain HBM<->SBUF DMA that may merge, else None."""
    if ins.opcode is not Opcode.DMA_DIRECT2D or ins.attrs or len(ins.ins) != 1 or len(ins.outs) != 1:
        return None
    src, dst = ins.ins[0], ins.outs[0]
    if src.space is Space.HBM and dst.space is Space.SBUF and MERGE_LOADS:
        hbm, chip = src, dst
    elif dst.space is Space.HBM and src.space is Space.SBUF:
        hbm, chip = dst, src
    else:
        return None
    if chip.partitions < MIN_PARTITIONS or len(chip.free) >= MAX_FREE_DIMS or len(hbm.free) >= MAX_FREE_DIMS:
        return None
    return hbm, chip


def _key(ins: Instruction, hbm: Access, chip: Access) -> tuple[object, ...]:
    return (hbm is ins.ins[0], hbm.tensor, hbm.dtype, hbm.partitions, hbm.partition_stride, hbm.free,
            chip.dtype, chip.partitions, chip.partition_start, chip.free, ins.layer, ins.hlo_name)  # fmt: skip


class _Run:
    """Members of one growing run, with the bounds of where the merged DMA may go."""

    def __init__(self, i: int, sides: tuple[Access, Access], deps: tuple[int, ...]) -> None:
        self.members = [i]
        self.offsets = [(sides[0].offset, sides[1].offset)]
        self.latest_dep = max(deps, default=-1)

    def step(self) -> tuple[int, int]:
        (h0, s0), (h1, s1) = self.offsets[0], self.offsets[1]
        return h1 - h0, s1 - s0

    def fits(self, hbm: Access, chip: Access, itemsize: int) -> bool:
        h, s = self.offsets[-1]
        dh, ds = hbm.offset - h, chip.offset - s
        if len(self.members) > 1:
            return (dh, ds) == self.step()
        return dh > 0 and ds > 0 and ds % itemsize == 0


def _runs(instructions: tuple[Instruction, ...], users: list[list[int]], preset: Preset) -> list[list[int]]:
    """Runs of at least two DMAs that merge (see module doc), each in program order."""
    open_runs: dict[tuple[object, ...], _Run] = {}
    done: list[list[int]] = []
    for i, ins in enumerate(instructions):
        sides = _sides(ins)
        if sides is None:
            continue
        key = _key(ins, *sides)
        run = open_runs.get(key)
        if run is not None and _extends(run, i, ins, sides, users, preset):
            run.members.append(i)
            run.offsets.append((sides[0].offset, sides[1].offset))
            run.latest_dep = max(run.latest_dep, *ins.deps) if ins.deps else run.latest_dep
            continue
        if run is not None and len(run.members) > 1:
            done.append(run.members)
        open_runs[key] = _Run(i, sides, ins.deps)
    done += [run.members for run in open_runs.values() if len(run.members) > 1]
    return done


def _extends(
    run: _Run, i: int, ins: Instruction, sides: tuple[Access, Access], users: list[list[int]], preset: Preset
) -> bool:
    """May DMA `i` join `run`: equally spaced, the merged transfer no longer than a fixed latency, no dependency
    on a member, and a place for the merged DMA after every member's dependency and before every outside user
    of a member?"""
    if not run.fits(sides[0], sides[1], ITEMSIZE[sides[1].dtype]):
        return False
    if _transfer_ns(ins, len(run.members) + 1, preset) > preset.dma_latency_ns:
        return False
    members = set(run.members)
    if any(d in members for d in ins.deps):
        return False
    latest = max(run.latest_dep, max(ins.deps, default=-1))
    place = max(latest, run.members[0] - 1)  # the merged DMA goes right after this instruction
    first_user = min((u for m in (*run.members, i) for u in users[m] if u not in members and u != i), default=None)
    return first_user is None or first_user > place


def _transfer_ns(ins: Instruction, k: int, preset: Preset) -> float:
    """Transfer time alone (after the fixed latency) of `k` DMAs like `ins` merged into one."""
    src, dst = ins.ins[0], ins.outs[0]
    return dma_transfer_ns(k * dst.nbytes, k * dma_chunks(src, dst), preset, partitions=dma_partitions(src, dst))


def _merged(instructions: tuple[Instruction, ...], members: list[int]) -> Instruction:
    """One DMA moving what `members` (a run, see module doc) moved."""
    first = instructions[members[0]]
    hbm, chip = _sides(first)  # type: ignore[misc]
    hbm2, chip2 = _sides(instructions[members[1]])  # type: ignore[misc]
    k = len(members)
    hbm_m = dataclasses.replace(hbm, free=((hbm2.offset - hbm.offset, k), *hbm.free))
    chip_m = dataclasses.replace(chip, free=(((chip2.offset - chip.offset) // ITEMSIZE[chip.dtype], k), *chip.free))
    src, dst = (hbm_m, chip_m) if hbm is first.ins[0] else (chip_m, hbm_m)
    deps = sorted({d for m in members for d in instructions[m].deps})
    return dataclasses.replace(first, ins=(src,), outs=(dst,), deps=tuple(deps))


def merge_dmas(program: Program) -> Program:
    """`program` with its runs of equally spaced tile DMAs merged (see module doc)."""
    if not ENABLED:
        return program
    instructions = tuple(program.instructions)
    users: list[list[int]] = [[] for _ in instructions]
    for j, ins in enumerate(instructions):
        for d in ins.deps:
            users[d].append(j)
    runs = _runs(instructions, users, get_preset(program.preset))
    while runs:  # runs placed around each other may still conflict: those go back to their members
        rebuilt, bad = _rebuilt(instructions, runs)
        if not bad:
            return dataclasses.replace(program, instructions=rebuilt)
        runs = [members for r, members in enumerate(runs) if r not in bad]
    return program


def _rebuilt(instructions: tuple[Instruction, ...], runs: list[list[int]]) -> tuple[tuple[Instruction, ...], set[int]]:
    """The instructions with each run replaced by its merged DMA, placed as the module doc says, deps renumbered;
    and the runs whose merged DMA would depend on a later instruction or precede one of its dependencies."""
    after: dict[int, list[int]] = defaultdict(list)  # original index -> runs placed right after it (-1: first)
    merged_of: dict[int, int] = {}  # member -> its run's number
    for r, members in enumerate(runs):
        latest = max((d for m in members for d in instructions[m].deps), default=-1)
        after[max(latest, members[0] - 1)].append(r)
        for m in members:
            merged_of[m] = r
    order: list[tuple[str, int]] = [("run", r) for r in after.get(-1, ())]
    for i in range(len(instructions)):
        if i not in merged_of:
            order.append(("ins", i))
        order += [("run", r) for r in after.get(i, ())]
    position: dict[tuple[str, int], int] = {item: n for n, item in enumerate(order)}

    def new_index(old: int) -> int:
        r = merged_of.get(old)
        return position[("run", r)] if r is not None else position[("ins", old)]

    out: list[Instruction] = []
    bad: set[int] = set()
    for n, (kind, x) in enumerate(order):
        ins = _merged(instructions, runs[x]) if kind == "run" else instructions[x]
        deps = tuple(sorted({new_index(d) for d in ins.deps}))
        if deps and deps[-1] >= n:
            bad |= {merged_of[d] for d in ins.deps if d in merged_of and new_index(d) >= n}
            if kind == "run":
                bad.add(x)
        out.append(ins if deps == ins.deps else dataclasses.replace(ins, deps=deps))
    return tuple(out), bad
