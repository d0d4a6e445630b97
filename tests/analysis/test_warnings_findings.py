"""Warnings and findings on small hand-built profiles."""

from __future__ import annotations

from nprof.analysis.findings import findings
from nprof.analysis.warnings import warnings
from nprof.profile import Profile, ProfileInfo
from tests.analysis.helpers import make


def _by_kind(table, kind):
    return [r for r in table.to_pylist() if r["kind"] == kind]


def test_tensor_loaded_three_times() -> None:
    big = 128 * 4096
    src = ["k.py:3"] * 3 + ["k.py:9"] * 2
    p = make(dma={"ts": [0, 100, 200, 300, 400], "duration": [50] * 5, "bytes": [big] * 5,
                  "tensor": ["w", "w", "w", "x", "x"], "nki_source_location": src})  # fmt: skip
    rows = _by_kind(warnings(p), "tensor_reload")
    assert len(rows) == 1  # x is loaded twice only
    w = rows[0]
    assert w["tensor"] == "w" and w["count"] == 3 and w["event_ids"] == [1001, 1002, 1003]
    assert (w["ts"], w["end"]) == (0, 250) and w["source"] == "k.py:3"
    assert "3 times" in w["message"]
    f = [r for r in findings(p).to_pylist() if r["kind"] == "tensor_reload"]
    assert f and f[0]["event_ids"] == [1001, 1002, 1003] and f[0]["sources"] == ["k.py:3"]


def test_small_dma_thresholds() -> None:
    # 2048 B/partition * 16 partitions = 32 KiB: exactly efficient; one byte less per partition is small
    p = make(dma={"ts": [0, 100, 200], "duration": [10] * 3, "bytes": [32768, 16 * 2047, 40000],
                  "partitions": [16, 16, 128], "tensor": ["a", "b", "c"]})  # fmt: skip
    rows = _by_kind(warnings(p), "small_dma")
    assert sorted(r["tensor"] for r in rows) == ["b", "c"]  # c: 40000/128 < 2 KiB per partition
    assert all(r["count"] == 1 for r in rows)


def test_throttling_regions() -> None:
    p = Profile.build(
        ProfileInfo(device="cpu", total_time_ns=1000),
        counters={"ts": [0, 100, 200, 300, 600], "name": ["throttle_pct"] * 5, "value": [0, 30, 50, 0, 10]},
    )
    rows = _by_kind(warnings(p), "throttling")
    assert [(r["ts"], r["end"]) for r in rows] == [(100, 300), (600, 1000)]
    assert "peak 50" in rows[0]["message"]


def test_no_warnings_on_clean_profile() -> None:
    p = make(dma={"ts": [0], "duration": [10], "bytes": [1 << 20], "tensor": ["w"]})
    assert warnings(p).num_rows == 0


def test_serial_engines_and_exposed_dma_and_gap() -> None:
    p = make(
        {"ts": [0, 100, 5000], "duration": [100, 100, 100], "engine": ["tensor", "vector", "scalar"],
         "nki_source_location": ["k.py:1", "k.py:2", "k.py:3"]},
        {"ts": [200], "duration": [800], "bytes": [1 << 20]},
    )  # fmt: skip
    rows = {r["kind"]: r for r in findings(p).to_pylist()}
    serial = rows["serial_engines"]
    assert "never run at the same time" in serial["message"] and serial["event_ids"] == [1, 2, 3]
    exposed = rows["exposed_dma"]
    assert exposed["impact_ns"] == 800 and exposed["event_ids"] == [1001]
    gap = rows["idle_gap"]
    assert (gap["ts"], gap["end"]) == (1000, 5000)
    assert gap["event_ids"] == [1001, 3] and "k.py:3" in gap["message"]


def test_overlapping_engines_not_reported() -> None:
    p = make({"ts": [0, 50], "duration": [100, 100], "engine": ["tensor", "vector"]})
    kinds = findings(p)["kind"].to_pylist()
    assert "serial_engines" not in kinds and "idle_gap" not in kinds


def test_semaphore_wait_finding() -> None:
    p = make({"ts": [0, 500], "duration": [100, 100], "wait_ns": [0, 400]})
    rows = [r for r in findings(p).to_pylist() if r["kind"] == "semaphore_wait"]
    assert rows and rows[0]["event_ids"] == [2] and rows[0]["impact_ns"] == 400


def test_findings_sorted_warnings_first() -> None:
    from tests.conftest import tiny_profile

    sev = findings(tiny_profile())["severity"].to_pylist()
    assert sev == sorted(sev, key=lambda s: s != "warning")
