"""`chrome_host.Paths` (op paths by a loop up the ancestors) against the plain recursive definition."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from nprof.capture.chrome_host import Paths, opcode


def _reference(names: list[str], par: list[int], r: int) -> str:
    """The op path of r: its parent's path, then its own op name unless the path already ends with it."""
    name = opcode(names[r])
    if par[r] < 0:
        return name
    above = _reference(names, par, par[r])
    return above if above.rsplit(" > ", 1)[-1] == name else f"{above} > {name}"


@pytest.mark.parametrize("seed", range(5))
def test_paths_equal_the_recursive_definition(seed: int) -> None:
    rng = random.Random(seed)
    n = 300
    par = [-1 if i == 0 or rng.random() < 0.1 else rng.randrange(i) for i in range(n)]  # parents come first
    ops = ["aten::mm", "aten::linear", "a > b", "b", "autograd::engine::evaluate_function: aten::mm", "x"]
    names = [rng.choice(ops) for _ in range(n)]
    paths = Paths(SimpleNamespace(names=names, par=par))  # type: ignore[arg-type]
    queries = [rng.randrange(n) for _ in range(400)]
    assert [paths.path(r) for r in queries] == [_reference(names, par, r) for r in queries]
    assert paths.parent_paths([-1, *queries[:50]]) == [None] + [
        _reference(names, par, par[r]) if par[r] >= 0 else None for r in queries[:50]
    ]
