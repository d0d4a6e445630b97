"""Engine waits counted once across tracks, and the latency-bound verdict from the critical path."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from nprof.analysis.engines import engines
from nprof.analysis.findings import findings
from nprof.analysis.latency import engine_wait_ns, latency_idle
from nprof.analysis.metrics import summary_metrics
from tests.analysis.helpers import make


def test_waits_on_two_tensor_tracks_count_once_and_not_while_busy() -> None:
    p = make(
        {
            "ts": [0, 100, 100],
            "duration": [60, 10, 10],
            "engine": ["tensor", "tensor", "tensor"],
            "track": ["tensor.moving", "tensor.stationary", "tensor.moving"],
            "wait_ns": [0, 100, 40],  # the stationary track waits [0, 100) while moving runs [0, 60)
        }
    )
    assert engine_wait_ns(p, "tensor") == 40  # [60, 100): waiting with nothing running
    total = summary_metrics(p)["total_time"] * 1e9
    row = engines(p).to_pylist()[0]
    assert row["engine"] == "tensor" and row["wait_ns"] == 40 <= total


def _chain(n: int, lat: int = 1300) -> dict:
    """n (load DMA -> compute) steps, each DMA started `lat` after the compute it depends on."""
    ins = {k: [] for k in ("ts", "duration", "pc", "deps", "layer")}
    dma = {k: [] for k in ("ts", "duration", "pc", "deps", "layer", "bytes")}
    t, pc = 0, 0
    for i in range(n):
        t += lat
        dma["ts"].append(t), dma["duration"].append(100), dma["pc"].append(pc)
        dma["deps"].append([pc - 1] if pc else []), dma["layer"].append(f"l{i % 2}"), dma["bytes"].append(4096)
        t += 100
        ins["ts"].append(t), ins["duration"].append(50), ins["pc"].append(pc + 1)
        ins["deps"].append([pc]), ins["layer"].append(f"l{i % 2}")
        t += 50
        pc += 2
    return {"instructions": ins, "dma": dma}


def test_a_chain_of_dma_latencies_is_latency_bound_with_a_finding() -> None:
    p = make(**_chain(6))
    idle, rows, ns = latency_idle(p)
    assert idle == 6 * 1300 and rows.size == 6 and set(ns.tolist()) == {1300}
    metrics = summary_metrics(p)
    assert metrics["bound"] == "latency"
    assert metrics["dma_latency_path_percent"] > 80
    found = [r for r in findings(p).to_pylist() if r["kind"] == "latency_bound"]
    assert len(found) == 1 and "l0" in found[0]["message"] and "1.30 us" in found[0]["message"]
    assert not [r for r in findings(p).to_pylist() if r["kind"] == "bound"]  # not also called memory-bound


def test_overlapped_latencies_are_not_latency_bound() -> None:
    chain = _chain(6)
    ins = chain["instructions"]
    ins["duration"] = [20_000] * 6  # long compute: the latencies are a small share
    p = make(**chain)
    assert summary_metrics(p).get("bound") != "latency"
    assert not [r for r in findings(p).to_pylist() if r["kind"] == "latency_bound"]


def test_unknown_program_counters_give_no_figure() -> None:
    p = make({"ts": [0], "duration": [5]}, {"ts": [1300], "duration": [10], "bytes": [64]})
    assert latency_idle(p)[0] == -1
    assert "dma_latency_path_percent" not in summary_metrics(p)


def _reference_wait_ns(p, engine: str) -> int:
    """Plain per-event reference of `engine_wait_ns`: instants (1 ns cells) waited at a head of track while the
    engine ran nothing."""
    waiting, running = set(), set()
    for e in p.instructions.to_pylist():
        if e["engine"] != engine:
            continue
        waiting.update(range(e["ts"] - max(e["wait_ns"] or 0, 0), e["ts"]))
        running.update(range(e["ts"], e["ts"] + e["duration"]))
    return len(waiting - running)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_engine_wait_matches_a_plain_reference(seed: int, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both paths: the merges (numpy) and the compiled loop (`engine_core`, forced from 0 rows)."""
    latency = importlib.import_module("nprof.analysis.latency")
    if compiled:
        monkeypatch.setattr(latency, "COMPILED_FROM", 0)
    else:
        monkeypatch.setattr(latency, "load_compiled", lambda *a, **k: None)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    dense = seed % 2 == 0  # most rows wait (one interval per row) or few do (the busy union plus the waits)
    wait = rng.integers(1, 80, n) * (rng.random(n) < (0.9 if dense else 0.2))
    engine = rng.choice(["tensor", "vector", "scalar"], n).tolist()
    p = make(
        {
            "ts": np.sort(rng.integers(0, 3000, n)).tolist() if seed % 3 else rng.integers(0, 3000, n).tolist(),
            "duration": rng.integers(0, 60, n).tolist(),
            "engine": engine,
            "track": [f"{e}.{int(k)}" for e, k in zip(engine, rng.integers(0, 2, n), strict=True)],
            "wait_ns": wait.tolist(),
        }
    )
    for name in ("tensor", "vector", "scalar", "gpsimd"):
        assert engine_wait_ns(p, name) == _reference_wait_ns(p, name), name


def _gap_message(dma_ts: int) -> str:
    p = make({"ts": [dma_ts + 100], "duration": [50]}, {"ts": [dma_ts], "duration": [100], "bytes": [4096]})
    (gap,) = [r for r in findings(p).to_pylist() if r["kind"] == "idle_gap"]
    assert (gap["ts"], gap["end"]) == (0, dma_ts)
    return gap["message"]


def test_a_gap_no_longer_than_the_fixed_dma_latency_is_named_as_that_latency() -> None:
    assert "fixed ~1.30 us latency" in _gap_message(1300)  # trn1's semaphore-to-transfer latency, no more
    assert "semaphore wait, a host synchronisation" not in _gap_message(1300)
    longer = _gap_message(5000)  # longer than any DMA latency: something else held the device back
    assert "semaphore wait, a host synchronisation" in longer and "fixed ~" not in longer
