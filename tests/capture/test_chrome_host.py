"""`chrome_host.Paths` (op paths: a loop up the ancestors, `chrome_nest.fold_down` for many) and `fold_down`
against the plain recursive definitions."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from nprof.capture import chrome_host
from nprof.capture.chrome_host import Paths, opcode
from nprof.capture.chrome_nest import fold_down


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


def _forest(rng: random.Random, n: int, chain: int) -> list[int]:
    """A random forest of n nodes, parents at random positions (not first), plus a chain `chain` deep
    (a thin depth: `fold_down` finishes it one node at a time)."""
    rank = list(range(n))
    rng.shuffle(rank)  # node rank[j] is the j-th created: its parent was created before it
    par = [-1] * n
    for j in range(1, n):
        if rng.random() > 0.05:
            par[rank[j]] = rank[rng.randrange(max(0, j - 40), j)]  # near ancestors: deep trees
    for j in range(n - chain + 1, n):
        par[rank[j]] = rank[j - 1]
    return par


@pytest.mark.parametrize("fold_from", [0, 10**9])  # the fold, the loop per distinct parent
@pytest.mark.parametrize("seed", range(6))
def test_parent_paths_of_every_slice_equal_the_recursive_definition(
    seed: int, fold_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chrome_host, "FOLD_FROM", fold_from)
    rng = random.Random(seed)
    n = rng.choice([1, 50, 3000])
    par = _forest(rng, n, chain=min(n, rng.choice([1, 300])))
    ops = ["aten::mm", "aten::linear", "a > b", "b", "autograd::engine::evaluate_function: aten::mm", "x", "b > b"]
    names = [rng.choice(ops[: rng.randint(1, len(ops))]) for _ in range(n)]
    paths = Paths(SimpleNamespace(names=names, par=par))  # type: ignore[arg-type]
    queries = [-1, *range(n), *(rng.randrange(n) for _ in range(100))]
    want = [_reference(names, par, par[r]) if r >= 0 and par[r] >= 0 else None for r in queries]
    assert paths.parent_paths(queries) == want
    assert Paths(SimpleNamespace(names=[], par=[])).parent_paths([-1]) == [None]  # type: ignore[arg-type]


def _python_fold(parent: list[int], labels: list[int], step: Any, i: int) -> Any:
    return step(None if parent[i] < 0 else _python_fold(parent, labels, step, parent[i]), labels[i])


@pytest.mark.parametrize("seed", range(6))
def test_fold_down_equals_the_plain_recursion(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 40, 4000])
    par = _forest(rng, n, chain=min(n, rng.choice([1, 2, 500])))
    labels = [rng.randrange(rng.choice([1, 3, 50])) for _ in range(n)]

    def step(above: tuple[int, ...] | None, label: int) -> tuple[int, ...]:  # keeps the last 3 labels
        return ((above or ()) + (label,))[-3:]

    codes, values = fold_down(np.asarray(par, np.int64), np.asarray(labels, np.int64), step)
    assert [values[c] for c in codes.tolist()] == [_python_fold(par, labels, step, i) for i in range(n)]
    assert len(set(values)) == len(values)  # equal values share one code


def test_fold_down_refuses_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        fold_down(np.asarray([-1, 2, 1]), np.zeros(3, np.int64), lambda above, k: k)
