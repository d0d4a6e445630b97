"""Real CPU runs through torch.profiler: `nprof.torch.profile` in-process and `nprof capture -- python` end to end."""

from __future__ import annotations

import inspect
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nprof.errors import NprofError
from nprof.profile import Profile

torch = pytest.importorskip("torch")

M, K, H, N = 8, 16, 32, 4


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(K, H)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(H, N)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)  # FC1_LINE
        return self.fc2(self.act(h))  # FC2_LINE


def _line(marker: str) -> int:
    lines, first = inspect.getsourcelines(Net.forward)
    return first + next(i for i, text in enumerate(lines) if marker in text)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    import nprof.torch

    os.environ["NPROF_CPU_PEAKS"] = "2e11,4e10"
    try:
        torch.manual_seed(0)
        net = Net()
        x = torch.randn(M, K)
        path = tmp_path_factory.mktemp("cap") / "mlp.ntff"
        with nprof.torch.profile(path, device="cpu") as prof:
            loss = net(x).sum()  # LOSS_LINE
            loss.backward()
        assert prof.profile is not None and path.is_file()
        return Profile.load(path)
    finally:
        del os.environ["NPROF_CPU_PEAKS"]


def test_manifest_names_device_and_peaks(captured: Profile) -> None:
    info = captured.info
    assert info.device == "cpu" and info.name == "mlp"
    assert info.peak_flops == 2e11 and info.hbm_bandwidth == 4e10
    assert "NPROF_CPU_PEAKS" in (info.peaks_source or "")
    assert info.device_name


def test_addmm_flops_engines_and_tracks(captured: Profile) -> None:
    ins = captured.instructions.to_pylist()
    assert {r["track"] for r in ins} == {f"cpu:{r['track'].split(':')[1]}" for r in ins}
    assert all(r["track"].startswith("cpu:") for r in ins)
    addmm = [r for r in ins if r["opcode"] == "aten::addmm"]
    assert [r["flops"] for r in addmm] == [2 * M * K * H, 2 * M * H * N]
    assert all(r["engine"] == "tensor" and r["hw_flops"] == r["flops"] for r in addmm)
    assert [r["hbm_read_bytes"] for r in addmm] == [4 * (H + M * K + K * H), 4 * (N + M * H + H * N)]
    relu = [r for r in ins if "relu" in r["opcode"] or "clamp" in r["opcode"]]
    assert relu and relu[0]["engine"] in ("scalar", "vector")
    assert next(r for r in ins if r["opcode"] == "aten::relu" or r["opcode"] == "aten::clamp_min")
    # backward matmuls count too: dW and dX of fc2, dW of fc1
    mm = [r for r in ins if r["opcode"] == "aten::mm"]
    assert sorted(r["flops"] for r in mm) == sorted([2 * M * N * H, 2 * M * N * H, 2 * M * H * K])
    assert sum(r["flops"] for r in ins) == 2 * M * K * H + 2 * M * H * N + sum(r["flops"] for r in mm)


def test_rows_of_a_thread_never_overlap(captured: Profile) -> None:
    spans = sorted((r["ts"], r["ts"] + r["duration"]) for r in captured.instructions.to_pylist())
    assert spans[0][0] >= 0
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_layers_from_module_paths_forward_and_backward(captured: Profile) -> None:
    ins = captured.instructions.to_pylist()
    addmm = [r for r in ins if r["opcode"] == "aten::addmm"]
    assert [r["layer"] for r in addmm] == ["Net.fc1", "Net.fc2"]
    assert addmm[0]["hlo_name"] == "aten::linear"
    mm_layers = {r["layer"] for r in ins if r["opcode"] == "aten::mm"}
    assert mm_layers == {"Net.fc1", "Net.fc2"}  # backward ops take their forward op's layer


def test_source_lines_point_at_this_file(captured: Profile) -> None:
    ins = captured.instructions.to_pylist()
    here = Path(__file__).resolve()
    addmm = [r for r in ins if r["opcode"] == "aten::addmm"]
    assert [r["nki_source_location"] for r in addmm] == [f"{here}:{_line('FC1_LINE')}", f"{here}:{_line('FC2_LINE')}"]
    sums = [r for r in ins if r["opcode"] == "aten::sum"]
    assert sums and sums[0]["nki_source_location"].startswith(f"{here}:")


def test_cuda_without_gpu_is_a_one_line_error(tmp_path: Path) -> None:
    import nprof.torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(NprofError, match="no CUDA device"), nprof.torch.profile(tmp_path / "x.ntff", device="cuda"):
        pass


def test_command_validation() -> None:
    from nprof.capture.torch_run import capture_command

    with pytest.raises(NprofError, match="runs Python scripts"):
        capture_command(["ls", "-l"], "p.ntff", "cpu")
    with pytest.raises(NprofError, match="no such script"):
        capture_command(["python", "missing_script.py"], "p.ntff", "cpu")
    with pytest.raises(NprofError, match="not supported"):
        capture_command(["python", "-c", "print(1)"], "p.ntff", "cpu")
    with pytest.raises(NprofError, match="does not exist"):
        capture_command(["python", __file__], "/no/such/dir/p.ntff", "cpu")


