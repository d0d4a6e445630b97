"""`chrome_check.check_times` and `check_counters` (finiteness by each array's min and max) held to the
obviously-correct form (an isfinite pass over every array) on random times with NaN, infinities, negative
durations and long spans: the same error, or none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.capture.chrome_check import MAX_SPAN_NS, check_counters, check_times
from nprof.errors import NprofError

_PATH = Path("t.json")


def _reference(ts_us: np.ndarray, dur_us: np.ndarray, c_ts: np.ndarray, f_ts: np.ndarray) -> str | None:
    arrays = (ts_us, dur_us, c_ts, f_ts)
    if any(a.ndim != 1 for a in arrays):
        return "list"
    if not all(np.isfinite(a).all() for a in arrays):
        return "infinite or NaN"
    if len(dur_us) and dur_us.min() < 0:
        return "negative duration"
    starts = [a.min() for a in (ts_us, c_ts, f_ts) if len(a)]
    ends = [a.max() for a in (ts_us + dur_us, c_ts, f_ts) if len(a)]
    if starts and (max(ends) - min(starts)) * 1000.0 >= MAX_SPAN_NS:
        return "spans more than"
    return None


def _times(rng: np.random.Generator, n: int) -> np.ndarray:
    a = rng.uniform(-5.0, 5.0, n) * float(10 ** rng.integers(0, 12))
    for bad in (np.nan, np.inf, -np.inf):
        if n and rng.random() < 0.05:
            a[rng.integers(0, n)] = bad
    return a


@pytest.mark.parametrize("seed", range(300))
def test_check_times_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 6))
    ts, c_ts, f_ts = (_times(rng, int(rng.integers(0, 6))) for _ in range(3))
    ts = _times(rng, n)
    dur = np.abs(_times(rng, n)) if rng.random() < 0.6 else _times(rng, n)
    if rng.random() < 0.1:
        ts = ts.reshape(-1, 1) if n else ts
    want = _reference(ts, dur, c_ts, f_ts)
    if want is None:
        check_times(ts, dur, c_ts, f_ts, _PATH)
        return
    with pytest.raises(NprofError, match=want):
        check_times(ts, dur, c_ts, f_ts, _PATH)


@pytest.mark.parametrize("seed", range(100))
def test_check_counters_matches_isfinite(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = _times(rng, int(rng.integers(0, 8))).tolist() if seed % 3 else [float(v) for v in rng.integers(-9, 9, 3)]
    if rng.random() < 0.2:
        values.append(10**400)  # beyond the double range
    try:
        want = np.asarray(values, dtype=np.float64)
    except OverflowError:
        with pytest.raises(NprofError, match="beyond the double range"):
            check_counters(values, _PATH)
        return
    if not np.isfinite(want).all():
        with pytest.raises(NprofError, match="infinite"):
            check_counters(values, _PATH)
        return
    assert np.array_equal(check_counters(values, _PATH), want)
