"""The lowering's speed-ups produce exactly what the plain code produced: `listsched.list_schedule` (an order already
timed is not timed again; candidates timed from permuted columns; spill/reload marks put on before it),
`balance.EngineClock` (the dependencies' latest end and the engine cycles computed once per choice) and
`extents.translate_meet` (memoised on the dims and the offset difference), each held to a plain reference on random
inputs, and the three together on zoo graphs (instruction by instruction)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from nprof.arch.cost import dependency_latency_ns, instruction_ns
from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space
from nprof.arch.presets import get_preset
from nprof.compiler import balance, extents, listsched
from nprof.compiler.balance import EngineClock
from nprof.device.columns import attached_columns, instruction_columns
from nprof.device.plan import build_plan, plan_for
from nprof.program.model import Program, TensorDecl
from tests.device.test_columns_order import assert_same_columns
from tests.device.test_plan import _assert_same_plan


# ----- plain references (the code before the speed-ups) --------------------------------------------------------
def plain_list_schedule(program: Program) -> Program:
    """`list_schedule` timing every candidate order that differs from the kernel order."""
    instructions = tuple(program.instructions)
    if not instructions or any(ins.engine is Engine.CC for ins in instructions):
        return program
    preset = get_preset(program.preset)
    best, best_ns = program, None
    for queues in (True, False):
        order = listsched.schedule_order(instructions, preset, False, queues)
        if order == list(range(len(instructions))):
            continue
        candidate = listsched.reordered(program, order)
        if best_ns is None:
            best_ns = listsched.makespan(program, preset)
        ns = listsched.makespan(candidate, preset)
        if ns < best_ns:
            best, best_ns = candidate, ns
    return best


def plain_schedule_then_mark(program: Program) -> Program:
    """The order of the passes before: `plain_list_schedule` of the program without its spill/reload marks, the
    marks put back after (`emit.build` now marks first: the scheduler reads no mark)."""
    from nprof.compiler import emit

    bare = tuple(replace(ins, attrs=tuple(a for a in ins.attrs if a[0] not in ("spill", "reload")))
                 for ins in program.instructions)  # fmt: skip
    scheduled = plain_list_schedule(replace(program, instructions=bare))
    internal = {t.name for t in program.tensors if t.kind == "internal"}
    return replace(scheduled, instructions=tuple(emit._mark_spills(ins, internal) for ins in scheduled.instructions))


class PlainClock(EngineClock):
    """`EngineClock` with its dependencies' end computed per engine asked, as a list (the code before)."""

    def _finish(self, ins: Instruction, engine: Engine, deps_end: float | bool | None = False) -> tuple[float, float]:
        lat = dependency_latency_ns(engine, self.preset) if engine is not Engine.DMA else 0.0
        ends = [self._end[d] for d in ins.deps if d < len(self._end)]
        start = max(self._free.get(engine, 0.0), max(ends, default=0.0) + (lat if ends else 0.0))
        if engine is Engine.DMA:
            start = max(start, self._last_trigger + self.preset.dma_issue_gap_ns)
        moved = ins if ins.engine is engine else balance._on(ins, Engine.VECTOR if engine is Engine.GPSIMD else engine)
        return start, start + instruction_ns(moved, self.preset)

    def choose(self, ins: Instruction) -> Engine:
        options = balance.candidates(ins)
        if len(options) < 2:
            return ins.engine
        return min(options, key=lambda e: (self._finish(ins, e)[1], e is not ins.engine))


# ----- random programs ------------------------------------------------------------------------------------------
def _sbuf(name: str, cols: int) -> Access:
    return Access(Space.SBUF, name, "float32", 0, 128, ((1, cols),), 0, cols)


def random_program(seed: int, n: int = 60) -> Program:
    """Instructions on random engines with random backward dependencies (timing only: placeholder operands);
    some seeds give DMAs only on one queue, so both candidate orders are often equal."""
    rng = random.Random(seed)
    engines = [Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.TENSOR, Engine.DMA]
    queues = rng.choice((1, 4))
    ins = []
    for i in range(n):
        engine = rng.choice(engines)
        deps = tuple(sorted(rng.sample(range(i), min(i, rng.randint(0, 3)))))
        cols = rng.choice((8, 64, 512))
        out, src = _sbuf(f"t{i}", cols), _sbuf(f"s{i}", cols)
        if engine is Engine.DMA:
            hbm = Access(Space.HBM, "x", "float32", 0, 128, ((1, 8),), 0, 8)
            ins.append(Instruction(engine, Opcode.DMA_DIRECT2D, (_sbuf(f"t{i}", 8),), (hbm,), queue=i % queues,
                                   deps=deps))  # fmt: skip
        elif engine is Engine.TENSOR:
            ins.append(Instruction(engine, Opcode.TRANSPOSE, (out,), (src,), deps=deps))
        else:
            ins.append(Instruction(engine, Opcode.TENSOR_COPY, (out,), (src,), deps=deps))
    return Program("r", "trn1", (TensorDecl("x", (128 * 8,), "float32", "input"),), tuple(ins))


