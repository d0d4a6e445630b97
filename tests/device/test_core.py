"""The compiled scheduler core (device.core) against the pure-Python passes: bit-identical on random programs.

The plain reference (tests/device/reference.py) checks `schedule` on small programs
(test_schedule_exact.py); here the compiled passes are held to the pure-Python ones bit for bit, on many
small programs and on larger ones the plain reference would take too long for.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nprof.arch.presets import get_preset
from nprof.device import schedule as sched
from nprof.device import simulate
from nprof.device.plan import Plan, build_plan
from nprof.device.schedule import python_list_schedule, python_schedule, schedule
from nprof.device.waits import successors
from tests.device.test_schedule_exact import PRESETS, random_program

core = pytest.importorskip("nprof.device.core")  # needs numba


ALL = [*PRESETS, replace(get_preset("trn1"), dma_issue_gap_ns=0.0)]


def _same(plan: Plan) -> None:
    """schedule == python_schedule and list_pass == python_list_schedule, bit for bit."""
    fast, slow = schedule(plan), python_schedule(plan)
    for name in ("start", "end", "wait"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    start, end = core.list_pass(plan.order, plan.slot, plan.dur, plan.lat0, plan.lat1, plan.dep1,
                                plan.deps_offsets, plan.deps_flat, plan.prev, plan.is_tr)  # fmt: skip
    ref_start, ref_end = python_list_schedule(plan)
    assert np.array_equal(start[: plan.n], ref_start) and np.array_equal(end, ref_end)


def test_compiled_passes_equal_the_python_passes_on_small_random_programs() -> None:
    rng = np.random.default_rng(14)
    for case in range(3000):
        plan = build_plan(random_program(rng), ALL[case % len(ALL)])
        _same(plan)


def test_compiled_passes_equal_the_python_passes_on_larger_programs() -> None:
    """Hundreds to thousands of instructions on all 16 queues, dependencies mostly local (like loop bodies)."""
    rng = np.random.default_rng(15)
    for case in range(24):
        plan = build_plan(random_program(rng, 3000, reach=40, queues=16), ALL[case % len(ALL)])
        _same(plan)


def test_large_plans_load_the_compiled_core_and_small_ones_need_not() -> None:
    assert sched.compiled_core(sched.COMPILED_FROM) is core
    assert sched.compiled_core(1) is core  # once loaded, it serves every size


def test_the_compiled_wait_graph_equals_the_python_one() -> None:
    rng = np.random.default_rng(16)
    for case in range(500):
        plan = build_plan(random_program(rng), ALL[case % len(ALL)])
        mine = core.wait_graph(plan.deps_offsets, plan.deps_flat, plan.is_dma, plan.prev, plan.pm, plan.pl)
        for ours, theirs in zip(mine, successors(plan), strict=True):
            assert np.array_equal(ours, theirs)


def test_without_numba_the_python_passes_give_the_same_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    program = random_program(np.random.default_rng(17), 200, reach=20, queues=16)
    compiled = simulate(program, numerics=False)
    monkeypatch.setattr(sched, "compiled_core", lambda n: None)
    plain = simulate(program, numerics=False)
    assert plain.latencies_ns == compiled.latencies_ns
    assert plain.profile.instructions.equals(compiled.profile.instructions)
    assert plain.profile.dma.equals(compiled.profile.dma)
