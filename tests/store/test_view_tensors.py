"""DMA tensor labels of the viewport: read from the events' `tensor` column, held to a plain lookup of the `dma`
table by id (the reference), and still given by stores ingested before that column (the lookup itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import orjson
import pytest

from nprof.profile import Profile
from nprof.store import Store, viewport
from nprof.store.synthetic import synthetic_profile
from tests.analysis.test_reference import _random_dma

PROFILES = {
    "random-dma-3": lambda: _random_dma(3)[0],
    "random-dma-8": lambda: _random_dma(8)[0],
    "random-dma-21": lambda: _random_dma(21)[0],
    "synthetic-2": lambda: synthetic_profile(3000, seed=2),
}


def _reference(
    cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], ans: dict[str, Any]
) -> tuple[list[list[int]], list[str]]:
    """Plain labels: each DMA event item's ids looked up one by one in `dma`, names numbered as first met."""
    dma_rows = {r["key"] for r in meta["rows"] if r["kind"] == "dma"}
    names: dict[str, int] = {}
    lists = []
    for it in ans["rows"]:
        if it.get("mode") != "events" or it["key"] not in dma_rows:
            continue
        codes = []
        for i in it["id"]:
            got = cur.execute("SELECT tensor FROM dma WHERE id = ?", [i]).fetchall()
            codes.append(-1 if not got or got[0][0] is None else names.setdefault(got[0][0], len(names)))
        lists.append(codes)
    return lists, list(names)


def _windows(t_max: int, seed: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    out = [(0, t_max, 800)]
    for _ in range(6):
        a, b = sorted(int(x) for x in rng.integers(0, t_max + 1, 2))
        out.append((a, max(b, a + 1), int(rng.integers(50, 1500))))
    return out


def _labels(ans: dict[str, Any]) -> tuple[list[list[int]], list[str]]:
    lists = [it["tensor"] for it in ans["rows"] if it.get("mode") == "events" and "tensor" in it]
    return lists, ans.get("tensors", [])


@pytest.mark.parametrize("case", sorted(PROFILES))
def test_labels_from_the_events_column_match_the_dma_lookup(case: str, tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    store.ingest(PROFILES[case](), "p")
    checked = 0
    with store.session("p") as (cur, meta):
        assert meta["stats"]["events_tensor"] and "tensors" in meta
        for i, (t0, t1, width) in enumerate(_windows(meta["stats"]["t_max"], seed=len(case))):
            ans = viewport(cur, meta, t0, t1, width, max_items=50 + 100 * i)
            want_lists, want_names = _reference(cur, meta, ans)
            got_lists, got_names = _labels(ans)
            if not sum(len(x) for x in want_lists):
                continue
            assert got_lists == want_lists and got_names == want_names, (t0, t1, width)
            checked += 1
    store.close()
    assert checked  # the windows did label some transfers


def _as_old_store(store: Store, profile_id: str) -> None:
    """Rewrite the profile's database as ingest wrote it before the events' tensor column."""
    path = store.db_path(profile_id)
    con = duckdb.connect(str(path))
    try:
        con.execute("ALTER TABLE events DROP COLUMN tensor")
        con.execute("DROP TABLE tensors")
        (value,) = con.execute("SELECT value FROM meta WHERE key = 'stats'").fetchone() or ("{}",)
        stats = orjson.loads(value)
        del stats["events_tensor"]
        con.execute("UPDATE meta SET value = ? WHERE key = 'stats'", [orjson.dumps(stats).decode()])
    finally:
        con.close()


def test_a_store_without_the_column_gives_the_same_viewport(tmp_path: Path) -> None:
    p = _random_dma(8)[0].save(tmp_path / "p.ntff")
    new, old = Store(tmp_path / "new"), Store(tmp_path / "old")
    new.ingest(Profile.load(p), "p")
    old.ingest(Profile.load(p), "p")
    old.close()
    _as_old_store(old, "p")
    labelled = 0
    with new.session("p") as (cur, meta), old.session("p") as (old_cur, old_meta):
        assert "events_tensor" not in old_meta["stats"] and "tensors" not in old_meta
        assert "tensor" not in [d[0] for d in old_cur.execute("SELECT * FROM events LIMIT 0").description]
        for t0, t1, width in _windows(meta["stats"]["t_max"], seed=4):
            want = viewport(cur, meta, t0, t1, width)
            assert viewport(old_cur, old_meta, t0, t1, width) == want
            labelled += len(want.get("tensors", []))
    new.close()
    old.close()
    assert labelled
