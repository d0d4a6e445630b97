"""Lowering work grows linearly with the graph: per emitted instruction, the Python calls the lowering makes and
the dependency-tracker entries it scans stay flat from a 2-block to an 8-block CNN (forward and backward).
Counted, not timed, so the test is deterministic."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


def _work_per_instruction(depth: int, monkeypatch: pytest.MonkeyPatch, cache: Path) -> tuple[float, float]:
    """(Python calls, dependency entries scanned) per instruction lowering a CNN with `depth` conv blocks
    (compiled into the empty cache `cache`, so every graph is lowered)."""
    import nprof.compiler.backend as backend
    from nprof.nki.deps import DepTracker

    counts = {"calls": 0, "scanned": 0, "instructions": 0}
    trackers: list[DepTracker] = []
    init = DepTracker.__init__

    def counted(self: DepTracker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        trackers.append(self)

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            counts["calls"] += 1

    lower = backend.lower_graph

    def lower_counted(gm: Any, plan: Any) -> Any:
        sys.setprofile(profiler)
        try:
            program, slots = lower(gm, plan)
        finally:
            sys.setprofile(None)
        counts["instructions"] += len(program.instructions)
        return program, slots

    monkeypatch.setenv("NPROF_CACHE", str(cache))
    monkeypatch.setattr(DepTracker, "__init__", counted)
    monkeypatch.setattr(backend, "lower_graph", lower_counted)
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, 1, 1)]
    for _ in range(depth):
        layers += [nn.Conv2d(8, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    torch._dynamo.reset()
    torch.compile(model, backend="nprof")(torch.randn(2, 3, 8, 8)).sum().backward()
    monkeypatch.undo()
    counts["scanned"] = sum(t.scanned for t in trackers)
    n = counts["instructions"]
    assert n > 0
    return counts["calls"] / n, counts["scanned"] / n


def test_lowering_work_per_instruction_is_flat(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _work_per_instruction(1, monkeypatch, tmp_path / "1")  # warm the process's caches (first lowering of each op)
    small = _work_per_instruction(2, monkeypatch, tmp_path / "2")
    large = _work_per_instruction(8, monkeypatch, tmp_path / "8")
    assert large[0] < 1.25 * small[0], (small, large)  # Python calls per instruction
    assert large[1] < 1.25 * small[1], (small, large)  # dependency entries scanned per instruction
