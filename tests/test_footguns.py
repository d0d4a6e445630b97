"""The footguns of issue 13 point 7, each refused (one line, exit 2) or fixed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.cli import main
from nprof.errors import FormatError
from nprof.profile import Profile
from tests.capture.test_sim_cli import program_file  # noqa: F401 - fixture
from tests.conftest import tiny_profile


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_capture_profile_over_the_program_is_refused(program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    before = program_file.read_bytes()
    assert main(["capture", "-n", str(program_file), "-s", str(program_file)]) == 2
    assert "is the program file given with -n" in _err(capsys)
    assert program_file.read_bytes() == before


def test_capture_profile_over_an_input_is_refused(tmp_path: Path, program_file: Path, capsys) -> None:  # noqa: F811
    x = tmp_path / "x.npy"
    np.save(x, np.ones((8, 40), np.float32))
    assert main(["capture", "-n", str(program_file), "-s", str(x), "x", str(x)]) == 2
    assert "is an input file" in _err(capsys)


def test_capture_program_and_command_together_is_refused(program_file: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    assert main(["capture", "-n", str(program_file), "-s", str(tmp_path / "p.ntff"), "--", "python", "s.py"]) == 2
    assert "not both" in _err(capsys)


def test_output_file_equal_to_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tiny_profile().save(tmp_path / "t.ntff")
    before = path.read_bytes()
    assert main(["view", "-s", str(path), "--output-format", "json", "--output-file", str(path)]) == 2
    assert "is the -s input" in _err(capsys)
    assert path.read_bytes() == before


def test_output_file_dash_is_stdout_for_text_and_refused_for_binary(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tiny_profile().save(tmp_path / "t.ntff")
    assert main(["view", "-s", str(path), "--output-format", "summary-json", "--output-file", "-"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("{")
    assert not (tmp_path / "-").exists()
    assert main(["view", "-s", str(path), "--output-format", "parquet", "--output-file", "-"]) == 2
    assert "text formats only" in _err(capsys)


def test_random_bytes_named_ntff_are_not_called_a_real_ntff(tmp_path: Path) -> None:
    path = tmp_path / "x.ntff"
    path.write_bytes(bytes(range(256)))
    with pytest.raises(FormatError, match=r"not an nprof profile \(not a ZIP container\); if it is a real AWS NTFF"):
        Profile.load(path)


def test_cli_display_name_follows_the_api_rule(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("NPROF_DB", str(tmp_path / "store"))
    path = tiny_profile().save(tmp_path / "t.ntff")
    assert main(["view", "-s", str(path), "--ingest-only", "--display-name", "x" * 201]) == 2
    assert "display name must be 1-200 characters" in _err(capsys)
    assert main(["view", "-s", str(path), "--ingest-only", "--display-name", "   "]) == 2


def test_numbers_past_their_range_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["view", "--port", "70000"], ["capture", "-n", "x", "-r", str(10**12)],
                 ["capture", "-n", "x", "--profile-nth-exec", str(10**20)]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2
        assert "expected a number <=" in capsys.readouterr().err
