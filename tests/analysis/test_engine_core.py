"""The compiled per-engine loops (`nprof.analysis.engine_core`) held to the numpy merges on random rows."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.analysis import intervals as iv
from nprof.analysis.engine_core import merge_rows, wait_union


def _rows(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A time-sorted table (empty, touching and nested intervals) and a random ascending subset of its rows."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 150))
    ts = np.sort(rng.integers(0, 1500, n)).astype(np.int64)
    end = ts + rng.integers(0, 90 if seed % 2 else 8, n)
    wait = rng.integers(-5, 60, n) * (rng.random(n) < 0.6)
    rows = np.flatnonzero(rng.random(n) < rng.random()).astype(np.int64)
    return rows, ts, end, wait.astype(np.int64)


@pytest.mark.parametrize("seed", range(60))
def test_merge_rows_equals_the_numpy_merge(seed: int) -> None:
    rows, ts, end, _ = _rows(seed)
    got = merge_rows(rows, ts, end)
    want = iv.merge(ts[rows], end[rows])
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("seed", range(60))
def test_wait_union_equals_the_union_of_the_rows_intervals(seed: int) -> None:
    rows, ts, end, wait = _rows(seed)
    t, e, w = ts[rows], end[rows], wait[rows]
    union, busy = wait_union(rows, ts, end, wait)
    assert busy == iv.union_length(t, e)
    assert union == iv.union_length(np.concatenate([t - np.maximum(w, 0), t]), np.concatenate([t, np.maximum(e, t)]))
