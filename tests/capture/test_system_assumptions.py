"""A system (host) profile whose device executions ran on trn3 carries the assumed-figures note device profiles
carry: in summary-text and in the viewer's profile answer; one on a published preset does not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
from fastapi.testclient import TestClient

from nprof.arch.presets import get_preset
from nprof.capture.system import attach_system
from nprof.capture.system_recorder import EXEC_LOG, DevicePolicy, SystemRecorder
from nprof.compiler.runtime import RuntimeEvent
from nprof.export.summary_text import render_notes
from nprof.profile import Profile, ProfileInfo
from nprof.store import Store
from nprof.web import create_app
from tests.conftest import tiny_profile

BASE = 1_700_000_000_000_000_000  # the host trace's Unix base time (ns)


def _host() -> Profile:
    meta = {"trace.baseTimeNanoseconds": str(BASE), "trace.origin_ns": "0"}
    instructions = {"id": [0], "ts": [0], "duration": [5000], "engine": ["host"], "track": ["cpu:1"],
                    "opcode": ["aten::mm"]}  # fmt: skip
    return Profile.build(ProfileInfo(device="cpu", name="host", meta=meta), instructions)


def _launch(preset: str) -> dict:
    """The log record `SystemRecorder` keeps for one launch simulated on `preset`."""
    recorder = SystemRecorder(DevicePolicy.parse("none"))
    device = tiny_profile()
    assumed = get_preset(preset).assumptions
    meta = {**device.info.meta, **({"preset_assumptions": assumed} if assumed else {})}
    device = replace(device, info=replace(device.info, preset=preset, meta=meta))
    event = RuntimeEvent("launch", "MODULE_x", BASE + 1000, BASE + 2000, exec_index=0, device_ns=700, profile=device)
    recorder(event)
    (record,) = recorder.events
    return {**record, "device_profile": None}


def _system(tmp_path: Path, preset: str) -> Profile:
    work = tmp_path / preset
    work.mkdir()
    (work / EXEC_LOG).write_bytes(orjson.dumps([_launch(preset)]))
    return attach_system(_host(), work, tmp_path / f"{preset}.ntff").profile


def test_the_recorder_keeps_the_preset_and_its_assumptions() -> None:
    record = _launch("trn3")
    assert record["preset"] == "trn3" and record["preset_assumptions"] == get_preset("trn3").assumptions
    assert _launch("trn2")["preset_assumptions"] is None


def test_a_trn3_system_profile_says_its_device_rows_rest_on_assumed_figures(tmp_path: Path) -> None:
    profile = _system(tmp_path, "trn3")
    note = render_notes(profile)
    assert note.startswith("# Assumed hardware figures: the device rows (nc_exec_running on nc:0) last simulated")
    assert "trn3 preset" in note and get_preset("trn3").assumptions in note
    store = Store(tmp_path / "store")
    store.ingest(profile, "sys3")
    store.ingest(_system(tmp_path, "trn2"), "sys2")
    try:
        with TestClient(create_app(store), base_url="http://localhost") as c:
            shown = c.get("/api/profiles/sys3").json()["assumptions"]
            none = c.get("/api/profiles/sys2").json()["assumptions"]
    finally:
        store.close()
    assert shown == note.removeprefix("# ").strip()  # the viewer shows the line summary-text prints
    assert none is None


def test_a_published_preset_adds_no_note(tmp_path: Path) -> None:
    profile = _system(tmp_path, "trn2")
    assert render_notes(profile) == ""
    assert "preset_assumptions" not in profile.info.meta
