"""The compiled pending-DMA window is held to the numpy window (`counters.window_steps`) on random windows."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from nprof.analysis.pending_core import window_steps as compiled
from tests.analysis.helpers import make

cmod = importlib.import_module("nprof.analysis.counters")  # the module, not the pass of the same name


@pytest.mark.parametrize("seed", range(20))
def test_compiled_window_matches_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 60, int(rng.integers(0, 40))))
    ends = np.sort(rng.integers(0, 60, int(rng.integers(0, 40))))  # ties with starts and among themselves
    base = int(rng.integers(0, 5))
    previous = None if seed % 3 == 0 else float(rng.integers(0, 6))
    if starts.size + ends.size == 0:
        return
    want_ts, want_v = cmod.window_steps(starts, ends, base, previous)
    got_ts, got_v = compiled(starts, ends, base, previous or 0.0, previous is not None)
    assert got_ts.tolist() == want_ts.tolist() and got_v.tolist() == want_v.tolist()


def test_pending_dma_compiled_equals_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmod, "COMPILED_FROM", 0)
    rng = np.random.default_rng(5)
    n = 60
    starts, durs = rng.integers(0, 500, n), rng.integers(0, 40, n)
    p = make(None, {"ts": starts.tolist(), "duration": durs.tolist(), "bytes": [64] * n})
    ts, value = cmod.pending_dma(p)
    for t, v in zip(ts.tolist(), value.tolist(), strict=True):
        assert v == sum(1 for s, d in zip(starts, durs, strict=True) if s <= t < s + d)
    for batch in (1, 3, 7):
        chunks = list(cmod.pending_dma_chunks(p, batch=batch))
        assert [t for c in chunks for t in c[0].tolist()] == ts.tolist()
