"""The compiled per-engine loops (`nprof.analysis.engine_core`) held to the numpy merges on random rows."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.analysis import intervals as iv
from nprof.analysis.engine_core import merge_code, wait_union_code


def _rows(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A time-sorted table (empty, touching and nested intervals) and a random ascending subset of its rows
    (the engine's rows: `_codes`)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 150))
    ts = np.sort(rng.integers(0, 1500, n)).astype(np.int64)
    end = ts + rng.integers(0, 90 if seed % 2 else 8, n)
    wait = rng.integers(-5, 60, n) * (rng.random(n) < 0.6)
    rows = np.flatnonzero(rng.random(n) < rng.random()).astype(np.int64)
    return rows, ts, end, wait.astype(np.int64)


def _codes(rows: np.ndarray, n: int, seed: int) -> np.ndarray:
    """int32 engine codes of n rows: 3 on `rows`, other engines' codes (0-2, 4) elsewhere."""
    codes = np.random.default_rng(seed).choice(np.array([0, 1, 2, 4], np.int32), n).astype(np.int32)
    codes[rows] = 3
    return codes


@pytest.mark.parametrize("seed", range(60))
def test_merge_code_equals_the_numpy_merge(seed: int) -> None:
    rows, ts, end, _ = _rows(seed)
    got = merge_code(_codes(rows, ts.size, seed), 3, ts, end - ts)
    want = iv.merge(ts[rows], end[rows])
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("seed", range(60))
def test_wait_union_code_equals_the_union_of_the_rows_intervals(seed: int) -> None:
    rows, ts, end, wait = _rows(seed)
    t, e, w = ts[rows], end[rows], wait[rows]
    union, busy = wait_union_code(_codes(rows, ts.size, seed), 3, ts, end - ts, wait)
    assert busy == iv.union_length(t, e)
    assert union == iv.union_length(np.concatenate([t - np.maximum(w, 0), t]), np.concatenate([t, np.maximum(e, t)]))
