"""`permuted_columns`: the columns of a program in another order, made from its columns, equal the columns
`instruction_columns` makes from the reordered objects (the plain per-instruction path), field by field, on
random programs (operands and attrs repeating, equal attrs values written apart: 1 / 1.0 / True) and random
topological orders."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nprof.arch.isa import Instruction
from nprof.device.columns import Columns, instruction_columns
from nprof.device.columns_order import first_occurrence, permuted_columns
from tests.device.test_with_columns import _random_instructions


def assert_same_columns(got: Columns, want: Columns, what: str = "") -> None:
    """Every field of `got` equals `want`'s (arrays by value and int64 dtype, lists, Arrow string columns)."""
    for name, a, b in zip(Columns._fields, got, want, strict=True):
        if name == "acc":
            for field, x, y in zip(a._fields, a, b, strict=True):
                _same(x, y, f"{what} acc.{field}")
        else:
            _same(a, b, f"{what} {name}")


def _same(a: object, b: object, what: str) -> None:
    if isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), what
    elif isinstance(b, list):
        assert a == b and [type(x) for x in a] == [type(x) for x in b], what  # (1, 1.0 and True apart)
    else:
        assert a.equals(b) and a.type == b.type, what  # type: ignore[attr-defined]


def plain_reordered(instrs: tuple[Instruction, ...], order: list[int]) -> tuple[Instruction, ...]:
    """The instructions in `order`, dependencies renumbered and sorted (`compiler.listsched.reordered`)."""
    new_index = {old: new for new, old in enumerate(order)}
    return tuple(replace(instrs[i], deps=tuple(sorted(new_index[d] for d in instrs[i].deps))) for i in order)


def random_order(rng: np.random.Generator, instrs: tuple[Instruction, ...]) -> list[int]:
    """A random topological order of the instructions' dependencies."""
    users: list[list[int]] = [[] for _ in instrs]
    waiting = [len(set(ins.deps)) for ins in instrs]
    for i, ins in enumerate(instrs):
        for d in set(ins.deps):
            users[d].append(i)
    ready, order = [i for i, w in enumerate(waiting) if w == 0], []
    while ready:
        i = ready.pop(int(rng.integers(0, len(ready))))
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    assert len(order) == len(instrs)
    return order


def test_permuted_columns_equal_the_columns_of_the_reordered_objects() -> None:
    rng = np.random.default_rng(11)
    for case in range(200):
        instrs = _random_instructions(rng, int(rng.integers(0, 90)))
        cols = instruction_columns(instrs)
        for _ in range(3):
            order = random_order(rng, instrs)
            want = plain_reordered(instrs, order)
            got = permuted_columns(cols, order, [ins.attrs for ins in want])
            assert_same_columns(got, instruction_columns(want), f"case {case}")


def test_the_identity_order_gives_the_same_columns_and_a_bad_order_is_refused() -> None:
    rng = np.random.default_rng(12)
    instrs = _random_instructions(rng, 40)
    cols = instruction_columns(instrs)
    assert_same_columns(permuted_columns(cols, list(range(40)), [i.attrs for i in instrs]), cols)
    with pytest.raises(ValueError, match="permute"):
        permuted_columns(cols, [0] * 40, [i.attrs for i in instrs])
    with pytest.raises(ValueError, match="permute"):
        permuted_columns(cols, list(range(39)), [i.attrs for i in instrs][:39])


def test_first_occurrence_numbers_codes_as_met() -> None:
    rng = np.random.default_rng(13)
    for _ in range(200):
        k = int(rng.integers(1, 12))
        codes = rng.integers(0, k, size=int(rng.integers(0, 30)))
        new, old = first_occurrence(codes, k)
        met: dict[int, int] = {}
        plain = [met.setdefault(int(c), len(met)) for c in codes]
        assert new.tolist() == plain and old.tolist() == list(met)
