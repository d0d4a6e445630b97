"""`program.columns.operand_lists` (vectorised checks, one Access per distinct operand) held to a plain
row-by-row decode that checks every operand with `validate.check_access`, on random operand columns with
occasional invalid values: both accept with equal Accesses, or both refuse with the same message."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from nprof.arch.isa import DTYPES, Access, Space
from nprof.program.columns import operand_lists
from nprof.program.table import ACCESS
from nprof.program.validate import check_access

PARTITIONS = 128


def reference(rows: list[list[dict[str, Any]]], partitions: int) -> list[tuple[Access, ...]]:
    """Every operand checked and converted on its own, in row order."""
    out = []
    for ops in rows:
        decoded = []
        for d in ops:
            check_access(d, partitions)
            if d["dtype"] not in DTYPES:
                raise ValueError(f"unknown dtype {d['dtype']!r}")
            dims = tuple((f["stride"], f["size"]) for f in d["free"])
            space = Space(d["space"])
            decoded.append(Access(space, d["tensor"], d["dtype"], d["offset"], d["partitions"], dims,
                                  d["partition_start"], d["partition_stride"]))  # fmt: skip
        out.append(tuple(decoded))
    return out


def _pick(rng: random.Random, bad: float, good: Any, wrong: Any) -> Any:
    return rng.choice(wrong) if rng.random() < bad else good


def random_operand(rng: random.Random, bad: float) -> dict[str, Any]:
    """A mostly valid operand; each field is out of range with probability `bad` (values chosen to hit every
    rule of check_access at its edges)."""
    space = _pick(rng, bad, rng.choice(["hbm", "sbuf", "psum"]), ["SBUF", "dram"])
    parts = _pick(rng, bad, rng.randint(1, 64), [0, -1, 100, 128, 129, 10**6])
    start = _pick(rng, bad, rng.randint(0, 64), [-1, 127, 128, 100])
    ndims = _pick(rng, bad, rng.randint(0, 3), [8, 9])
    free = [
        {"stride": _pick(rng, bad / 4, rng.randint(-4, 8), [1 << 48, -(1 << 48) - 1]),
         "size": _pick(rng, bad / 4, rng.randint(1, 4), [0, -2, (1 << 48) + 1])}
        for _ in range(ndims)
    ]  # fmt: skip
    return {
        "space": space,
        "tensor": rng.choice(["x", "w", "acc", "y"]),
        "dtype": _pick(rng, bad, rng.choice(DTYPES[:3]), ["float7", "int3"]),
        "offset": _pick(rng, bad, rng.randint(0, 3) * 64, [-1, (1 << 48) + 1, 1 << 48]),
        "partitions": parts,
        "free": free,
        "partition_start": start,
        "partition_stride": _pick(rng, bad, rng.choice([0, 1, 512]), [-5, (1 << 48) + 1]),
    }


@pytest.mark.parametrize("seed", range(60))
def test_matches_row_by_row_reference(seed: int) -> None:
    rng = random.Random(seed)
    bad = [0.0, 0.002, 0.02][seed % 3]
    rows = [[random_operand(rng, bad) for _ in range(rng.randint(0, 4))] for _ in range(rng.randint(0, 150))]
    column = pa.chunked_array([pa.array(rows, pa.list_(ACCESS))])
    try:
        expected: Any = reference(rows, PARTITIONS)
    except ValueError as exc:
        with pytest.raises(ValueError) as got:
            operand_lists(column, PARTITIONS)
        assert str(got.value) == str(exc)
        return
    result = operand_lists(column, PARTITIONS)
    assert result == expected
    flat = [a for ops in result or [] for a in ops]
    by_value: dict[Access, Access] = {}
    assert all(by_value.setdefault(a, a) is a for a in flat), "equal operands must share one Access"


def test_sliced_columns_and_empty_rows() -> None:
    rng = random.Random(7)
    rows = [[random_operand(rng, 0.0) for _ in range(3)] for _ in range(10)] + [[]]
    full = pa.array(rows, pa.list_(ACCESS))
    assert operand_lists(full.slice(4, 7), PARTITIONS) == reference(rows[4:], PARTITIONS)
    assert operand_lists(pa.chunked_array([pa.array([[], []], pa.list_(ACCESS))]), PARTITIONS) == [(), ()]
    assert operand_lists(pa.chunked_array([], pa.list_(ACCESS)), PARTITIONS) == []


@pytest.mark.parametrize("seed", range(5))
def testdistinct_rows_is_numpy_unique(seed: int) -> None:
    import numpy as np

    from nprof.program.columns import distinct_rows

    key = np.random.default_rng(seed).integers(-2, 3, size=(500, 5 + seed))
    distinct, inverse = distinct_rows(key)
    want, want_inverse = np.unique(key, axis=0, return_inverse=True)
    assert np.array_equal(distinct, want)
    assert np.array_equal(inverse, want_inverse.reshape(-1))
