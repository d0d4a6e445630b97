"""`nprof view -d DIR`: summaries, one Perfetto trace, parallel ingest into a group, the aggregated-view API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from nprof.cli import main
from nprof.store import Store
from nprof.web.app import create_app
from tests.export import perfetto_reader
from tests.multiworker.kit import straggler_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mw") / "output"
    straggler_run(d, n=4, late=2)
    return d


def test_summary_text(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-d", str(run_dir), "--output-format", "summary-text"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["rank", "nd_idx", "nc_idx", "total_time", "cc_op_time", "cc_op_count", "cc_wait_time",
                                "caused_wait", "host_wait"]  # fmt: skip
    assert [ln.split()[0] for ln in lines[1:5]] == ["0", "1", "2", "3"]
    assert all(ln.split()[-1] == "-" for ln in lines[1:5])  # host_wait: no host measured, not 0
    assert "straggler     rank 2" in out
    assert re.search(r"^\s+0 all-reduce\s+32768 device .* 2\s+-$", out, re.M)  # no host side: simulated job


def test_summary_json(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    assert main(["view", "-d", str(run_dir), "--output-format", "summary-json", "--output-file", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["straggler"] == 2 and len(data["ranks"]) == 4 and len(data["ops"]) == 1
    waits = {w["rank"]: w["wait_ns"] for w in data["ops"][0]["ranks"]}
    assert waits[2] == 0 and all(waits[r] > 0 for r in (0, 1, 3))
    assert data["ranks"][0]["cc_op_count"] == 1


def test_other_formats_refuse_a_directory(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-d", str(run_dir), "--output-format", "json"]) == 2
    assert "works on one profile" in capsys.readouterr().err


def test_perfetto_one_process_per_rank(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "g.pftrace"
    assert main(["view", "-d", str(run_dir), "--output-format", "perfetto", "--output-file", str(out)]) == 0
    trace = Trace()
    trace.ParseFromString(out.read_bytes())
    procs = [p.track_descriptor for p in trace.packet if p.track_descriptor.HasField("process")]
    assert sorted(d.process.pid for d in procs) == [1, 2, 3, 4]
    uuids = [p.track_descriptor.uuid for p in trace.packet if p.HasField("track_descriptor")]
    assert len(uuids) == len(set(uuids))
    known = set(uuids)
    events = [p.track_event for p in trace.packet if p.HasField("track_event") and p.track_event.track_uuid]
    assert events and all(e.track_uuid in known for e in events)
    parents = {
        p.track_descriptor.uuid: p.track_descriptor.parent_uuid for p in trace.packet if p.HasField("track_descriptor")
    }
    proc_uuids = {d.uuid for d in procs}
    assert all(parent in proc_uuids for uuid, parent in parents.items() if parent)
    parsed = perfetto_reader.read(out)
    assert parsed.errors == []
    cc = [s for s in parsed.slices if s.track == "Collective wait | transfer"]
    assert sorted(s.name for s in cc) == ["all-reduce #0"] * 4 + ["wait for other ranks (#0, simulated)"] * 3
    transfers = {(s.ts, s.dur) for s in cc if s.name == "all-reduce #0"}
    assert len(transfers) == 1  # the transfer is the same interval on every rank
    assert sum(1 for s in parsed.slices if s.name == "ALL_REDUCE") == 4  # the CC-core instruction rows


def test_ingest_group_and_api(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "db"
    assert main(["view", "-d", str(run_dir), "--db", str(db), "--ingest-only", "--db-bucket", "run1"]) == 0
    assert capsys.readouterr().out == 'Profile "run1" is ready to view\n'
    store = Store(db)
    try:
        client = TestClient(create_app(store), base_url="http://localhost")
        group = client.get("/api/groups/run1").json()
        assert [r["rank"] for r in group["ranks"]] == [0, 1, 2, 3]
        data = client.get("/api/groups/run1/collectives?bins=64").json()
        assert data["straggler"] == 2 and data["bins"] == 64 and len(data["ranks"]) == 4
        assert all(len(r["busy"]) == 64 for r in data["ranks"])
        assert max(data["ranks"][2]["busy"]) > 0
        op = data["ops"][0]
        assert op["straggler"] == 2 and op["kind"] == "all-reduce" and op["end"] > op["start"]
        assert data["t_max"] >= op["end"]
        assert client.get("/api/groups/nope/collectives").status_code == 404
        assert client.get("/api/groups/run1/collectives?bins=3").status_code == 422
        summary = client.get(f"/api/profiles/{group['ranks'][0]['profile_id']}/summary?flat=true").json()
        assert "cc_op_count" in json.dumps(summary)
    finally:
        store.close()


def test_summary_text_of_trn3_ranks_names_the_assumed_figures_once(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from nprof.arch.presets import get_preset
    from nprof.profile import Profile

    for f in sorted(run_dir.glob("profile_rank_*.ntff"))[:2]:
        p = Profile.load(f)
        meta = {**p.info.meta, "preset_assumptions": get_preset("trn3").assumptions}
        replace(p, info=replace(p.info, preset="trn3", meta=meta)).save(tmp_path / f.name)
    assert main(["view", "-d", str(tmp_path), "--output-format", "summary-text"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# Assumed hardware figures: simulated times on the trn3 preset") and not lines[1]
    assert lines[2].split()[0] == "rank" and sum("Assumed hardware" in ln for ln in lines) == 1
