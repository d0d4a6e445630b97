"""The profile and summary answers tell the viewer what the text summary says: the assumed figures of a trn3
profile, and a `latency` bound as a latency verdict (not "unknown")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fastapi.testclient import TestClient

from nprof.arch.presets import get_preset
from nprof.store import Store
from nprof.store.info import summary_answer
from nprof.web import create_app
from tests.conftest import tiny_profile


def test_profile_answer_carries_the_assumed_figures_of_trn3_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    tiny = tiny_profile()
    meta = {**tiny.info.meta, "preset_assumptions": get_preset("trn3").assumptions}
    store.ingest(replace(tiny, info=replace(tiny.info, preset="trn3", meta=meta)), "t3")
    store.ingest(tiny, "t1")
    try:
        with TestClient(create_app(store), base_url="http://localhost") as c:
            t3 = c.get("/api/profiles/t3").json()["assumptions"]
            t1 = c.get("/api/profiles/t1").json()["assumptions"]
    finally:
        store.close()
    assert t3.startswith("Assumed hardware figures: simulated times on the trn3 preset")
    assert get_preset("trn3").assumptions in t3
    assert t1 is None


def _verdict(metrics: dict) -> dict:
    return summary_answer(None, {"summary": metrics, "analysis_tables": []}, flat=False)["verdict"]  # type: ignore[arg-type]


def test_a_latency_bound_is_a_latency_verdict() -> None:
    """MFU 1 % but MBU 12 % (not low utilisation): the summary's own `bound` decides."""
    v = _verdict({"bound": "latency", "mfu_estimated_percent": 1.1, "mbu_estimated_percent": 11.8,
                  "dma_latency_path_percent": 54.9, "mm_arithmetic_intensity": 51.2,
                  "peak_flops_bandwidth_ratio": 535.4})  # fmt: skip
    assert v["bound"] == "latency"
    assert v["text"].startswith("latency-bound: 54.9% of the run is fixed DMA latency")


def test_memory_and_unknown_verdicts_unchanged() -> None:
    v = _verdict({"bound": "memory", "mfu_estimated_percent": 20.0, "mbu_estimated_percent": 50.0,
                  "mm_arithmetic_intensity": 2.0, "peak_flops_bandwidth_ratio": 10.0})  # fmt: skip
    assert v["bound"] == "memory" and "below the device ratio 10" in v["text"]
    assert _verdict({})["bound"] is None
