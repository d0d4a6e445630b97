"""Thresholds of the findings pass are a parameter: defaults unchanged, each rule follows its field."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from nprof.analysis import DEFAULT_THRESHOLDS, Thresholds, run_all
from nprof.analysis.findings import findings
from nprof.analysis.metrics import summary_metrics
from nprof.analysis.thresholds import parse_thresholds
from nprof.analysis.warnings import warnings
from nprof.errors import NprofError
from tests.analysis.helpers import make


def _kinds(table) -> list[str]:
    return table["kind"].to_pylist()


def _serial_gap_profile():
    # total 5100 ns: 800 ns of DMA alone (15.7 %), an idle gap of 4000 ns (78 %)
    return make(
        {"ts": [0, 100, 5000], "duration": [100, 100, 100], "engine": ["tensor", "vector", "scalar"]},
        {"ts": [200], "duration": [800], "bytes": [1 << 20]},
    )


def test_defaults_are_the_documented_values() -> None:
    assert Thresholds(
        min_engine_share=0.01, exposed_dma_share=0.10, gap_share=0.05, gap_min_ns=1_000, max_gaps=5,
        wait_share=0.10, host_bound_ratio=1.0, reload_limit=2, small_dma_partition_bytes=2048,
        small_dma_bytes=32768, latency_share=0.5,
    ) == DEFAULT_THRESHOLDS  # fmt: skip
    p = _serial_gap_profile()
    assert findings(p).equals(findings(p, thresholds=Thresholds()))


def test_each_rule_follows_its_threshold() -> None:
    p = _serial_gap_profile()
    assert {"exposed_dma", "idle_gap", "serial_engines"} <= set(_kinds(findings(p)))
    assert "exposed_dma" not in _kinds(findings(p, thresholds=Thresholds(exposed_dma_share=0.2)))
    assert "idle_gap" not in _kinds(findings(p, thresholds=Thresholds(gap_min_ns=4001)))
    assert "idle_gap" in _kinds(findings(p, thresholds=Thresholds(gap_min_ns=4000)))
    assert "idle_gap" not in _kinds(findings(p, thresholds=Thresholds(max_gaps=0)))
    # with engines under 2 % of the run left out, no two engines remain to be serial
    assert "serial_engines" not in _kinds(findings(p, thresholds=Thresholds(min_engine_share=0.02)))
    waits = make({"ts": [0, 500], "duration": [100, 100], "wait_ns": [0, 400]})  # 400 of 600 ns waiting
    assert "semaphore_wait" in _kinds(findings(waits, thresholds=Thresholds(wait_share=0.6)))
    assert "semaphore_wait" not in _kinds(findings(waits, thresholds=Thresholds(wait_share=0.7)))


def test_reload_limit_sets_the_tensor_reload_warning_and_finding() -> None:
    p = make(dma={"ts": [0, 100, 200, 300, 400], "duration": [50] * 5, "bytes": [1 << 16] * 5,
                  "tensor": ["w", "w", "w", "x", "x"]})  # fmt: skip

    def reloaded(th: Thresholds) -> tuple[list[str], list[str]]:
        warned = [r["tensor"] for r in warnings(p, thresholds=th).to_pylist() if r["kind"] == "tensor_reload"]
        found = [r["message"] for r in findings(p, thresholds=th).to_pylist() if r["kind"] == "tensor_reload"]
        return warned, found

    warned, found = reloaded(DEFAULT_THRESHOLDS)
    assert warned == ["w"] and len(found) == 1 and "more than twice" in found[0]
    warned, found = reloaded(Thresholds(reload_limit=1))
    assert warned == ["w", "x"] and "more than once" in found[0]
    assert reloaded(Thresholds(reload_limit=3)) == ([], [])
    assert _kinds(run_all(p, thresholds=Thresholds(reload_limit=1))["warnings"]).count("tensor_reload") == 2


def test_the_small_dma_sizes_set_the_warning_the_finding_and_the_queue_table() -> None:
    # 16 partitions: 20 KiB is 1280 B per partition, 40 KiB 2560 B; 64 KiB over 16 is 4 KiB per partition
    p = make(dma={"ts": [0, 100, 200], "duration": [50] * 3, "bytes": [20 << 10, 40 << 10, 64 << 10],
                  "partitions": [16] * 3, "tensor": ["a", "b", "c"]})  # fmt: skip

    def small(th: Thresholds) -> tuple[list[str], int, int]:
        tables = run_all(p, thresholds=th)
        warned = [r["tensor"] for r in tables["warnings"].to_pylist() if r["kind"] == "small_dma"]
        found = [r for r in tables["findings"].to_pylist() if r["kind"] == "small_dma"]
        return warned, len(found), tables["dma_queues"]["small_transfers"].to_pylist()[0]

    assert small(DEFAULT_THRESHOLDS) == (["a"], 1, 1)  # 20 KiB: under 2 KiB per partition and under 32 KiB
    assert small(Thresholds(small_dma_partition_bytes=3000)) == (["a", "b"], 1, 2)
    assert small(Thresholds(small_dma_partition_bytes=0, small_dma_bytes=41 << 10)) == (["a", "b"], 1, 2)
    assert small(Thresholds(small_dma_partition_bytes=1024, small_dma_bytes=0)) == ([], 0, 0)
    message = warnings(p, thresholds=Thresholds(small_dma_partition_bytes=4096)).to_pylist()[0]["message"]
    assert ">= 4.0 KiB per partition" in message, message


def test_latency_share_sets_the_bound_verdict_and_the_finding() -> None:
    from tests.analysis.test_latency import _chain

    p = make(**_chain(6))
    share = summary_metrics(p)["dma_latency_path_percent"] / 100  # about 0.86

    def verdict(at: float) -> tuple[object, list[str]]:
        th = Thresholds(latency_share=at)
        bound = summary_metrics(p, thresholds=th).get("bound")
        return bound, [k for k in _kinds(findings(p, thresholds=th)) if k == "latency_bound"]

    assert verdict(0.5) == ("latency", ["latency_bound"])
    assert verdict(share) == ("latency", ["latency_bound"])  # at the share: reported
    assert verdict(min(1.0, share + 0.01))[0] != "latency" and verdict(min(1.0, share + 0.01))[1] == []
    summary = run_all(p, thresholds=Thresholds(latency_share=1.0))["summary"].to_pylist()
    assert [r["value"] for r in summary if r["name"] == "bound"] != ["latency"]
    assert summary_metrics(p)["bound"] == "latency"  # the default is not disturbed by the tuned memo


def test_run_all_passes_thresholds_to_findings() -> None:
    p = _serial_gap_profile()
    assert "idle_gap" in _kinds(run_all(p)["findings"])
    assert "idle_gap" not in _kinds(run_all(p, thresholds=Thresholds(gap_share=0.9))["findings"])
    with pytest.raises(TypeError):
        run_all(p, Thresholds())  # keyword only


@pytest.mark.parametrize("bad", [{"gap_share": 1.5}, {"wait_share": -0.1}, {"max_gaps": -1}, {"host_bound_ratio": -1}])
def test_out_of_range_values_are_refused(bad: dict) -> None:
    with pytest.raises(NprofError, match=next(iter(bad))):
        Thresholds(**bad)


def test_parse_thresholds_applies_name_value_pairs() -> None:
    t = parse_thresholds(["gap_share=0.02", " max_gaps = 3 "])
    assert t == Thresholds(gap_share=0.02, max_gaps=3) and isinstance(t.max_gaps, int)
    assert t.changed() == {"gap_share": 0.02, "max_gaps": 3}
    assert parse_thresholds([]) == DEFAULT_THRESHOLDS and DEFAULT_THRESHOLDS.changed() == {}


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["nope=1"], "unknown threshold 'nope'; valid thresholds: min_engine_share, exposed_dma_share, gap_share, "
                     "gap_min_ns, max_gaps, wait_share, host_bound_ratio, reload_limit, small_dma_partition_bytes, "
                     "small_dma_bytes, latency_share"),
        (["gap_share"], "expected NAME=VALUE"),
        (["=0.1"], "expected NAME=VALUE"),
        (["gap_share=0.1", "gap_share=0.2"], "given twice"),
        (["gap_share=lots"], "gap_share must be a number, got 'lots'"),
        (["max_gaps=1.5"], "max_gaps must be a whole number"),
        (["gap_share=2"], "gap_share must be between 0 and 1"),
        (["gap_share=nan"], "gap_share must be between 0 and 1"),
    ],
)  # fmt: skip
def test_parse_thresholds_refuses_in_one_line(pairs: list[str], message: str) -> None:
    with pytest.raises(NprofError) as err:
        parse_thresholds(pairs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_threshold_is_documented_with_its_default() -> None:
    text = (Path(__file__).parents[2] / "docs" / "profile-format.md").read_text()
    section = text.split("### Finding thresholds", 1)[1].split("\n### ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, flags=re.MULTILINE))
    assert {k: float(v) for k, v in rows.items()} == {f.name: float(f.default) for f in fields(Thresholds)}


def test_host_profiles_get_host_advice() -> None:
    """A NeuronCore's idle gap points at semaphores; a host profile's at unrecorded host work."""
    device = findings(_serial_gap_profile())
    gap = device["message"].to_pylist()[_kinds(device).index("idle_gap")]
    assert "semaphore wait" in gap
    host = findings(make(
        {"ts": [0, 100, 5000], "duration": [100, 100, 100], "engine": ["tensor", "vector", "scalar"]},
        device="cpu", preset=None,
    ))  # fmt: skip
    message = host["message"].to_pylist()[_kinds(host).index("idle_gap")]
    assert "semaphore" not in message and "work the trace does not record" in message
