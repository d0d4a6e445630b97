"""The compiled LOD base level is held to `lod.bucketize` (numpy, the reference) on random rows."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.store import lod
from nprof.store.lod import bucketize, compiled_base, row_pyramid


def _row(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """Random events: zero-length ones, long ones spanning many buckets, some outside, repeated opcodes."""
    ts = rng.integers(-200, 5000, n)  # some start before the first bucket: clipped, or dropped
    dur = rng.integers(0, 400, n) * (rng.random(n) < 0.85)
    dur[rng.random(n) < 0.05] *= 20
    op = rng.integers(3, 3 + int(rng.integers(1, 9)), n).astype(np.int32)
    nbytes = rng.integers(0, 1 << 20, n)
    flops = rng.integers(0, 1 << 30, n) * (rng.random(n) < 0.5)
    return ts, dur, op, nbytes, flops


@pytest.fixture(autouse=True)
def _always_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lod, "COMPILED_FROM", 0)


@pytest.mark.parametrize("seed", range(12))
def test_compiled_base_level_matches_bucketize(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ts, dur, op, nbytes, flops = _row(rng, int(rng.integers(1, 400)))
    width = int(rng.choice([1, 7, 64, 256]))
    nb = int(rng.integers(1, 6000 // width + 2))  # sometimes shorter than the events: clipped at the end
    got = compiled_base(ts, dur, op, nbytes, flops, width, nb)
    want = bucketize(ts, dur, op, nbytes, flops, 0, width, nb, keep_per_op=True)
    assert got is not None and got.per_op is not None and want.per_op is not None
    np.testing.assert_array_equal(got.busy, want.busy)
    np.testing.assert_array_equal(got.count, want.count)
    np.testing.assert_array_equal(got.op, want.op)
    np.testing.assert_array_equal(got.op_codes, want.op_codes)
    np.testing.assert_array_equal(got.per_op, want.per_op)
    np.testing.assert_array_equal(got.nbytes, want.nbytes)  # bit-identical: same additions in the same order
    np.testing.assert_array_equal(got.flops, want.flops)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_pyramid_matches_the_numpy_pyramid(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(100 + seed)
    ts, dur, op, nbytes, flops = _row(rng, 300)
    span = int((ts + dur).max())
    got = list(row_pyramid(ts, dur, op, nbytes, flops, 3, span, with_peaks=True))
    monkeypatch.setattr(lod, "compiled_base", lambda *a: None)
    want = list(row_pyramid(ts, dur, op, nbytes, flops, 3, span, with_peaks=True))
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, gi, g), (_, wi, w) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gi, wi)
        for name in ("busy", "count", "op", "peak", "peak_rate", "nbytes", "flops"):
            np.testing.assert_array_equal(getattr(g, name), getattr(w, name))


def test_no_events_and_too_many_opcodes_use_the_numpy_passes() -> None:
    empty = np.zeros(0, np.int64)
    assert compiled_base(empty, empty, empty, empty, empty, 8, 4) is None
    ts = np.arange(10, dtype=np.int64)
    assert compiled_base(ts, ts, ts, ts, ts, 1, lod.MAX_CELLS) is None  # 10 opcodes x 2^24 buckets: lumped


@pytest.mark.parametrize("seed", range(10))
def test_compiled_peaks_match_the_numpy_steps(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ties (starts and ends at one instant, bucket edges), zero-length events, events before the origin and
    after the last bucket: the merge gives the numpy steps' integers exactly."""
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 500))
    ts = rng.integers(-100, 300 if seed % 2 else 3000, n)  # a narrow range: many equal instants
    dur = rng.integers(0, 50, n) * (rng.random(n) < 0.8)
    nbytes = rng.integers(0, 1 << 24, n)
    width, nb, origin = int(rng.choice([1, 3, 16, 100])), int(rng.integers(1, 80)), int(rng.integers(-50, 50))
    got = lod.peaks(ts, dur, nbytes, origin, width, nb)
    monkeypatch.setattr(lod, "load_compiled", lambda *a, **k: None)
    want = lod.peaks(ts, dur, nbytes, origin, width, nb)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
