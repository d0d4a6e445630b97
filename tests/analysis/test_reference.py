"""Vectorised passes held to plain, obviously correct per-event Python on random profiles."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from nprof.analysis import facts as facts_module
from nprof.analysis.counters import pending_dma
from nprof.analysis.facts import facts
from nprof.analysis.findings import engine_tracks
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS
from nprof.analysis.warnings import RELOAD_LIMIT, warnings
from nprof.profile import Profile
from tests.analysis.helpers import make


def _random_dma(seed: int) -> tuple[Profile, list[dict]]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    ts = np.sort(rng.integers(0, 5000, n)) if rng.random() < 0.7 else rng.integers(0, 5000, n)
    rows = {
        "ts": ts.tolist(),
        "duration": rng.integers(0, 400, n).tolist(),
        "bytes": rng.choice([256, 4096, 40000, 300000], n).tolist(),
        "partitions": rng.choice([1, 16, 128], n).tolist(),
        "tensor": [None if rng.random() < 0.15 else f"t{int(k)}" for k in rng.integers(0, 8, n)],
        "direction": rng.choice(["hbm->sbuf", "sbuf->hbm", "hbm->hbm"], n).tolist(),
        "queue": [f"q{int(k)}" for k in rng.integers(0, 4, n)],
        "nki_source_location": [f"k.py:{int(k)}" for k in rng.integers(1, 5, n)],
    }
    p = make(None, rows)
    return p, p.dma.to_pylist()


def _reference_groups(events: list[dict], keep, key) -> dict[object, list[dict]]:
    groups: dict[object, list[dict]] = defaultdict(list)
    for e in events:
        if keep(e):
            groups[key(e)].append(e)
    return groups


def _check(rows: list[dict], groups: dict[object, list[dict]]) -> None:
    assert len(rows) == len(groups)
    by_tensor = {r["tensor"]: r for r in rows}
    for tensor, members in groups.items():
        r = by_tensor[tensor]
        assert r["count"] == len(members)
        assert r["bytes"] == sum(e["bytes"] for e in members)
        assert r["ts"] == min(e["ts"] for e in members)
        assert r["end"] == max(e["ts"] + e["duration"] for e in members)
        assert r["event_ids"] == [e["id"] for e in members]  # table order within a tensor
        top = Counter(e["nki_source_location"] for e in members).most_common()
        best = top[0][1]
        assert r["source"].split(", ")[0] in {s for s, c in top if c == best}
        if r["kind"] == "small_dma":  # the message gives the mean partitions per transfer
            mean = sum(max(e["partitions"], 1) for e in members) / len(members)
            assert f"over {mean:.0f} partition" in r["message"]


@pytest.mark.parametrize("seed", range(12))
def test_dma_warnings_match_a_per_event_reference(seed: int) -> None:
    p, events = _random_dma(seed)
    out = warnings(p).to_pylist()
    loads = [e for e in events if e["direction"].split("->")[0] == "hbm"]
    times = Counter(e["tensor"] for e in loads if e["tensor"] is not None)
    reload = _reference_groups(
        loads, lambda e: e["tensor"] is not None and times[e["tensor"]] > RELOAD_LIMIT, lambda e: e["tensor"]
    )
    _check([r for r in out if r["kind"] == "tensor_reload"], reload)

    def small(e: dict) -> bool:
        per_partition, total = DEFAULT_THRESHOLDS.small_dma_partition_bytes, DEFAULT_THRESHOLDS.small_dma_bytes
        return e["bytes"] < per_partition * max(e["partitions"], 1) or e["bytes"] < total

    _check([r for r in out if r["kind"] == "small_dma"], _reference_groups(events, small, lambda e: e["tensor"]))


@pytest.mark.parametrize("seed", range(12))
def test_pending_dma_matches_a_sweep(seed: int) -> None:
    p, events = _random_dma(100 + seed)
    ts, value = pending_dma(p)
    instants = sorted({e["ts"] for e in events} | {e["ts"] + e["duration"] for e in events})
    expected, last = [], None
    for t in instants:  # in flight at t: started at or before t, ends after t
        v = sum(1 for e in events if e["ts"] <= t < e["ts"] + e["duration"])
        if v != last:
            expected.append((t, float(v)))
            last = v
    assert list(zip(ts.tolist(), value.tolist(), strict=True)) == expected


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_compute_union_matches_a_sweep(seed: int, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-engine merges by numpy and by the compiled loop (time-sorted rows, forced from 0 rows)."""
    monkeypatch.setattr(facts_module, "ENGINE_COMPILED_FROM", 0 if compiled else 10**12)
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 200))
    engines = rng.choice(["tensor", "vector", "scalar", "sync"], n).tolist()
    ts = rng.integers(0, 3000, n)
    ts = (np.sort(ts) if compiled else ts).tolist()
    dur = rng.integers(0, 200, n).tolist()
    p = make({"ts": ts, "duration": dur, "engine": engines})
    starts, ends = facts(p).compute_merged
    covered = {t for s, d, e in zip(ts, dur, engines, strict=True) if e != "sync" for t in range(s, s + d)}
    got = {t for s, e in zip(starts.tolist(), ends.tolist(), strict=True) for t in range(s, e)}
    assert got == covered
    assert all(a < b for a, b in zip(ends.tolist(), starts.tolist()[1:], strict=False))  # disjoint, with gaps


@pytest.mark.parametrize("seed", range(4))
def test_engine_tracks_match_a_per_event_reference(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(1, 100))
    engines = rng.choice(["tensor", "vector", "scalar"], n).tolist()
    tracks = [
        f"{e}.{int(k)}" if rng.random() < 0.5 else "thread" for e, k in zip(engines, rng.integers(0, 3, n), strict=True)
    ]
    p = make({"ts": list(range(n)), "duration": [1] * n, "engine": engines, "track": tracks})
    expected: dict[str, set[str]] = defaultdict(set)
    for e, t in zip(engines, tracks, strict=True):
        expected[e].add(t)
    assert engine_tracks(p) == dict(expected)
