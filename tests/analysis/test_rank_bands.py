"""Level of detail over ranks and wait histograms, held to plain loops on random inputs."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from nprof.analysis.rank_bands import band_argmax, band_bounds, band_rows, band_stats, wait_histogram


def _ref_bounds(n: int, rows: int) -> list[tuple[int, int]]:
    k = math.ceil(n / rows) if n > rows else 1
    out, a = [], 0
    while a < n:
        out.append((a, min(a + k, n)))
        a += k
    return out


def _ref_stats(values: list[float], bounds: list[tuple[int, int]]) -> list[list[float]]:
    out = []
    for a, b in bounds:
        seg = [v for v in values[a:b] if not math.isnan(v)]
        out.append([min(seg), statistics.median(seg), max(seg)] if seg else [math.nan] * 3)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bands_match_plain_loops(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 1100))
    rows = int(rng.integers(1, 300))
    values = rng.integers(0, 50, n).astype(np.float64)  # small range: many ties
    values[rng.random(n) < 0.2] = np.nan
    bounds = band_bounds(n, rows)
    assert bounds == _ref_bounds(n, rows)
    assert len(bounds) <= rows and bounds[0][0] == 0 and bounds[-1][1] == n
    np.testing.assert_array_equal(band_stats(values, bounds), np.asarray(_ref_stats(values.tolist(), bounds)))
    want = []
    for a, b in bounds:
        seg = [(v, i) for i, v in enumerate(values[a:b].tolist(), a) if not math.isnan(v)]
        want.append(max(seg, key=lambda p: (p[0], -p[1]))[1] if seg else -1)
    assert band_argmax(values, bounds).tolist() == want
    matrix = rng.random((n, 5))
    matrix[rng.random((n, 5)) < 0.3] = np.nan
    got = band_rows(matrix, bounds)
    for c in range(5):
        np.testing.assert_allclose(got[:, :, c], band_stats(matrix[:, c], bounds))


def test_one_band_per_rank_when_they_fit() -> None:
    assert band_bounds(5, 8) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert band_bounds(0, 8) == []
    assert band_bounds(1024, 100) == [(a, min(a + 11, 1024)) for a in range(0, 1024, 11)]


@pytest.mark.parametrize("seed", range(4))
def test_wait_histogram_matches_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    waits = rng.integers(0, 10**6, int(rng.integers(1, 500)))
    buckets = int(rng.integers(1, 40))
    edges, counts = wait_histogram(waits, buckets)
    top = int(waits.max())
    want = [0] * buckets
    for w in waits.tolist():
        want[min(w * buckets // top, buckets - 1)] += 1
    assert counts == want and sum(counts) == waits.size
    assert edges[0] == 0 and edges[-1] == top and len(edges) == buckets + 1 and edges == sorted(edges)


def test_wait_histogram_edge_cases() -> None:
    assert wait_histogram(np.zeros(7, np.int64), 3) == ([0, 0, 0, 0], [7, 0, 0])
    assert wait_histogram(np.asarray([], np.int64), 2) == ([0, 0, 0], [0, 0])
    with pytest.raises(ValueError, match=">= 0"):
        wait_histogram(np.asarray([-1]), 2)
