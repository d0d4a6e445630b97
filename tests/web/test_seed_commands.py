"""The issue-12 seed command lines verbatim: a multi-worker capture to `-s output/profile.ntff` is opened by
`nprof view -n model.neff -s output/profile.ntff` as the worker group (a tab per rank)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nprof.cli import main
from nprof.program.file import save_program
from nprof.store import Store
from tests.multiworker.kit import collective_program


def test_view_of_a_multi_worker_capture_path_opens_the_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NPROF_NO_PROGRESS", "1")
    save_program(collective_program("all_reduce", (8, 16), (8, 16)), tmp_path / "model.neff")
    argv = ["capture", "-n", "model.neff", "--collectives-workers-per-node", "4", "-s", "output/profile.ntff"]
    assert main(argv) == 0
    assert "wrote 4 profiles to output/" in capsys.readouterr().out
    assert not Path("output/profile.ntff").exists()
    db = tmp_path / "db"
    argv = ["view", "-n", "model.neff", "-s", "output/profile.ntff", "--ingest-only", "--db", str(db)]
    assert main(argv) == 0
    gid = re.search(r'Profile "([^"]+)" is ready', capsys.readouterr().out).group(1)
    group = Store(db).group(gid)
    assert [r["rank"] for r in group["ranks"]] == [0, 1, 2, 3]


def test_view_of_a_missing_single_profile_still_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-s", str(tmp_path / "nothing.ntff"), "--ingest-only", "--db", str(tmp_path / "db")]) == 2
    assert "nothing.ntff" in capsys.readouterr().err