@pytest.mark.parametrize("seed", range(60))  # seeds 38, 42: the no-queue order wins; ~40%: both equal
def test_list_schedule_is_the_plain_one_on_random_programs(seed: int) -> None:
    program = random_program(seed, n=random.Random(seed).choice((5, 20, 60)))
    fast = listsched.list_schedule(program)
    assert fast.instructions == plain_list_schedule(program).instructions
    attached = attached_columns(fast)  # the kept program's columns and plan: those of its objects
    assert attached is not None
    assert_same_columns(attached, instruction_columns(fast.instructions), f"seed {seed}")
    preset = get_preset(program.preset)
    _assert_same_plan(plan_for(fast, preset), build_plan(replace(fast), preset), f"seed {seed}")


@pytest.mark.parametrize("seed", range(10))
def test_the_engine_clock_chooses_and_estimates_as_the_plain_one(seed: int) -> None:
    """Random instructions (some with dependencies on instructions not appended to the clock), chosen and
    added in turn: the same engines and the same start and end estimates."""
    rng = random.Random(seed)
    preset = get_preset("trn1")
    fast, plain = EngineClock(preset), PlainClock(preset)
    program = random_program(seed, n=80)
    index = 0
    for ins in program.instructions:
        index += rng.choice((1, 1, 1, 2))  # a gap: an instruction appended without the clock
        ins = Instruction(ins.engine, ins.opcode, ins.outs, ins.ins, ins.attrs,
                          tuple(d for d in range(index) if rng.random() < 0.1) + (index + 3,) * rng.randint(0, 1),
                          ins.queue)  # fmt: skip
        chosen = fast.choose(ins)
        assert chosen == plain.choose(ins)
        placed = ins if chosen is ins.engine else balance._on(ins, chosen)
        fast.add(index, placed)
        plain.add(index, placed)
    assert fast._start == plain._start and fast._end == plain._end


def test_translate_meet_is_the_unmemoised_search() -> None:
    """Random pairs of same-dims patterns (repeated offset differences included): the memoised answer is the
    search's."""
    rng = random.Random(0)
    for _ in range(3000):
        free = tuple((rng.choice((1, 3, 7, 16)), rng.randint(1, 6)) for _ in range(rng.randint(1, 2)))
        parts, pstride = rng.randint(1, 4), rng.choice((0, 5, 32, 64))
        a = Access(Space.HBM, "t", "float32", rng.randint(0, 200), parts, free, 0, pstride)
        b = Access(Space.HBM, "t", "float32", rng.randint(0, 200), parts, free, 0, pstride)
        assert extents.translate_meet(a, b) == extents.shifted_meet(parts, pstride, free, a.offset - b.offset)


@pytest.mark.parametrize("name", ["vit-conv", "nanogpt"])
def test_zoo_graphs_are_the_plain_passes_programs(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each graph of a training step lowered with the three plain references patched in, and as shipped:
    the same programs, instruction by instruction."""
    from nprof.compiler import emit, fusion
    from tests.compiler.test_columns_zoo import MODELS, _lowered

    with monkeypatch.context() as patch:
        patch.setattr(emit, "list_schedule", plain_schedule_then_mark)
        patch.setattr(fusion, "EngineClock", PlainClock)
        patch.setattr(extents, "translate_meet", _plain_translate_meet)
        plain = _lowered(MODELS[name], patch, tmp_path / "plain")
    fast = _lowered(MODELS[name], monkeypatch, tmp_path / "fast")
    assert len(fast) >= 2 and len(fast) == len(plain)
    for mine, ref in zip(fast, plain, strict=True):
        assert mine.instructions == ref.instructions, mine.name


def _plain_translate_meet(a: Access, b: Access) -> bool | None:
    if (a.partitions, a.partition_stride, a.free) != (b.partitions, b.partition_stride, b.free):
        return None
    return extents.shifted_meet(a.partitions, a.partition_stride, a.free, a.offset - b.offset)
