"""The group index (`nprof view -d` of many ranks): exact busy bins, the analysis from the index equal to the
one from the rank files, lazy rank ingest, level of detail over ranks and the per-collective wait query."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from nprof.analysis.collectives import analyze_group
from nprof.analysis.rank_bands import band_bounds
from nprof.export.group_export import group_summary, load_ranks
from nprof.store import Store
from nprof.store.group_index import COMPUTE_ENGINES, FINE_BINS, busy_bins, fine_busy, read_index
from nprof.store.group_ingest import index_dir, ingest_group
from nprof.web.app import create_app
from nprof.web.serve import ingest_directory
from tests.multiworker.kit import delayed_run

N = 64
LATE = 9


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("scale") / "out"
    delayed_run(d, N, LATE, 4000.0)
    return d


def _files(d: Path) -> list[tuple[int, Path]]:
    return [(r, d / f"profile_rank_{r}.ntff") for r in range(N)]


def test_fine_busy_and_rebinning_match_a_loop() -> None:
    rng = np.random.default_rng(0)
    span = 987_654
    ts = rng.integers(-5, span + 50, 3000)
    dur = rng.integers(0, 2000, 3000)
    fine = fine_busy(ts, dur, span)
    want = np.zeros(FINE_BINS, np.int64)
    for t, d in zip(ts.tolist(), dur.tolist(), strict=True):
        if t >= 0:
            want[min(t * FINE_BINS // span, FINE_BINS - 1)] += d
    np.testing.assert_array_equal(fine, want)
    for bins in (16, 64, 600):
        coarse = np.zeros(bins)
        for t, d in zip(ts.tolist(), dur.tolist(), strict=True):
            if t >= 0:
                coarse[min(t * bins // span, bins - 1)] += d
        idx = type("I", (), {"busy": fine[None, :], "span": span})
        np.testing.assert_allclose(busy_bins(idx, bins)[0], np.minimum(coarse / (span / bins), 5))


def test_index_equals_the_rank_files(run_dir: Path, tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    try:
        ranks = ingest_group(store, _files(run_dir), "g", "g", eager=False)
        assert ranks == [(r, f"g.rank{r}") for r in range(N)] and store.list() == []  # nothing ingested yet
        index = read_index(index_dir(store, "g"))
        assert index is not None and index.busy.shape == (N, FINE_BINS)
        profiles = load_ranks(run_dir)
        want = group_summary(profiles).to_json()  # the reference: the analysis of the loaded rank files
        got = analyze_group(index.facts()).to_json()
        for r in got["ranks"]:
            r["profile_id"] = None
        assert got == want
        assert want["straggler"] == LATE
        span = max(p.total_time_ns for p in profiles.values())
        for r in (0, LATE, N - 1):
            ins = profiles[r].instructions.to_pylist()
            row = np.zeros(FINE_BINS, np.int64)
            for e in ins:
                if e["engine"] in COMPUTE_ENGINES:
                    row[min(e["ts"] * FINE_BINS // span, FINE_BINS - 1)] += e["duration"]
            np.testing.assert_array_equal(index.busy[r], row)
    finally:
        store.close()


def test_lazy_group_api_lod_and_waits(run_dir: Path, tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    try:
        group = ingest_directory(store, str(run_dir), group_id="big", display_name=None, force=False)
        client = TestClient(create_app(store), base_url="http://localhost")
        g = client.get("/api/groups/big").json()
        assert len(g["ranks"]) == N and not any(r["ingested"] for r in g["ranks"])
        full = client.get("/api/groups/big/collectives?bins=64").json()
        assert full["lod"] is None and full["straggler"] == LATE and len(full["ranks"][0]["busy"]) == 64
        lod = client.get("/api/groups/big/collectives?bins=64&rows=10").json()
        bounds = band_bounds(N, 10)
        assert [(b["first"], b["last"] + 1) for b in lod["lod"]["bands"]] == bounds
        assert "ranks" not in lod["ops"][0] and "busy" not in lod["ranks"][0]
        op = full["ops"][0]
        for band, (a, b) in zip(lod["lod"]["bands"], bounds, strict=True):
            waits = sorted(w["wait_ns"] for w in op["ranks"] if a <= w["rank"] < b)
            (bop,) = band["ops"]
            assert bop["wait"] == [waits[0], float(np.median(waits)), waits[-1]] and bop["n"] == b - a
            assert bop["last"] == (LATE if a <= LATE < b else a)  # ties: the first rank of the band
            busy = np.median([full["ranks"][r]["busy"] for r in range(a, b)], axis=0)
            np.testing.assert_allclose(band["busy"], busy, atol=1e-3)
        w = client.get("/api/groups/big/waits?op=0&buckets=4&top=3").json()
        assert w["n"] == N and w["max"] == op["max_wait_ns"] and sum(w["counts"]) == N
        assert w["latest"][0] == {"rank": LATE, "op": 0, "arrival": w["latest"][0]["arrival"], "wait_ns": 0}
        assert client.get("/api/groups/big/waits?op=99").status_code == 422
        assert client.get("/api/groups/big/collectives?bins=70").status_code == 422  # does not divide 4800
        entry = client.post("/api/groups/big/ranks/5").json()
        assert entry["id"] == "big.rank5" and entry["group"] == "big"
        assert [r["rank"] for r in client.get("/api/groups/big").json()["ranks"] if r["ingested"]] == [5]
        assert client.get("/api/profiles/big.rank5/summary?flat=true").status_code == 200
        assert client.post("/api/groups/big/ranks/999").status_code == 422
        assert group["sources"]["5"].endswith("profile_rank_5.ntff")
    finally:
        store.close()


def test_small_group_index_equals_the_databases(run_dir: Path, tmp_path: Path) -> None:
    """4 ranks, ingested whole: the payload from the index equals the one from the rank databases."""
    from nprof.web.group_api import group_collectives

    small = tmp_path / "small"
    small.mkdir()
    for r in (0, 1, LATE, 10):
        shutil.copy(run_dir / f"profile_rank_{r}.ntff", small / f"profile_rank_{r}.ntff")
    store = Store(tmp_path / "db")
    try:
        ingest_directory(store, str(small), group_id="s", display_name=None, force=False)
        assert len(store.list()) == 4
        from_index = group_collectives(store, "s", 64)
        shutil.rmtree(index_dir(store, "s"))
        from_dbs = group_collectives(store, "s", 64)
        assert from_index == from_dbs
    finally:
        store.close()
