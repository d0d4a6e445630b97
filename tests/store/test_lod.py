"""Level-of-detail peaks: held to a plain reference on random events; counters keep their max when zoomed out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.store import Store, viewport
from nprof.store.lod import peaks, row_pyramid
from nprof.store.synthetic import synthetic_profile


def _reference_peaks(
    ts: list[int], dur: list[int], nbytes: list[int], origin: int, width: int, nb: int
) -> tuple[list[int], list[float]]:
    """Obviously correct: the in-flight values only rise at event starts, so each bucket's maximum is
    reached at its start or at an event start inside it; evaluate every such instant by brute force."""
    out_n, out_r = [], []
    for k in range(nb):
        lo, hi = origin + k * width, origin + (k + 1) * width
        instants = [lo] + [s for s in ts if lo <= s < hi]
        best_n, best_r = 0, 0.0
        for t in instants:
            live = [i for i in range(len(ts)) if dur[i] > 0 and ts[i] <= t < ts[i] + dur[i]]
            best_n = max(best_n, len(live))
            best_r = max(best_r, sum(nbytes[i] / dur[i] for i in live))
        out_n.append(best_n)
        out_r.append(best_r)
    return out_n, out_r


def _random_events(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ts = rng.integers(-50, 1000, n)
    dur = rng.integers(0, 300, n) * (rng.random(n) < 0.9)  # some zero-length events
    nbytes = rng.integers(0, 1 << 16, n)
    return ts, dur, nbytes


@pytest.mark.parametrize("seed", range(6))
def test_peaks_match_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ts, dur, nbytes = _random_events(rng, int(rng.integers(1, 120)))
    width, nb, origin = int(rng.integers(1, 90)), int(rng.integers(1, 30)), int(rng.integers(-20, 200))
    n, r = peaks(ts, dur, nbytes, origin, width, nb)
    ref_n, ref_r = _reference_peaks(ts.tolist(), dur.tolist(), nbytes.tolist(), origin, width, nb)
    assert n.tolist() == ref_n
    assert r == pytest.approx(ref_r, abs=nb * 1e-5)  # fixed point: 2**-20 bytes/ns per event in flight


def test_peaks_of_no_events_are_zero() -> None:
    empty = np.zeros(0, dtype=np.int64)
    n, r = peaks(empty, empty, empty, 0, 10, 3)
    assert n.tolist() == [0, 0, 0] and r.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(3))
def test_every_pyramid_level_keeps_the_exact_max(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    ts, dur, nbytes = _random_events(rng, 150)
    ts = np.abs(ts)
    op = rng.integers(0, 3, ts.size)
    span = int((ts + dur).max())
    levels = 0
    for level, idx, b in row_pyramid(ts, dur, op, nbytes, np.zeros(ts.size), 2, span, with_peaks=True):
        width = 1 << level
        nb = -(-span // width)
        ref_n, ref_r = _reference_peaks(ts.tolist(), dur.tolist(), nbytes.tolist(), 0, width, nb)
        assert b.peak is not None and b.peak_rate is not None
        assert b.peak.tolist() == [ref_n[i] for i in idx]
        assert b.peak_rate == pytest.approx([ref_r[i] for i in idx], abs=1e-4)
        assert all(ref_n[i] == 0 for i in set(range(nb)) - set(idx.tolist()))  # dropped buckets are empty
        levels += 1
    assert levels > 3


def test_zoomed_out_dma_counters_keep_the_peak(tmp_path: Path) -> None:
    """The overview's max is the instantaneous peak: a whole count, the same zoomed out as zoomed in."""
    store = Store(tmp_path)
    p = synthetic_profile(60_000, seed=3)
    store.ingest(p, "p")
    ts, dur = p.dma["ts"].to_numpy(), p.dma["duration"].to_numpy()
    nbytes = p.dma["bytes"].to_numpy()
    span = int((ts + dur).max())
    true_n, true_r = peaks(ts, dur, nbytes, 0, span, 1)
    with store.session("p") as (cur, meta):
        keys = ["counter:pending_dma", "counter:dma_throughput"]
        t_max = meta["stats"]["t_max"]
        overview = viewport(cur, meta, 0, t_max, 200, keys)["rows"]
        peak_at = int(np.argmax(overview[0]["max"]))
        t = overview[0]["ts"][peak_at]
        zoomed = viewport(cur, meta, t, t + overview[0]["dur"][peak_at], 1000, keys)["rows"]
    pending, rate = overview
    assert max(pending["max"]) == int(true_n[0])
    assert all(float(v).is_integer() for v in pending["max"])
    assert max(rate["max"]) == pytest.approx(float(true_r[0]), rel=1e-6)
    assert max(zoomed[0]["max"]) == max(pending["max"])
    assert max(rate["max"]) >= max(zoomed[1]["max"]) - 1e-6
    assert all(lo <= m <= hi for row in overview for lo, m, hi in zip(row["min"], row["mean"], row["max"], strict=True))
    store.close()
