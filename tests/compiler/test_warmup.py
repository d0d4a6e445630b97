"""`nprof.compiler.warmup`: the compiled cores a torch.compile run uses are warmed (scripts/setup.sh) with the one
signature the compiler and the simulator then call each entry point with, so a first torch.compile after the
warm-up compiles no numba code (a second signature of a core costs seconds of CPU on a cold numba cache)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
numba = pytest.importorskip("numba")

from nprof.compiler import warmup  # noqa: E402
from nprof.device import core, schedule  # noqa: E402
from nprof.device.plan import build_plan  # noqa: E402
from tests.compiler import zoo  # noqa: E402
from tests.device.test_schedule_exact import random_program  # noqa: E402

warmup.warm_cores()
ENTRIES = warmup.entry_points()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, set[tuple[Any, ...]]]]:
    """Every call of an entry point from Python, by numba's types of its arguments (the signature it would use)."""
    seen: dict[str, set[tuple[Any, ...]]] = {}
    for f in ENTRIES:
        module = __import__(f.py_func.__module__, fromlist=["_"])
        name = f.py_func.__name__

        def spy(*args: Any, _f: Any = f, _name: str = f"{module.__name__}.{name}") -> Any:
            seen.setdefault(_name, set()).add(tuple(numba.typeof(a) for a in args))
            return _f(*args)

        spy.stats, spy.py_func, spy.signatures = f.stats, f.py_func, f.signatures  # type: ignore[attr-defined]
        monkeypatch.setattr(module, name, spy)
    yield seen



def _name(f: Any) -> str:
    return f"{f.py_func.__module__}.{f.py_func.__name__}"


def test_numba_holds_a_signature_of_every_entry_point_after_the_warm_up() -> None:
    warmup.warm_cores()
    assert len(ENTRIES) == 9 and all(f.signatures for f in ENTRIES)


def _warm_signatures(calls: dict[str, set[tuple[Any, ...]]]) -> dict[str, set[tuple[Any, ...]]]:
    """Per entry point, the signatures the warm-up may have left: the one it called it with (the dependency core
    is warmed once per process: then those numba holds after it)."""
    warmup.warm_cores()
    warm = {_name(f): calls.get(_name(f)) or {tuple(s) for s in f.signatures} for f in ENTRIES}
    calls.clear()
    return warm


def test_read_only_plan_arrays_use_the_warm_signature(calls: dict[str, Any]) -> None:
    """A plan whose arrays are read-only (e.g. read from a cached program's buffer) is scheduled through the
    signature the warm-up compiled, not a second one."""
    warm = _warm_signatures(calls)
    assert all(len(warm[_name(f)]) == 1 for f in (core.list_pass, core.wait_graph, core.event_pass))
    rng = np.random.default_rng(3)
    for case in range(20):
        plan = build_plan(random_program(rng), _preset(case))
        for value in vars(plan).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        schedule.schedule(plan)
    assert calls and all(len(sigs) == 1 and sigs <= warm[name] for name, sigs in calls.items()), calls


def _preset(case: int) -> Any:
    from dataclasses import replace

    from nprof.arch.presets import get_preset

    preset = get_preset("trn1")
    return preset if case % 2 else replace(preset, dma_issue_gap_ns=0.0)


@pytest.mark.parametrize("build", [lambda: zoo.images(zoo.ResNet18(), 16, batch=2), lambda: zoo.tokens(
    zoo.NanoGPT(), 32, 8)], ids=["resnet18", "nanogpt"])  # fmt: skip
def test_the_zoo_graphs_call_every_core_with_the_warm_signature(
    build: Any, calls: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Two compiled training steps (the first lowers and simulates, the second after a dynamo reset reads the
    programs and their timing back from the cache) call each entry point only with the warm-up's signature."""
    warm = _warm_signatures(calls)
    monkeypatch.setenv("NPROF_CACHE", str(tmp_path))
    model, batch = build()
    torch._dynamo.reset()
    zoo.train(model, batch, 1, "nprof")
    torch._dynamo.reset()
    zoo.train(model, batch, 1, "nprof")
    assert calls, "the compiled cores were not called"
    for name, sigs in calls.items():
        assert len(sigs) == 1 and sigs <= warm[name], (name, sigs)
