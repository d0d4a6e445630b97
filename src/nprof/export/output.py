"""Atomic outputs and input opening shared by every exporter.

Contract:
* `atomic_file(path)` yields a binary file object on a temporary file beside
  `path` and renames it into place only when the block succeeds; on any error
  the temporary file is removed, so nothing half-written is ever left.
* `atomic_dir(path)` does the same for a directory of files (an existing
  directory at `path` is replaced only after the new one is complete).
* Problems the user can fix (missing directory, no permission, path is a
  directory / a file) raise `NprofError` with one line naming the path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from nprof.errors import NprofError


def _parent(target: Path) -> Path:
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise NprofError(f"{target}: directory {parent} does not exist; create it or pick another --output-file")
    return parent


@contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write a file atomically (see module doc)."""
    target = Path(path)
    if target.is_dir():
        raise NprofError(f"{target}: is a directory; give a file name with --output-file")
    parent = _parent(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise NprofError(f"{target}: cannot write here ({exc.strerror}); pick a writable --output-file") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, target)
    except OSError as exc:
        _remove(Path(tmp))
        raise NprofError(f"{target}: cannot write ({exc.strerror}); pick another --output-file") from exc
    except BaseException:
        _remove(Path(tmp))
        raise


@contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Write a directory atomically (see module doc)."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise NprofError(f"{target}: exists and is not a directory; pick another --output-file")
    parent = _parent(target)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise NprofError(f"{target}: cannot write here ({exc.strerror}); pick a writable --output-file") from exc
    try:
        yield tmp
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
            os.replace(target, old / "x")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        _remove(tmp)
        raise NprofError(f"{target}: cannot write ({exc.strerror}); pick another --output-file") from exc
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass
