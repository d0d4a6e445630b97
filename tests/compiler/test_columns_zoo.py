"""Every graph the zoo compiles: the columns the lowering attaches (the list scheduler's, a permutation of columns made
once: `device.columns_order`) are exactly those `instruction_columns` makes from the lowered objects, and the plan it
leaves for the simulation (`device.plan.adopt_plan`) the one built from the objects; the columns `with_columns` gives
the lowered program (what the backend attaches before the cache write and the simulation) make the same instruction
table as the per-instruction writer, the same plan as the program's objects, and the same simulated timing and
profile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import nprof.compiler.backend as backend  # noqa: E402
from nprof.arch.presets import get_preset  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.device.columns import attached_columns, instruction_columns, with_columns  # noqa: E402
from nprof.device.plan import build_plan, plan_for, share_derived  # noqa: E402
from nprof.program.table import instruction_table  # noqa: E402
from tests.compiler import zoo  # noqa: E402
from tests.device.test_columns_order import assert_same_columns  # noqa: E402
from tests.device.test_plan import _assert_same_plan  # noqa: E402

MODELS: dict[str, Callable[[], tuple[Any, zoo.Batch]]] = {
    "vit-linear": lambda: zoo.images(zoo.ViT(conv=False), 8),
    "vit-conv": lambda: zoo.images(zoo.ViT(conv=True), 8),
    "nanogpt": lambda: zoo.tokens(zoo.NanoGPT(), 32, 8),
    "lstm": lambda: zoo.tokens(zoo.RNNLM("lstm"), 16, 5),
    "gru": lambda: zoo.tokens(zoo.RNNLM("gru"), 16, 5),
    "bag": zoo.bag,
    "resnet18": lambda: zoo.images(zoo.ResNet18(), 16, batch=8),
    "gpt2": zoo.gpt2,
    "bert": zoo.bert,
}


def _lowered(build: Callable[[], tuple[Any, zoo.Batch]], monkeypatch: pytest.MonkeyPatch, cache: Path) -> list[Any]:
    """The programs (Instruction objects, as lowered, with the columns the lowering attached) of one compiled
    training step of a zoo model, lowered anew into the private compile cache `cache` (the session's cache may
    already hold them from another test)."""
    monkeypatch.setenv("NPROF_CACHE", str(cache))
    lowered: list[Any] = []
    lower = backend.lower_graph

    def keep(gm: Any, plan: Any) -> Any:
        program, slots = lower(gm, plan)
        copy = replace(program)  # (a copy: the backend caches its table on its own)
        share_derived(program, copy)  # (the columns and plan the lowering made)
        lowered.append(copy)
        return program, slots

    monkeypatch.setattr(backend, "lower_graph", keep)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, batch = build()
    zoo.train(model, batch, 1, "nprof")
    return lowered


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "resnet18" else n for n in MODELS])
def test_every_zoo_graph_has_the_same_table_plan_and_timing_from_its_columns(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if name in ("gpt2", "bert"):
        pytest.importorskip("transformers")
    programs = _lowered(MODELS[name], monkeypatch, tmp_path)
    assert len(programs) >= 2  # forward and backward
    for program in programs:
        attached = attached_columns(program)
        assert attached is not None, program.name
        assert_same_columns(attached, instruction_columns(program.instructions), program.name)
        preset = get_preset(program.preset)
        _assert_same_plan(plan_for(program, preset), build_plan(replace(program), preset), program.name)  # (adopted)
        columnar = with_columns(replace(program))
        assert instruction_table(columnar).equals(instruction_table(replace(program))), program.name
        _assert_same_plan(build_plan(columnar, preset), build_plan(replace(program), preset), program.name)
        a, b = simulate(columnar, numerics=False), simulate(replace(program), numerics=False)
        assert a.latencies_ns == b.latencies_ns, program.name
        assert a.profile.instructions.equals(b.profile.instructions), program.name
