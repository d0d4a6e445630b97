"""A search query past its time budget is interrupted and refused with one line (HTTP 422)."""

from __future__ import annotations

import importlib
import time

import duckdb
import pytest

from nprof.errors import NprofError


def test_a_query_past_the_budget_is_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = importlib.import_module("nprof.store.search")  # the module (the package exports its function)
    monkeypatch.setattr(mod, "SEARCH_BUDGET_S", 0.3)
    cur = duckdb.connect()
    t0 = time.monotonic()
    with pytest.raises(NprofError, match=r"longer than its 0\.3 s budget"):
        mod._run(cur, "SELECT count(*) FROM range(?) a, range(?) b WHERE a.range + b.range = -1", [10**6, 10**6])
    assert time.monotonic() - t0 < 5
    assert mod._run(cur, "SELECT 1 + ?", [1]) == [(2,)]  # the cursor still works
