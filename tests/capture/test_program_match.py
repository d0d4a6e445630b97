"""`nprof view -n PROGRAM -s PROFILE`: the program is validated like -s and must be the one that made the profile."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from nprof.arch.isa import Engine, Opcode
from nprof.capture.program_match import check_program
from nprof.capture.sim import capture_program
from nprof.cli import main
from nprof.errors import NprofError
from nprof.program.file import save_program
from tests.device.kit import Kit

KINETO = Path(__file__).parents[1] / "fixtures" / "kineto_cuda_small.json"


def _program(tmp_path: Path, name: str, cols: int = 40, file: str | None = None) -> Path:
    k = Kit(name)
    x = k.load("x", np.zeros((8, cols), np.float32))
    y = k.sbuf("y", 8, cols)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (x,), source="k.py:7", func="exp")
    k.store("out", y)
    return save_program(k.program(), tmp_path / (file or f"{name}.neff"))


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, Path]:
    """(program, the profile it made)."""
    program = _program(tmp_path, "expk")
    profile = tmp_path / "p.ntff"
    capture_program(program, profile, {}, timing_only=True)
    return program, profile


def _newer_version(program: Path, out: Path) -> Path:
    """A copy of `program` whose manifest claims a schema version this nprof does not know."""
    with zipfile.ZipFile(program) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                manifest["schema_version"] = 99
                data = json.dumps(manifest).encode()
            dst.writestr(info, data)
    return out


def test_the_program_that_made_the_profile_is_accepted(made: tuple[Path, Path]) -> None:
    program, profile = made
    assert check_program(program, profile).name == "expk"
    copy = profile.parent / "elsewhere" / "copy.neff"
    copy.parent.mkdir()
    copy.write_bytes(program.read_bytes())
    assert check_program(copy, profile).name == "expk"  # matched by content, not by path


def test_another_program_is_refused(tmp_path: Path, made: tuple[Path, Path]) -> None:
    _, profile = made
    with pytest.raises(NprofError, match=r"not the program that made .*captured from program 'expk', this is 'other'"):
        check_program(_program(tmp_path, "other"), profile)
    with pytest.raises(NprofError, match=r"tensors differ .*input x \[8, 48\] float32 here, input x \[8, 40\]"):
        check_program(_program(tmp_path, "expk", cols=48, file="wide.neff"), profile)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"x", "not an nprof program"),
        (b"", "empty file"),
        (None, "no such file"),
    ],
)
def test_invalid_program_files_are_refused(
    tmp_path: Path, made: tuple[Path, Path], content: bytes | None, message: str
) -> None:
    bad = tmp_path / "bad.neff"
    if content is not None:
        bad.write_bytes(content)
    with pytest.raises(NprofError, match=message):
        check_program(bad, made[1])


def test_newer_schema_and_a_profile_given_as_program_are_refused(tmp_path: Path, made: tuple[Path, Path]) -> None:
    program, profile = made
    with pytest.raises(NprofError, match="schema version 99 is newer"):
        check_program(_newer_version(program, tmp_path / "new.neff"), profile)
    with pytest.raises(NprofError, match="profile, not a program"):
        check_program(profile, profile)


def test_a_trace_records_no_program(made: tuple[Path, Path]) -> None:
    assert check_program(made[0], KINETO).name == "expk"  # any valid program goes with a Chrome trace


def test_cli_one_line_exit_2_and_the_store_unchanged(
    tmp_path: Path, made: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    program, profile = made
    other = _program(tmp_path, "other")
    for argv in (
        ["view", "-n", str(other), "-s", str(profile), "--output-format", "summary-json"],
        ["view", "-n", str(other), "-s", str(profile), "--ingest-only", "--db", str(tmp_path / "db")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("nprof view: -n ") and "not the program that made" in err and err.count("\n") == 1
    assert not (tmp_path / "db").exists() or not list((tmp_path / "db").rglob("*.duckdb"))
    assert main(["view", "-n", str(program), "-s", str(profile), "--ingest-only", "--db", str(tmp_path / "db")]) == 0
    assert "is ready to view" in capsys.readouterr().out
