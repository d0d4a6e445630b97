"""The scheduler against the plain reference (tests/device/reference.py) on thousands of random programs,
the physical floors every schedule respects, and the error for a schedule that cannot be computed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nprof.arch import cost
from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset
from nprof.device.plan import build_plan
from nprof.device.schedule import COMPILED_FROM, compiled_core, schedule
from nprof.errors import NprofError
from nprof.program.model import Program, TensorDecl
from tests.device.reference import reference_schedule
from tests.device.test_schedule_props import KINDS, _instruction

compiled_core(COMPILED_FROM)  # schedule() then runs the compiled core at every size (the Python passes: test_core)

PRESETS = [
    get_preset("trn1"),
    replace(get_preset("trn1"), hbm_bandwidth=17e9, dma_issue_gap_ns=700.0, sched_window=8),
    replace(get_preset("trn2"), dma_issue_gap_ns=50.0, sched_window=3),
]


def _dma(rng: np.random.Generator, n: int, deps: tuple[int, ...], queues: int = 4) -> Instruction:
    """A DMA of `p` partitions (so `p` chunks: 1 to 16 engines' rate), either direction, on a random queue."""
    p = int(rng.choice([1, 4, 16, 128]))
    sb = Access(Space.SBUF, "t", "bfloat16", 0, p, ((1, n),))
    h = Access(Space.HBM, "x", "bfloat16", 0, p, ((1, n),), 0, n)
    outs, ins = ((sb,), (h,)) if rng.random() < 0.6 else ((h,), (sb,))
    return Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, outs, ins, deps=deps, queue=int(rng.integers(0, queues)))


def random_program(rng: np.random.Generator, most: int = 30, reach: int = 0, queues: int = 4) -> Program:
    """Up to `most` instructions of every kind, DMAs of mixed rates on `queues` queues, 0-3 random earlier deps
    each (among the `reach` instructions before it; 0: any)."""
    count = int(rng.integers(1, most + 1))
    instrs: list[Instruction] = []
    while len(instrs) < count:
        i = len(instrs)
        n = int(rng.choice([1, 16, 128, 512, 2048]))
        k = int(rng.integers(0, 4)) if i else 0
        lo = max(0, i - reach) if reach else 0
        deps = tuple(sorted({int(d) for d in rng.integers(lo, i, size=k)})) if k else ()
        kind = str(rng.choice((*KINDS, "dma", "dma", "zero")))
        if kind == "zero":  # a PSUM zero-fill, then the matmul that starts its accumulation group (elided)
            mm = _instruction("mm", n, 0, (i,))
            instrs.append(Instruction(Engine.VECTOR, Opcode.MEMSET, mm.outs, (), attrs(value=0.0), deps))
            instrs.append(mm)
            continue
        instrs.append(_dma(rng, n, deps, queues) if kind == "dma" else _instruction(kind, n, 0, deps))
    return Program("rand", "trn1", (TensorDecl("x", (128, 2048), "bfloat16", "input"),), tuple(instrs))


def test_the_scheduler_equals_the_reference_on_random_programs() -> None:
    rng = np.random.default_rng(9)
    shared = elided = moved = 0
    for case in range(2000):
        preset = PRESETS[case % len(PRESETS)]
        plan = build_plan(random_program(rng), preset)
        elided += bool(plan.elided.any())
        moved += bool((plan.order != np.arange(plan.n)).any())
        fast = schedule(plan)
        start, end = reference_schedule(plan)
        np.testing.assert_allclose(fast.start, start, rtol=1e-9, atol=1e-5, err_msg=f"case {case}")
        np.testing.assert_allclose(fast.end, end, rtol=1e-9, atol=1e-5, err_msg=f"case {case}")
        shared += any(e - s > d + 1e-3 for s, e, d in zip(start, end, plan.dur, strict=True))
    assert shared > 300  # many programs really share the pool (the test exercises the fluid model)
    assert elided > 100  # and have PSUM zero-fills the hardware skips
    assert moved > 100  # and engines whose compiler order is not program order


def test_every_schedule_respects_the_physical_floors() -> None:
    rng = np.random.default_rng(10)
    for case in range(400):
        preset = PRESETS[case % len(PRESETS)]
        plan = build_plan(random_program(rng), preset)
        total = schedule(plan).makespan
        dma = plan.is_dma
        payload = float(plan.rw[dma, 3:].sum())  # bytes the DMAs write
        assert total >= payload / (cost.dma_pool_bandwidth(preset) * 1e-9) - 1e-6
        assert total >= float(plan.hw_flops.sum()) / (preset.peak("bfloat16") * 1e-9) - 1e-6
        for s in set(plan.slot):
            busy = sum(d for d, x in zip(plan.dur, plan.slot, strict=True) if x == s)
            assert total >= busy - 1e-6


def test_naive_tiled_matmul_shape_is_above_its_byte_floor() -> None:
    """Many full-width loads on all 16 queues at once: the pool, not the queues, bounds the time."""
    h = Access(Space.HBM, "x", "bfloat16", 0, 128, ((1, 512),), 0, 512)
    sb = Access(Space.SBUF, "t", "bfloat16", 0, 128, ((1, 512),))
    instrs = tuple(Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (sb,), (h,), deps=(), queue=q % 16) for q in range(64))
    plan = build_plan(Program("p", "trn1", (TensorDecl("x", (128, 512), "bfloat16", "input"),), instrs), PRESETS[0])
    t = schedule(plan)
    floor = 64 * 128 * 512 * 2 / (cost.dma_pool_bandwidth(PRESETS[0]) * 1e-9)
    assert t.makespan >= floor
    assert t.makespan == pytest.approx(max(reference_schedule(plan)[1]), rel=1e-12)


def test_a_schedule_that_cannot_be_computed_names_the_instruction() -> None:
    """A hand-made plan whose instruction 1 waits for itself (a cycle) is an error, not a hang."""
    h = Access(Space.HBM, "x", "bfloat16", 0, 128, ((1, 512),), 0, 512)
    sb = Access(Space.SBUF, "t", "bfloat16", 0, 128, ((1, 512),))
    dmas = tuple(Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (sb,), (h,), queue=q, source="k.py:7") for q in (0, 1))
    program = Program("p", "trn1", (TensorDecl("x", (128, 512), "bfloat16", "input"),), dmas)
    plan = build_plan(program, PRESETS[0])
    offsets = plan.deps_offsets.copy()
    offsets[2] = 1
    cyclic = replace(plan, deps_offsets=offsets, deps_flat=np.asarray([1]), dep1=np.asarray([2, 1]))
    with pytest.raises(NprofError, match=r"instruction 1 \(DMA_DIRECT2D, k.py:7\) can never start"):
        schedule(cyclic, program)
