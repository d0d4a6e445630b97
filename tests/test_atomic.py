"""Tests for `nprof.atomic`: permissions, cleanup on error, directory replacement, one-line errors."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from nprof.atomic import atomic_dir, atomic_file
from nprof.errors import NprofError


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_file_permissions_follow_umask(tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / "out.bin"
    with atomic_file(target, fsync=True) as fh:
        fh.write(b"hello")
    assert target.read_bytes() == b"hello"
    assert _mode(target) == 0o644
    os.umask(0o077)
    with atomic_file(target) as fh:
        fh.write(b"again")
    assert _mode(target) == 0o600


def test_dir_permissions_follow_umask(tmp_path: Path, umask_022: None) -> None:
    target = tmp_path / "tables"
    with atomic_dir(target) as tmp:
        (tmp / "a.csv").write_text("x\n")
    assert (target / "a.csv").read_text() == "x\n"
    assert _mode(target) == 0o755


def test_file_nothing_left_on_exception(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(target) as fh:
        fh.write(b"partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_dir_nothing_left_on_exception(tmp_path: Path) -> None:
    target = tmp_path / "tables"
    with pytest.raises(KeyError), atomic_dir(target) as tmp:
        (tmp / "a.csv").write_text("x\n")
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []


def test_dir_replaces_existing(tmp_path: Path) -> None:
    target = tmp_path / "tables"
    target.mkdir()
    (target / "stale.csv").write_text("old\n")
    with atomic_dir(target) as tmp:
        (tmp / "new.csv").write_text("new\n")
    assert sorted(p.name for p in target.iterdir()) == ["new.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]


def _one_line(exc: pytest.ExceptionInfo[NprofError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(NprofError) as exc, atomic_file(tmp_path / "nope" / "out.bin"):
        pass
    assert "does not exist; create it or pick another --output-file" in _one_line(exc)
    with pytest.raises(NprofError) as exc, atomic_dir(tmp_path / "nope" / "d", what_flag="path"):
        pass
    assert _one_line(exc).endswith("pick another path")


def test_target_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NprofError) as exc, atomic_file(tmp_path):
        pass
    assert "is a directory; give a file name with --output-file" in _one_line(exc)


def test_dir_target_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    with pytest.raises(NprofError) as exc, atomic_dir(target):
        pass
    assert "exists and is not a directory" in _one_line(exc)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_not_writable(tmp_path: Path) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(NprofError) as exc, atomic_file(locked / "out.bin"):
            pass
        assert "cannot write here" in _one_line(exc)
        assert "pick a writable --output-file" in _one_line(exc)
    finally:
        locked.chmod(0o700)
