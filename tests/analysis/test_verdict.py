"""One bound verdict everywhere: the summary's `bound` row (summary-text, summary-json) and the viewer's Summary-tab
verdict come from `nprof.analysis.verdict`, so an imported Kineto trace far below both roofs is latency/overhead-bound
in both (it used to say `bound compute` in summary-text and "Latency/overhead-bound" in the viewer)."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from fastapi.testclient import TestClient

from nprof.analysis import summary_metrics
from nprof.analysis.verdict import LOW_UTILISATION_PERCENT, final_bound, verdict
from nprof.capture import open_profile
from nprof.export import export_profile
from nprof.profile import Profile
from nprof.store import Store
from nprof.store.info import summary_answer
from nprof.web import create_app
from tests.conftest import tiny_profile


def _kineto(path: Path) -> Path:
    """A small A100 Kineto trace: one matmul op launching one kernel, idle for most of a long step (MFU ~0)."""
    args = {"External id": 1, "Input Dims": [[512, 512], [512, 512]], "Input type": ["float", "float"]}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x32_nn", "pid": 0, "tid": 7, "ts": 30, "dur": 40,
         "args": {"device": 0, "stream": 7, "correlation": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 1, "tid": 1, "ts": 99000, "dur": 10},
    ]  # fmt: skip
    gpu = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    path.write_text(json.dumps({"deviceProperties": gpu, "traceEvents": events}))
    return path


def _summary_text(profile: Profile) -> tuple[str, str]:
    """(the `bound` row's value, the `# Verdict:` line's text) of summary-text."""
    out = io.StringIO()
    export_profile(profile, "summary-text", stdout=out)
    lines = out.getvalue().splitlines()
    bound = next((line.split()[1] for line in lines if line.split()[:1] == ["bound"]), None)
    text = next(line.removeprefix("# Verdict: ") for line in lines if line.startswith("# Verdict: "))
    return bound, text


def _viewer(profile: Profile, tmp_path: Path) -> dict:
    """The verdict of the viewer's summary answer for `profile` ingested into a store."""
    store = Store(tmp_path / "store")
    store.ingest(profile, "p")
    try:
        with TestClient(create_app(store), base_url="http://localhost") as c:
            return c.get("/api/profiles/p/summary").json()["verdict"]
    finally:
        store.close()


def test_summary_text_and_viewer_agree_on_an_imported_kineto_trace(tmp_path: Path) -> None:
    profile = open_profile(_kineto(tmp_path / "k.json"))
    metrics = summary_metrics(profile)
    assert metrics["mfu_estimated_percent"] < LOW_UTILISATION_PERCENT  # the case that used to disagree
    bound, text = _summary_text(profile)
    shown = _viewer(profile, tmp_path)
    assert bound == shown["bound"] == "latency"
    assert text == shown["text"] and text.startswith("latency/overhead-bound: MFU")


def test_summary_text_and_viewer_agree_on_a_compute_bound_profile(tmp_path: Path) -> None:
    profile = tiny_profile()
    bound, text = _summary_text(profile)
    shown = _viewer(profile, tmp_path)
    assert (bound, text) == (shown["bound"], shown["text"])
    assert bound == summary_metrics(profile)["bound"] and text.startswith(f"{bound}-bound")


def test_the_viewer_answer_is_the_verdict_of_any_metrics() -> None:
    """Random metric sets (present or absent MFU/MBU/intensity/ratio/bound/latency share): the viewer's answer is
    `verdict`, and the bound the summary stores (`final_bound`) is the one it shows."""
    rng = random.Random(7)
    for _ in range(400):
        m: dict = {}
        for key, lo, hi in (("mfu_estimated_percent", 0, 30), ("mbu_estimated_percent", 0, 30),
                            ("mm_arithmetic_intensity", 0.1, 100), ("peak_flops_bandwidth_ratio", 0.1, 100),
                            ("dma_latency_path_percent", 0, 100)):  # fmt: skip
            if rng.random() < 0.7:
                m[key] = rng.uniform(lo, hi)
        if rng.random() < 0.8:
            m["bound"] = rng.choice(["memory", "compute", "latency"])
        got = summary_answer(None, {"summary": m, "analysis_tables": []}, flat=False)["verdict"]  # type: ignore[arg-type]
        v = verdict(m)
        assert (got["bound"], got["text"]) == (v.bound, v.text)
        stored = {**m, "bound": final_bound(m)}
        assert verdict(stored) == v  # showing the stored bound again gives the same verdict


def test_low_utilisation_verdict_names_the_collectives_when_they_take_most_of_the_run() -> None:
    base = {"mfu_estimated_percent": 0.4, "mbu_estimated_percent": 4.3}
    busy = verdict({**base, "cc_engine_active_time_percent": 83.9})
    assert busy.bound == "latency" and "collectives keep the CC engine active 83.9% of the run" in busy.text
    for quiet in (base, {**base, "cc_engine_active_time_percent": 12.0}):
        assert "collectives" not in verdict(quiet).text
