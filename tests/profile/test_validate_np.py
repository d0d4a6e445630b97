"""The numpy passes of the table checks held to the pyarrow.compute checks on random columns (nulls, NaN,
infinities, values at and around every bound, chunked and sliced arrays, near-miss engine strings), and the
whole `check_tables` held to its pyarrow.compute reference (`fast=False`): same refusals, same messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nprof.profile import validate_np as quick
from nprof.profile.schema import ENGINES, TABLES
from nprof.profile.validate import MAX_TS, MAX_VALUE, check_tables
from tests.conftest import tiny_profile

ROOT = Path(__file__).resolve().parents[2]
EDGES = [0, 1, -1, 2**31 - 1, -(2**31), 2**53, 2**53 + 1, 2**62, 2**62 + 1, 2**63 - 1, -(2**63)]


def _ints(rng: np.random.Generator, n: int, type_: pa.DataType, nulls: bool) -> pa.ChunkedArray:
    """A random integer column of `type_`: edge values of the type's range mixed in, maybe nulls, in one to
    three chunks, some sliced from a larger array."""
    info = np.iinfo(type_.to_pandas_dtype())
    edges = [e for e in EDGES if info.min <= e <= info.max]
    scale = int(rng.choice([10, 2**31, 2**53, 2**62]))
    values = rng.integers(max(info.min, -scale), min(info.max, scale), n, endpoint=True)
    if n and rng.random() < 0.5:
        values[rng.integers(0, n, 2)] = rng.choice(edges, 2)
    mask = rng.random(n) < 0.2 if nulls else None
    arr = pa.array(values.astype(type_.to_pandas_dtype()), type_, mask=mask)
    cut = sorted(rng.integers(0, n, 2, endpoint=True)) if n else [0, 0]
    parts = [arr.slice(0, cut[0]), arr.slice(cut[0], cut[1] - cut[0]), arr.slice(cut[1])]
    return pa.chunked_array([p for p in parts if len(p) or rng.random() < 0.3], type_)


def _column(rng: np.random.Generator, n: int) -> pa.ChunkedArray:
    type_ = [pa.int64(), pa.int32(), pa.int8(), pa.uint64()][int(rng.integers(0, 4))]
    return _ints(rng, n, type_, rng.random() < 0.3)


@pytest.mark.parametrize("seed", range(40))
def test_range_and_end_checks_match_pyarrow(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.choice([0, 1, 2, 7, 100]))
        col = _column(rng, n)
        lo, hi = sorted(int(x) for x in rng.choice(EDGES[:9], 2))
        mm = pc.min_max(col).as_py()
        passes = n == 0 or (mm["min"] is not None and lo <= mm["min"] and mm["max"] <= hi)
        if quick.within(col, lo, hi):
            assert passes
        elif not col.null_count and pa.types.is_integer(col.type):
            assert not passes  # numpy decides every plain integer column
        a, b = _ints(rng, n, pa.int64(), rng.random() < 0.2), _ints(rng, n, pa.int64(), rng.random() < 0.2)
        a_in, b_in = (pc.min_max(x).as_py() for x in (a, b))
        if quick.end_within(a, b, MAX_TS):
            assert n == 0 or pc.max(pc.add(a, b)).as_py() <= MAX_TS
        elif not (a.null_count or b.null_count) and all(m["min"] >= 0 and m["max"] <= MAX_TS for m in (a_in, b_in)):
            assert pc.max(pc.add(a, b)).as_py() > MAX_TS
        greater = bool(pc.any(pc.greater(a, b)).as_py())
        assert not quick.none_greater(a, b) or not greater
        if not (a.null_count or b.null_count):
            assert quick.none_greater(a, b) == (not greater)


@pytest.mark.parametrize("seed", range(20))
def test_sum_check_matches_pyarrow_near_the_limit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.integers(1, 300))
        target = MAX_VALUE * float(rng.choice([0.5, 1 - 2.0**-18, 1 - 2.0**-21, 1.0, 1 + 2.0**-30, 2.0]))
        parts = rng.dirichlet(np.ones(n)) * target
        values = np.minimum(parts, MAX_VALUE).astype(np.int64)
        mask = rng.random(n) < 0.1 if rng.random() < 0.2 else None
        col = pa.chunked_array([pa.array(values, pa.int64(), mask=mask)])
        arrow = pc.sum(pc.cast(col, pa.float64(), safe=False)).as_py() or 0.0
        if quick.sum_below(col, MAX_VALUE):
            assert arrow <= MAX_VALUE
        elif mask is None and arrow < MAX_VALUE * (1 - 2.0**-19):
            raise AssertionError("numpy left a sum far below the limit to pyarrow")


@pytest.mark.parametrize("seed", range(20))
def test_finite_check_matches_pyarrow(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.choice([0, 1, 5, 50]))
        values = rng.normal(size=n) * 10.0 ** float(rng.integers(0, 300))
        if n and rng.random() < 0.5:
            values[rng.integers(0, n)] = rng.choice([np.nan, np.inf, -np.inf, -0.0, 5e-324, 1.7976931348623157e308])
        mask = rng.random(n) < 0.2 if rng.random() < 0.3 else None
        col = pa.chunked_array([pa.array(values, pa.float64(), mask=mask)])
        arrow = n == 0 or bool(pc.all(pc.is_finite(col)).as_py())
        assert not quick.all_finite(col) or arrow
        if not col.null_count:
            assert quick.all_finite(col) == arrow
    assert not quick.all_finite(pa.chunked_array([pa.array([1, 2], pa.int64())]))  # ints: pyarrow's call


NEAR = ["", "c", "ccc", "tenso", "tensorx", "Tensor", "cc\x00", "\x00cc", "tensör", "vectors", "hos", "hosts"]


@pytest.mark.parametrize("seed", range(40))
def test_engine_check_matches_pyarrow(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.choice([0, 1, 3, 40]))
        words = [str(rng.choice(ENGINES)) for _ in range(n)]
        if n and rng.random() < 0.4:
            words[int(rng.integers(0, n))] = NEAR[int(rng.integers(0, len(NEAR)))]  # not rng.choice: numpy strips NULs
        mask = rng.random(n) < 0.2 if rng.random() < 0.2 else None
        arr = pa.array(words, pa.string(), mask=mask)
        lo = int(rng.integers(0, n + 1))
        col = pa.chunked_array([arr.slice(0, lo), arr.slice(lo)] if rng.random() < 0.5 else [arr.slice(lo)])
        arrow = len(col) == 0 or bool(pc.all(pc.is_in(col, value_set=pa.array(ENGINES))).as_py())
        assert not quick.all_in(col, ENGINES) or arrow
        if not col.null_count:
            assert quick.all_in(col, ENGINES) == arrow
    assert not quick.all_in(pa.chunked_array([pa.array(["tensor"], pa.large_string())]), ENGINES)


def _outcome(tables: dict[str, pa.Table], world: int, fast: bool) -> str:
    try:
        check_tables(tables, world, fast=fast)
    except ValueError as exc:
        return str(exc)
    return "ok"


def _mutated(rng: np.random.Generator, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """`tables` with one to three columns replaced by random values of their type (nulls, edges, near-miss
    engines, NaN counters), the schema kept."""
    out = dict(tables)
    for _ in range(int(rng.integers(1, 4))):
        name = str(rng.choice(["instructions", "dma", "collectives", "counters"]))
        t = out[name]
        f = t.schema.field(int(rng.integers(0, len(t.schema))))
        n = t.num_rows
        col: Any
        if pa.types.is_integer(f.type):
            col = _ints(rng, n, f.type, rng.random() < 0.05)
            if rng.random() < 0.7:  # mostly in range, so later checks run too
                col = pa.chunked_array([pa.array(np.abs(rng.integers(0, 1000, n)), f.type)])
        elif f.name == "engine":
            col = pa.array([str(rng.choice((*ENGINES, "dma", "tensör"))) for _ in range(n)], pa.string())
        elif f.name == "value":
            col = pa.array(rng.choice([0.5, np.nan, np.inf, 3.0], n), pa.float64())
        else:
            continue
        out[name] = t.set_column(t.schema.get_field_index(f.name), f, col)
    return out


def _tables(rng: np.random.Generator) -> dict[str, pa.Table]:
    p = tiny_profile()
    tables = {n: p.table(n) for n in TABLES}
    n = int(rng.integers(1, 4))
    tables["collectives"] = pa.Table.from_pydict(
        {"id": [7] * n, "kind": ["all-reduce"] * n, "bytes": [64] * n, "rank": list(range(n)), "ranks": [None] * n,
         "ts": [10] * n, "duration": [50] * n, "wait_ns": [5] * n, "algorithm": [None] * n},
        schema=TABLES["collectives"],
    )  # fmt: skip
    return tables


@pytest.mark.parametrize("seed", range(60))
def test_check_tables_numpy_passes_refuse_as_pyarrow(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(10):
        tables = _mutated(rng, _tables(rng))
        world = int(rng.integers(1, 4))
        assert _outcome(tables, world, fast=True) == _outcome(tables, world, fast=False)


def test_importing_a_chrome_trace_needs_no_arrow_compute() -> None:
    """pyarrow.compute (libarrow_compute's kernel registry: ~1 MB of code pages) stays out of an import."""
    code = (
        "import sys\nfrom nprof.capture import open_profile\n"
        f"p = open_profile({str(ROOT / 'tests/fixtures/kineto_cuda_small.json')!r})\n"
        "assert p.event_count > 0 and p.dma.num_rows > 0\n"
        "print('pyarrow.compute' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
