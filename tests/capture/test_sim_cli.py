"""`nprof capture -n PROGRAM -s PROFILE [NAME FILE.npy ...]` end to end on a saved hand-built program."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.arch.isa import Engine, Opcode
from nprof.capture.sim import capture_program
from nprof.cli import main
from nprof.profile import Profile
from nprof.program.file import save_program
from tests.device.kit import Kit


@pytest.fixture
def program_file(tmp_path: Path) -> Path:
    k = Kit("expk")
    x = k.load("x", np.zeros((8, 40), np.float32))
    y = k.sbuf("y", 8, 40)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (x,), source="k.py:7", func="exp")
    k.store("out", y)
    return save_program(k.program(), tmp_path / "expk.neff")


def test_capture_with_inputs(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.ones((8, 40), np.float32))
    out = tmp_path / "p.ntff"
    assert main(["capture", "-n", str(program_file), "-s", str(out), "x", str(tmp_path / "x.npy")]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    profile = Profile.load(out)
    assert f"device time {profile.total_time_ns / 1000:.3f} us" in cap.out
    assert f"profile written to {out}" in cap.out
    assert profile.info.program == str(program_file.resolve())
    assert profile.info.device == "virtual-neuroncore"
    assert profile.instructions.column("nki_source_location").to_pylist() == ["k.py:7"]
    assert profile.dma.num_rows == 2


def test_trn3_capture_notes_the_assumed_figures(
    tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "x.npy", np.ones((8, 40), np.float32))
    out = tmp_path / "p.ntff"
    args = ["capture", "-n", str(program_file), "-s", str(out), "x", str(tmp_path / "x.npy")]
    assert main([*args, "--device-preset", "trn3"]) == 0
    err = capsys.readouterr().err
    assert err == (f"nprof capture: note: trn3 times rest partly on assumed hardware figures; "
                   f"`nprof view -s {out} --output-format summary-text` lists them\n")  # fmt: skip
    assert Profile.load(out).info.meta["preset_assumptions"]
    assert main([*args, "--device-preset", "trn2"]) == 0 and capsys.readouterr().err == ""


def test_no_inputs_warns_on_stderr(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.ntff"
    assert main(["capture", "-n", str(program_file), "-s", str(out)]) == 0
    err = capsys.readouterr().err
    assert err == "nprof capture: warning: no inputs given: running on all-zero inputs; results may be inf/NaN\n"
    assert "no inputs given" in Profile.load(out).info.meta["warnings"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["x"], "inputs come in NAME FILE.npy pairs; got 1 arguments"),
        (["y", "y.npy"], "program 'expk' has no input 'y'; its inputs are: x"),
        (["x", "missing.npy"], "input 'x': file missing.npy does not exist"),
        (["x", "x.npy", "x", "x.npy"], "input 'x' is given twice"),
    ],
)
def test_bad_input_arguments(
    tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["capture", "-n", str(program_file), "-s", str(tmp_path / "p.ntff"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("nprof capture: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "p.ntff").exists()


def test_wrong_shape_and_bad_npy(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.ones((8, 41), np.float32))
    argv = ["capture", "-n", str(program_file), "-s", str(tmp_path / "p.ntff"), "x", str(tmp_path / "x.npy")]
    assert main(argv) == 2
    assert "input 'x' expects shape (8, 40) float32, got shape (8, 41)" in capsys.readouterr().err
    (tmp_path / "x.npy").write_text("not numpy")
    assert main(argv) == 2
    assert "not a .npy file (it is a text file)" in capsys.readouterr().err


def test_list_inputs(program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "-n", str(program_file), "--list-inputs"]) == 0
    assert capsys.readouterr().out == "x\t(8, 40)\tfloat32\n"


def test_options(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.ntff"
    argv = ["capture", "-n", str(program_file), "-s", str(out), "--device-preset", "trn2", "--timing-only",
            "--profile-nth-exec", "3", "--ignore-exec-errors"]  # fmt: skip
    assert main(argv) == 0
    written = tmp_path / "p_exec_3.ntff"  # neuron-profile's name for --profile-nth-exec 3
    assert not out.exists() and f"execution 3 profiled)\nprofile written to {written}\n" in capsys.readouterr().out
    info = Profile.load(written).info
    assert (info.preset, info.meta["executions"], info.meta["profiled_execution"], info.meta["numerics"]) == (
        "trn2", "3", "3", "false",
    )  # fmt: skip


def test_profile_given_as_program(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.ntff"
    capture_program(program_file, out, {}, timing_only=True)
    assert main(["capture", "-n", str(out), "-s", str(tmp_path / "q.ntff")]) == 2
    assert "this is an nprof profile, not a program; pass it with -s" in capsys.readouterr().err


def test_missing_profile_path(program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "-n", str(program_file)]) == 2
    assert "missing -s PROFILE" in capsys.readouterr().err


def test_profile_path_is_a_directory(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "-n", str(program_file), "-s", str(tmp_path)]) == 2
    assert "is a directory; give the profile file to write" in capsys.readouterr().err
    assert main(["capture", "-n", str(program_file), "-s", str(tmp_path / "no" / "p.ntff")]) == 2
    assert "does not exist; create it" in capsys.readouterr().err


def test_an_mx_program_is_refused_on_a_core_without_mx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """quantize_mx exists on NeuronCore-v4 only: `--device-preset trn1/trn2` refuses the program (one line, exit 2,
    nothing written) instead of simulating instructions that core does not have."""
    from nprof import nki
    from tests.nki.helpers import quantize_scales as quantize

    nki.profile(working_directory=tmp_path, preset="trn3")(quantize)(np.ones((32, 16), np.float32))
    neff = tmp_path / "file.neff"
    for preset in ("trn1", "trn2"):
        out = tmp_path / f"{preset}.ntff"
        assert main(["capture", "-n", str(neff), "-s", str(out), "--device-preset", preset]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "uses NeuronCore-v4 MX instructions" in err and "--device-preset trn3" in err
        assert not out.exists()
    assert main(["capture", "-n", str(neff), "-s", str(tmp_path / "r"), "-r", "2", "--device-preset", "trn1"]) == 2
    assert "MX instructions" in capsys.readouterr().err
    assert main(["capture", "-n", str(neff), "-s", str(tmp_path / "t3.ntff")]) == 0  # the program's own trn3
