"""Invariants of the timing model on random programs (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset
from nprof.device import simulate
from nprof.device.plan import SLOT_LD, SLOT_MM, build_plan
from nprof.device.schedule import schedule
from nprof.program.model import Program, TensorDecl

KINDS = ("dma", "act", "tt", "ld", "mm", "tr", "iota")


def _instruction(kind: str, n: int, queue: int, deps: tuple[int, ...]) -> Instruction:
    sb = Access(Space.SBUF, "t", "bfloat16", 0, 128, ((1, n),))
    if kind == "dma":
        h = Access(Space.HBM, "x", "bfloat16", 0, 128, ((1, n),), 0, n)
        return Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (sb,), (h,), deps=deps, queue=queue)
    if kind == "act":
        return Instruction(Engine.SCALAR, Opcode.ACTIVATE, (sb,), (sb,), attrs(func="exp"), deps)
    if kind == "tt":
        return Instruction(Engine.VECTOR, Opcode.TENSOR_TENSOR, (sb,), (sb, sb), attrs(op="add"), deps)
    if kind == "ld":
        w = Access(Space.SBUF, "w", "bfloat16", 0, 128, ((1, 128),))
        return Instruction(Engine.TENSOR, Opcode.LDWEIGHTS, (), (w,), deps=deps)
    if kind == "mm":
        w = Access(Space.SBUF, "w", "bfloat16", 0, 128, ((1, 128),))
        mv = Access(Space.SBUF, "t", "bfloat16", 0, 128, ((1, min(n, 512)),))
        ps = Access(Space.PSUM, "p", "float32", 0, 128, ((1, min(n, 512)),))
        return Instruction(Engine.TENSOR, Opcode.MATMUL, (ps,), (w, mv), attrs(accumulate=True), deps)
    if kind == "tr":
        src = Access(Space.SBUF, "t", "bfloat16", 0, 64, ((1, 32),))
        out = Access(Space.PSUM, "p", "float32", 0, 32, ((1, 64),))
        return Instruction(Engine.TENSOR, Opcode.TRANSPOSE, (out,), (src,), deps=deps)
    return Instruction(Engine.GPSIMD, Opcode.IOTA, (sb,), (), attrs(steps=(1,)), deps)


@st.composite
def programs(draw: st.DrawFn) -> Program:
    count = draw(st.integers(1, 40))
    instrs = []
    for i in range(count):
        kind = draw(st.sampled_from(KINDS))
        n = draw(st.sampled_from((1, 16, 128, 512, 2048)))
        deps = tuple(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3))))) if i else ()
        instrs.append(_instruction(kind, n, draw(st.integers(0, 15)), deps))
    return Program("rand", "trn1", (TensorDecl("x", (128, 2048), "bfloat16", "input"),), tuple(instrs))


@settings(max_examples=60, deadline=None)
@given(programs(), st.sampled_from([None, 17e9, 100e9]))
def test_slots_never_overlap_and_dependencies_are_respected(program: Program, hbm: float | None) -> None:
    preset = get_preset("trn1") if hbm is None else replace(get_preset("trn1"), hbm_bandwidth=hbm)
    plan = build_plan(program, preset)
    t = schedule(plan)
    last_end: dict[int, float] = {}  # when each slot became free, as the scheduler sees it
    last_dma_start: dict[int, float] = {}  # DMA queues: when each queue's descriptor stage took its last DMA
    for i in range(plan.n):
        s = plan.slot[i]
        assert t.start[i] >= 0 and t.end[i] >= t.start[i] + plan.dur[i] - 1e-6  # sharing only slows
        if plan.is_dma[i]:  # transfers of a queue run in order, starting at least the fixed latency apart
            free = max(last_dma_start.get(s, -plan.lat[i]) + plan.lat[i], last_end.get(s, 0.0))
            assert t.start[i] >= free - 1e-9
            assert abs(t.wait[i] - max(0.0, t.start[i] - free)) < 1e-6 or s not in last_dma_start
            last_dma_start[s] = t.start[i]
        else:  # one at a time, in the engine's order (program order or the compiler's window: plan.prev)
            p = int(plan.prev[i])
            prev = t.end[p] if p < plan.n else 0.0
            assert t.start[i] >= prev - 1e-9
            assert abs(t.wait[i] - max(0.0, t.start[i] - prev)) < 1e-6 or plan.elided[i]
        if i in plan.transposes:
            assert t.start[i] >= last_end.get(SLOT_LD, 0.0) - 1e-9
            last_end[SLOT_LD] = t.end[i]
        last_end[s] = t.end[i]
        tensor_only = s <= SLOT_MM
        for d in plan.deps[i]:
            gap = 0.0 if tensor_only and plan.slot[d] <= SLOT_MM else plan.lat[i]
            assert t.start[i] >= t.end[d] + gap - 1e-6
        assert t.start[i] >= plan.lat0[i] - 1e-9  # a DMA never starts before its fixed latency


@settings(max_examples=25, deadline=None)
@given(programs())
def test_profile_matches_the_schedule_and_is_deterministic(program: Program) -> None:
    a = simulate(program, numerics=False)
    b = simulate(program, numerics=False)
    assert a.profile.instructions.equals(b.profile.instructions) and a.profile.dma.equals(b.profile.dma)
    ids = sorted(a.profile.instructions.column("id").to_pylist() + a.profile.dma.column("id").to_pylist())
    assert ids == list(range(len(program.instructions)))
    ends = [r["ts"] + r["duration"] for t in (a.profile.instructions, a.profile.dma) for r in t.to_pylist()]
    assert a.latencies_ns == (max(ends),)
    assert all(r["wait_ns"] >= 0 for r in a.profile.instructions.to_pylist())
