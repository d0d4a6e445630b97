"""System profiles: a torch capture of a loop compiled with backend="nprof" joins host rows, launches,
copies and device executions on one clock, and keeps device profiles by policy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.compute as pc
import pytest

from nprof.capture.system import devices_dir
from nprof.capture.system_recorder import DevicePolicy
from nprof.errors import NprofError
from nprof.profile import Profile

torch = pytest.importorskip("torch")

STEPS = 3


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory):
    old = os.environ.get("NPROF_CACHE")
    os.environ["NPROF_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("NPROF_CACHE")
    else:
        os.environ["NPROF_CACHE"] = old


def _train(path: Path, device_profile: str = "default") -> tuple[Profile, list[tuple[str, int]]]:
    """STEPS steps of a compiled Linear layer under nprof.torch.profile; (profile, STATS.device_ns of the run)."""
    import nprof.torch
    from nprof.compiler.runtime import STATS

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8)
    step = torch.compile(model, backend="nprof")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    STATS.reset()
    with nprof.torch.profile(path, device="cpu", device_profile=device_profile) as prof:
        for _ in range(STEPS):
            opt.zero_grad()
            step(torch.randn(4, 16)).square().mean().backward()
            opt.step()
            prof.step()
    return prof.profile, list(STATS.device_ns)


def _rows(profile: Profile, track: str) -> list[dict]:
    t = profile.instructions
    return t.filter(pc.equal(t["track"], track)).to_pylist()


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Profile, list[tuple[str, int]]]:
    path = tmp_path_factory.mktemp("sys") / "run.ntff"
    profile, device_ns = _train(path)
    return path, profile, device_ns


def test_one_device_row_per_execution_with_the_simulated_time(system) -> None:
    _, profile, device_ns = system
    device = _rows(profile, "nc:0")
    assert len(device) == 2 * STEPS  # forward and backward graph per step
    assert [(r["layer"], r["duration"]) for r in device] == device_ns
    assert [r["iteration"] for r in device] == [s for s in range(STEPS) for _ in range(2)]
    assert {r["opcode"] for r in device} == {"nc_exec_running"}
    modules = sorted({r["layer"] for r in device})
    assert sorted(r["hlo_name"] for r in device) == sorted(f"{m}#{k}" for m in modules for k in range(STEPS))


def test_device_rows_start_at_their_launch_and_depend_on_it(system) -> None:
    _, profile, _ = system
    launches = {r["hlo_name"]: r for r in _rows(profile, "nprof.launch")}
    for row in _rows(profile, "nc:0"):
        launch = launches[row["hlo_name"]]
        assert row["ts"] == launch["ts"] and row["deps"] == [launch["id"]]
        assert launch["duration"] > 0


def test_host_rows_and_copies_share_the_clock(system) -> None:
    _, profile, _ = system
    host = profile.instructions.filter(pc.starts_with(profile.instructions["track"], "cpu:"))
    first, last = pc.min(host["ts"]).as_py(), pc.max(pc.add(host["ts"], host["duration"])).as_py()
    for row in _rows(profile, "nc:0"):
        assert first <= row["ts"] <= last  # launched while the host ran
    dma = profile.dma.to_pylist()
    queues = sorted({(r["queue"], r["direction"]) for r in dma})
    assert queues == [("d2h:nc0", "device->host"), ("h2d:nc0", "host->device")]
    assert all(r["bytes"] > 0 for r in dma) and len(dma) == 2 * 2 * STEPS
    assert len(set(profile.instructions["id"].to_pylist() + profile.dma["id"].to_pylist())) == profile.event_count


@pytest.mark.parametrize(("policy", "kept"), [("default", {1}), ("all", {0, 1, 2}), ("nth:3", {2}), ("none", set())])
def test_device_profiles_kept_by_policy(tmp_path: Path, policy: str, kept: set[int]) -> None:
    path = tmp_path / "run.ntff"
    profile, _ = _train(path, policy)
    files = sorted(p.name for p in devices_dir(path).iterdir()) if devices_dir(path).exists() else []
    assert {int(f.rsplit("_exec", 1)[1].split(".")[0]) for f in files} == kept
    assert len(files) == 2 * len(kept)
    for name in files:
        assert Profile.load(devices_dir(path) / name).instructions.num_rows > 0
    listed = profile.info.meta["system.device_profiles"]
    assert all(name in listed for name in files)


def test_a_loop_without_compiled_graphs_says_so(tmp_path: Path) -> None:
    import nprof.torch

    with nprof.torch.profile(tmp_path / "p.ntff", device="cpu") as prof:
        torch.ones(4).add(1)
    assert "no graph compiled" in prof.profile.info.meta["system"]
    assert not devices_dir(tmp_path / "p.ntff").exists()


@pytest.mark.parametrize("text", ["sometimes", "nth:0", "nth:x", "nth:"])
def test_bad_policy_is_one_line(text: str) -> None:
    with pytest.raises(NprofError, match="use all, none, or nth:N"):
        DevicePolicy.parse(text)


def test_cli_capture_writes_a_system_profile(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, nprof.torch
        model = torch.nn.Linear(8, 4)
        step = torch.compile(model, backend="nprof")
        for _ in range(2):
            step(torch.randn(2, 8)).sum().backward()
            nprof.torch.step()
    """))
    env = {**os.environ, "NPROF_NO_PROGRESS": "1"}
    run = ["-s", "run.ntff", "--", "python", "train.py"]
    cmd = [sys.executable, "-m", "nprof", "capture", "--device-profile", "all", *run]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == (
        "profile written to run.ntff (and 4 device profiles in run.ntff.devices/); view it with: nprof view -s run.ntff"
    )
    profile = Profile.load(tmp_path / "run.ntff")
    assert len(_rows(profile, "nc:0")) == 4
    assert len(list((tmp_path / "run.ntff.devices").iterdir())) == 4
    bad = subprocess.run([*cmd[:4], "--device-profile", "often", "-s", "x.ntff", "--", "python", "train.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--device-profile 'often'" in bad.stderr
    assert not (tmp_path / "x.ntff").exists()


def test_perfetto_has_host_and_device_tracks_with_launch_flows(system, tmp_path: Path) -> None:
    from nprof.export import ExportOptions, export_profile
    from tests.export.perfetto_reader import read

    _, profile, _ = system
    out = export_profile(profile, "perfetto", tmp_path / "sys.pftrace", ExportOptions(show_flows=True))
    trace = read(out)
    assert not trace.errors
    assert {"nc:0", "nprof.launch"} <= {name.split(" ")[0] for name in trace.tracks.values()}
    launches = [s for s in trace.slices if s.name == "nprof::launch"]
    executions = [s for s in trace.slices if s.name == "nc_exec_running"]
    assert len(executions) == len(launches) == 2 * STEPS
    leaving = {f for s in launches for f in s.flow_ids}
    assert all(set(s.terminating_flow_ids) & leaving for s in executions)  # each execution: a flow from its launch
