"""A system profile and its device profiles are ingested together and linked both ways (store and API)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from nprof.errors import NprofError
from nprof.profile import Profile, ProfileInfo
from nprof.store import Store
from nprof.store.system_links import device_profile_id, ingest_device_profiles, links
from nprof.web.app import create_app
from tests.conftest import tiny_profile

FILES = {"MODULE_ab12#1": "MODULE_ab12_exec1.ntff", "MODULE_cd34#1": "MODULE_cd34_exec1.ntff"}


def _system_files(tmp_path: Path, listing: dict[str, str] = FILES) -> Path:
    """run.ntff (a system profile listing `listing`) and run.ntff.devices/ with one profile per file."""
    meta = {"system": "1", "system.device_profiles": orjson.dumps(listing).decode()}
    rows = {"id": [0], "ts": [0], "duration": [10], "engine": ["other"], "track": ["nc:0"]}
    rows["opcode"] = ["nc_exec_running"]
    path = tmp_path / "run.ntff"
    Profile.build(ProfileInfo(device="cpu", name="run", meta=meta), instructions=rows).save(path)
    (tmp_path / "run.ntff.devices").mkdir()
    for name in listing.values():
        p = tiny_profile()
        replace(p, info=replace(p.info, name=name)).save(tmp_path / "run.ntff.devices" / name)
    return path


def test_ingest_links_both_ways(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path = _system_files(tmp_path)
    store.ingest_file(path, profile_id="run")
    ids = ingest_device_profiles(store, "run", path)
    assert ingest_device_profiles(store, "run", path) == ids  # a second `nprof view -s run.ntff` reuses them
    assert ids == {hlo: device_profile_id("run", f) for hlo, f in FILES.items()} == {
        "MODULE_ab12#1": "run.MODULE_ab12_exec1", "MODULE_cd34#1": "run.MODULE_cd34_exec1"}  # fmt: skip
    with store.session("run") as (_c, meta):
        forward = links(store, "run", meta["manifest"])
    assert [d["profile_id"] for d in forward["device_profiles"]] == sorted(ids.values()) and forward["system"] is None
    with store.session("run.MODULE_ab12_exec1") as (_c, meta):
        back = links(store, "run.MODULE_ab12_exec1", meta["manifest"])
    assert back == {"device_profiles": [], "system": {"profile_id": "run", "hlo_name": "MODULE_ab12#1"}}


def test_plain_profiles_have_no_links_and_missing_files_are_one_line(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    tiny_profile().save(tmp_path / "t.ntff")
    store.ingest_file(tmp_path / "t.ntff", profile_id="t")
    assert ingest_device_profiles(store, "t", tmp_path / "t.ntff") == {}
    path = _system_files(tmp_path)
    store.ingest_file(path, profile_id="run")
    (tmp_path / "run.ntff.devices" / "MODULE_cd34_exec1.ntff").unlink()
    with pytest.raises(NprofError, match="device profile of MODULE_cd34#1 is missing"):
        ingest_device_profiles(store, "run", path)


def test_links_endpoint(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    path = _system_files(tmp_path)
    store.ingest_file(path, profile_id="run")
    ingest_device_profiles(store, "run", path)
    with TestClient(create_app(store), base_url="http://localhost") as c:
        got = c.get("/api/profiles/run/links").json()
        assert [d["hlo_name"] for d in got["device_profiles"]] == sorted(FILES)
        assert c.get("/api/profiles/run.MODULE_cd34_exec1/links").json()["system"]["profile_id"] == "run"
        assert c.get("/api/profiles/nope/links").status_code == 404
