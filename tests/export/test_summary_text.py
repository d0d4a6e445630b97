"""summary-text: one section per metric group, and a trn3 profile says which figures rest on assumed hardware."""

from __future__ import annotations

import io
from dataclasses import replace

from nprof.arch.presets import get_preset
from nprof.export import export_profile
from nprof.export.summary_text import render
from nprof.profile import Profile
from tests.conftest import tiny_profile


def _text(profile: Profile) -> str:
    out = io.StringIO()
    export_profile(profile, "summary-text", stdout=out)
    return out.getvalue()


def _on_trn3(profile: Profile) -> Profile:
    meta = {**profile.info.meta, "preset_assumptions": get_preset("trn3").assumptions}
    return replace(profile, info=replace(profile.info, preset="trn3", meta=meta))


def test_a_group_heading_appears_once() -> None:
    """dma_latency_path_percent (group DMA) is computed before the engines: it joins the DMA section, and the
    groups keep the viewer's order."""
    text = _text(tiny_profile())
    headings = [line for line in text.splitlines() if line.startswith("# ")]
    assert len(headings) == len(set(headings)), headings
    dma = text.split("# DMA\n", 1)[1].split("\n\n", 1)[0]
    assert "dma_latency_path_percent" in dma and "dma_transfer_count" in dma


def test_render_keeps_metric_order_within_groups() -> None:
    text = render({"total_time": 1.0, "dma_latency_path_percent": 5.0, "event_count": 3, "dma_active_time": 2.0})
    assert [line.split()[0] for line in text.splitlines() if line and not line.startswith("#")] == [
        "total_time", "event_count", "dma_latency_path_percent", "dma_active_time",
    ]  # fmt: skip


def test_trn3_summary_starts_with_the_assumed_figures() -> None:
    first = _text(_on_trn3(tiny_profile())).splitlines()[0]
    assert first.startswith("# Assumed hardware figures: simulated times on the trn3 preset")
    assert "DMA fixed latency 1.3 us" in first and "MIN_II 64" in first  # the preset's own list, in full
    assert "counts" in first  # says which figures do NOT rest on them


def test_published_presets_have_no_note() -> None:
    assert not get_preset("trn1").assumptions and not get_preset("trn2").assumptions
    assert _text(tiny_profile()).startswith("# Overview\n")


def test_groups_follow_the_viewers_order() -> None:
    headings = [line[2:] for line in _text(tiny_profile()).splitlines() if line.startswith("# ")]
    assert headings[:5] == ["Overview", "FLOPs", "Engines", "DMA", "Memory"]