def test_a_profile_or_the_script_itself_is_refused_before_running(tmp_path: Path) -> None:
    """`-- python profile.ntff` names what was given; `-s script.py` would overwrite the script."""
    from nprof.capture.torch_run import capture_command
    from tests.conftest import tiny_profile

    saved = tiny_profile().save(tmp_path / "p.ntff")
    with pytest.raises(NprofError, match="not a Python script"):
        capture_command(["python", str(saved)], str(tmp_path / "out.ntff"), "cpu")
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with pytest.raises(NprofError, match="is the script being run"):
        capture_command(["python", str(script)], str(script), "cpu")
    assert script.read_text() == "print(1)\n"


SCRIPT = """
    import sys
    import torch

    a = torch.ones(16, 8)
    b = torch.ones(8, 4)
    c = a @ b  # MATMUL
    print("sum", float(c.sum()), sys.argv[1:])
    sys.exit(int(sys.argv[1]))
"""


def test_cli_capture_end_to_end(tmp_path: Path) -> None:
    script = tmp_path / "tiny_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "NPROF_CPU_PEAKS": "1e11,1e10", "NPROF_NO_PROGRESS": "1"}
    ok, failed = tmp_path / "ok.ntff", tmp_path / "failed.ntff"
    run = [sys.executable, "-m", "nprof", "capture", "-s"]
    res = subprocess.run([*run, str(ok), "--", "python", str(script), "0"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert "sum 512.0 ['0']" in res.stdout  # the script's own output and arguments pass through
    assert res.stdout.endswith(f"profile written to {ok}; view it with: nprof view -s {ok}\n")  # no device graph
    p = Profile.load(ok)
    mm = [r for r in p.instructions.to_pylist() if r["opcode"] == "aten::mm"]
    assert [r["flops"] for r in mm] == [2 * 16 * 8 * 4]
    assert mm[0]["nki_source_location"] == f"{script}:7"
    assert p.info.meta["exit_code"] == "0" and "tiny_script.py" in p.info.meta["command"]
    # a failing script: its exit status, one nprof line, and the profile of what ran
    res = subprocess.run([*run, str(failed), "--", "python", str(script), "3"], capture_output=True, text=True, env=env)
    assert res.returncode == 3
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("nprof capture: tiny_script.py exited with status 3") and str(failed) in last
    meta = Profile.load(failed).info.meta
    assert meta["exit_code"] == "3" and meta["incomplete"].startswith("the script exited with status 3")
    assert "incomplete" not in p.info.meta


def test_block_that_raises_still_writes_its_profile(tmp_path: Path) -> None:
    import nprof.torch

    path = tmp_path / "crash.ntff"
    os.environ["NPROF_CPU_PEAKS"] = "off"
    try:
        with pytest.raises(ZeroDivisionError), nprof.torch.profile(path):
            torch.ones(4, 4) @ torch.ones(4, 4)
            1 / 0  # noqa: B018
    finally:
        del os.environ["NPROF_CPU_PEAKS"]
    p = Profile.load(path)
    assert p.info.meta["block_raised"] == "ZeroDivisionError"
    assert p.info.peak_flops is None
    assert [r["flops"] for r in p.instructions.to_pylist() if r["opcode"] == "aten::mm"] == [2 * 4 * 4 * 4]


def test_steps_number_the_iterations(tmp_path: Path) -> None:
    import nprof.torch

    os.environ["NPROF_CPU_PEAKS"] = "off"
    try:
        with nprof.torch.profile(tmp_path / "steps.ntff") as prof:
            for i in range(3):
                torch.ones(2, 3) @ torch.ones(3, 2)
                if i == 0:
                    prof.step()
                else:
                    nprof.torch.step()  # the module-level form steps the running session
        nprof.torch.step()  # nothing running: a no-op
    finally:
        del os.environ["NPROF_CPU_PEAKS"]
    assert prof.profile is not None
    mm = [r for r in prof.profile.instructions.to_pylist() if r["opcode"] == "aten::mm"]
    assert [r["iteration"] for r in mm] == [0, 1, 2]


def test_compiled_module_runs_without_torchs_global_hook_warning(tmp_path: Path, monkeypatch) -> None:
    """nprof's module-path hooks are global; torch warns about them on every call of a torch.compile'd module.
    The warning is about nprof, not the user's code: it is silenced while profiling, and only then."""
    import warnings

    import nprof.torch

    monkeypatch.setenv("NPROF_CPU_PEAKS", "off")
    model = torch.compile(torch.nn.Linear(4, 2), backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with nprof.torch.profile(tmp_path / "c.ntff", device="cpu"):
            model(torch.ones(3, 4))
        handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)  # the user's own hook
        try:
            model(torch.ones(3, 4))
        finally:
            handle.remove()
    hook_warnings = [str(w.message) for w in seen if "global hooks" in str(w.message)]
    assert len(hook_warnings) == 1  # the user's hook, outside the profiled block: torch's warning stands
