"""`nprof capture -s DIR -- torchrun --nproc_per_node=2 job.py`: compiled collectives exchanged across the two
processes (gradients equal eager DDP's), one system profile per rank on one clock with gloo's collectives as CC
work, and `nprof view -d DIR` opening them as a group; plus the pieces on synthetic input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc
import pytest

from nprof.capture.host_collectives import HostOp, match_ranks, read_host_collectives
from nprof.capture.system import shift_profile
from nprof.capture.torchrun import torchrun_split
from nprof.errors import NprofError
from nprof.profile import Profile

torch = pytest.importorskip("torch")
JOB = Path(__file__).resolve().parent / "scripts" / "dp_job.py"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """(output dir, results dir, the capture's completed process) of one 2-rank torchrun capture."""
    tmp = tmp_path_factory.mktemp("torchrun")
    out, results = tmp / "out", tmp / "results"
    results.mkdir()
    env = {**os.environ, "NPROF_CACHE": str(tmp / "cache"), "NPROF_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "nprof", "capture", "-s", f"{out}/", "--",
           "torchrun", "--nproc_per_node=2", str(JOB), str(results)]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, results, done


def test_compiled_data_parallel_gradients_match_eager_ddp(job) -> None:
    _out, results, _done = job
    for rank in range(2):
        got = json.loads((results / f"rank{rank}.json").read_text())
        assert got["world"] == 2
        assert got["ddp"] <= 1e-5  # the compiled all-reduce averaged both ranks' gradients, as DDP/gloo does
        assert got["alone"] > 1e-3  # ...which is not what one rank's own gradient gives


def test_one_system_profile_per_rank_on_the_job_clock(job) -> None:
    out, _results, done = job
    assert f"wrote 2 rank profiles to {out}/; view them with: nprof view -d {out}" in done.stdout
    profiles = [Profile.load(out / f"profile_rank_{r}.ntff") for r in range(2)]
    assert [(p.info.rank, p.info.world_size) for p in profiles] == [(0, 2), (1, 2)]
    assert all(p.info.meta["system"] == "1" for p in profiles)
    origins = {p.info.meta["system.job_origin_unix_ns"] for p in profiles}
    unix0 = {int(p.info.meta["trace.baseTimeNanoseconds"]) + int(p.info.meta["trace.origin_ns"]) for p in profiles}
    assert len(origins) == 1 and unix0 == {int(origins.pop())}  # ts = 0 is the same Unix instant on both ranks
    for p in profiles:
        gloo = p.instructions.filter(pc.equal(p.instructions["track"], "cc:gloo")).to_pylist()
        reduces = [r for r in gloo if r["opcode"] == "gloo:all_reduce"]
        assert len(reduces) == 2 and all(r["engine"] == "cc" for r in reduces)  # DDP's bucket, once per step
        assert {r["iteration"] for r in reduces} == {0, 1}
        gloo_cc = [c for c in p.collectives.to_pylist() if c["algorithm"] == "gloo (host, measured)"]
        cc = [c for c in gloo_cc if c["kind"] == "all-reduce"]
        assert [c["bytes"] for c in cc] == [(8 * 16 + 16 + 16 * 4 + 4) * 4] * 2  # the model's 212 float parameters
        assert all(c["ranks"] == [0, 1] for c in cc)
        simulated = [c for c in p.collectives.to_pylist() if c["algorithm"].endswith("(simulated)")]
        assert [c["id"] for c in simulated] == list(range(8))  # the gloo ops are numbered after them
        assert [c["id"] for c in gloo_cc] == list(range(8, 8 + len(gloo_cc)))
        assert all(c["ranks"] == [0, 1] and c["rank"] == p.info.rank for c in simulated)
        device_cc = p.instructions.filter(pc.equal(p.instructions["track"], "cc:nc0")).to_pylist()
        assert len(device_cc) == 4 * 2 and {r["opcode"] for r in device_cc} == {"all-reduce"}  # 4 per execution
        assert all(r["engine"] == "cc" and "simulated (ring/neuronlink" in r["operands"] for r in device_cc)
    waits = [[c["wait_ns"] for c in p.collectives.to_pylist()] for p in profiles]
    assert all(min(pair) == 0 for pair in zip(*waits, strict=True))  # the last rank to arrive waits for no one


def test_device_profiles_beside_each_rank_have_exchanged_collectives(job) -> None:
    out, _results, _done = job
    for rank in range(2):
        listing = json.loads(Profile.load(out / f"profile_rank_{rank}.ntff").info.meta["system.device_profiles"])
        (name,) = listing.values()
        device = Profile.load(out / f"profile_rank_{rank}.ntff.devices" / name)
        assert (device.info.rank, device.info.world_size) == (rank, 2)
        cc = device.collectives.to_pylist()
        assert [c["kind"] for c in cc] == ["all-reduce"] * 4  # one per parameter
        assert sorted(c["bytes"] for c in cc) == sorted(n * 4 for n in (8 * 16, 16, 16 * 4, 4))
        assert {c["algorithm"] for c in cc} == {"ring/neuronlink"} and all(c["duration"] > 0 for c in cc)


def test_view_directory_opens_the_ranks_as_one_group(job, tmp_path: Path) -> None:
    out, _results, _done = job
    env = {**os.environ, "NPROF_NO_PROGRESS": "1"}
    cmd = [sys.executable, "-m", "nprof", "view", "-d", str(out), "--db", str(tmp_path / "db"), "--ingest-only"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    from nprof.store import Store
    from nprof.web.group_api import group_collectives

    store = Store(tmp_path / "db")
    try:
        (gid,) = store.catalog.read()["groups"]
        data = group_collectives(store, gid, bins=16)
        assert [r["rank"] for r in data["ranks"]] == [0, 1]
        assert sum(op["kind"] == "all-reduce" for op in data["ops"]) == 2 + 8  # DDP's (gloo) and the compiled ones
        ids = set(store.catalog.profiles())
        assert sum(".MODULE_" in i for i in ids) == 2  # each rank's kept device profile, linked
    finally:
        store.close()


def test_torchrun_split_rewrites_the_launch() -> None:
    script = str(JOB)
    launcher, target = torchrun_split(["torchrun", "--nproc_per_node=2", "--standalone", script, "--steps", "3"])
    assert Path(launcher[0]).name == "torchrun" and launcher[1:] == ["--nproc_per_node=2", "--standalone"]
    assert target == [script, "--steps", "3"]
    launcher, target = torchrun_split(["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "pkg.x"])
    assert launcher == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    assert target == ["-m", "pkg.x"]
    assert torchrun_split(["python", script]) is None
    with pytest.raises(NprofError, match="no-python"):
        torchrun_split(["torchrun", "--no-python", "echo"])
    with pytest.raises(NprofError, match="no such script"):
        torchrun_split(["torchrun", "missing.py"])


def test_host_collectives_read_and_match(tmp_path: Path) -> None:
    base = 1_000_000_000

    def ev(name: str, ts: float, dur: float, **args: object) -> dict:
        return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "args": args}

    trace = {"baseTimeNanoseconds": base, "traceEvents": [
        ev("ProfilerStep#0", 0.0, 100.0), ev("ProfilerStep#1", 100.0, 100.0),
        ev("gloo:all_reduce", 10.0, 5.0, **{"Input Dims": [[3, 4]], "Input type": ["float"]}),
        ev("gloo:all_gather", 50.0, 2.0, **{"Input Dims": [[8]], "Input type": ["double"]}),  # inside a launch
        ev("gloo:broadcast", 150.0, 1.0),
    ]}  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    ops = read_host_collectives(path, launches=[(base + 40_000, base + 60_000)])
    assert [(o.kind, o.nbytes, o.shape, o.step) for o in ops] == [("all-reduce", 48, "float[3, 4]", 0),
                                                                  ("broadcast", 0, "", 1)]  # fmt: skip
    assert (ops[0].start_ns, ops[0].end_ns) == (base + 10_000, base + 15_000)

    def op(start: int, end: int) -> HostOp:
        return HostOp("gloo:all_reduce", "all-reduce", start, end, 4, 0, "float[1]")

    matched = match_ranks({0: [op(0, 100), op(200, 210)], 1: [op(30, 100)], 2: [op(10, 20), op(250, 260)]})
    # op 0: last arrival 30 -> waits 30, 0, 20 capped at rank 2's 10 ns duration; op 1: rank 1 lacks it
    assert [(r.id, r.wait_ns, r.ranks) for r in matched[0]] == [(0, 30, (0, 1, 2)), (1, 10, (0, 2))]
    assert [(r.id, r.wait_ns) for r in matched[1]] == [(0, 0)]
    assert [(r.id, r.wait_ns) for r in matched[2]] == [(0, 10), (1, 0)]


def test_shift_profile_moves_every_table_and_the_origin() -> None:
    from tests.conftest import tiny_profile

    p = tiny_profile()
    p = replace(p, info=replace(p.info, meta={"trace.origin_ns": "500"}))
    moved = shift_profile(p, 70)
    assert moved.instructions["ts"].to_pylist() == [t + 70 for t in p.instructions["ts"].to_pylist()]
    assert moved.dma["ts"].to_pylist() == [t + 70 for t in p.dma["ts"].to_pylist()]
    assert moved.info.meta["trace.origin_ns"] == "430" and moved.total_time_ns == p.total_time_ns + 70


def test_in_script_profile_of_a_rank_needs_rank_in_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nprof.torch

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(NprofError, match=r"every process of this 2-process job would write this file; put \{rank\}"):
        nprof.torch.profile(tmp_path / "p.ntff")
    prof = nprof.torch.profile(str(tmp_path / "profile_rank_{rank}.ntff"), device="cpu")
    assert prof.path == tmp_path / "profile_rank_1.ntff"
    with prof:
        torch.ones(3).add(1)
    assert (prof.profile.info.rank, prof.profile.info.world_size) == (1, 2)


def test_a_rank_stopped_by_torchrun_keeps_its_trace(tmp_path: Path) -> None:
    """torchrun stops the other ranks with SIGTERM when one fails: the bootstrap still writes their trace."""
    import signal
    import time

    script = tmp_path / "wait.py"
    script.write_text("import time, torch\ntorch.ones(2).add(1)\nprint('ready', flush=True)\ntime.sleep(120)\n")
    files = [str(tmp_path / "rank{rank}" / f) for f in ("trace.json", "status.json")]
    env = {**os.environ, "RANK": "3", "WORLD_SIZE": "4", "NPROF_NO_PROGRESS": "1"}
    cmd = [sys.executable, "-m", "nprof.capture.torch_boot", *files, "cpu", "default", str(script)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
    finally:
        proc.kill()
    status = json.loads((tmp_path / "rank3" / "status.json").read_text())
    assert (status["exit_code"], status["rank"], status["world_size"]) == (143, 3, 4)
    assert "aten::add" in (tmp_path / "rank3" / "trace.json").read_text()
