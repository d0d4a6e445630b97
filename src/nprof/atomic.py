"""Atomic writing of files and directories, shared by every stage that writes.

Contract:
* `atomic_file(path)` yields a binary file object on a temporary file beside
  `path`; when the block succeeds the file gets the permissions a plain `open`
  would give (0o666 minus the umask, not mkstemp's 0o600), is optionally
  fsynced, and is renamed into place. On any error the temporary file is
  removed, so nothing half-written is ever left under either name.
* `atomic_dir(path)` does the same for a directory of files (0o777 minus the
  umask); an existing directory at `path` is replaced only after the new one
  is complete.
* Problems the user can fix (missing directory, not writable, path is a
  directory / a file, an OS error while writing) raise `NprofError` with one
  line naming the path and ending with "pick another <what>", where `what` is
  the command-line flag that chose the path ("--output-file" by default) or
  "path" for library callers.

This module imports only `nprof.errors`, so every stage may use it.
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

__all__ = ["atomic_dir", "atomic_file"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _parent(target: Path, what: str) -> Path:
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise NprofError(f"{target}: directory {parent} does not exist; create it or pick another {what}")
    return parent


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass


@contextmanager
def atomic_file(
    path: str | os.PathLike[str],
    *,
    what_flag: str = "--output-file",
    fsync: bool = False,
) -> Iterator[BinaryIO]:
    """Write the file `path` atomically (see module doc); `what_flag` names the path in messages."""
    target = Path(path)
    if target.is_dir():
        raise NprofError(f"{target}: is a directory; give a file name with {what_flag}")
    parent = _parent(target, what_flag)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise NprofError(f"{target}: cannot write here ({exc.strerror}); pick a writable {what_flag}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        _remove(Path(tmp))
        raise NprofError(f"{target}: cannot write ({exc.strerror or exc}); pick another {what_flag}") from exc
    except BaseException:
        _remove(Path(tmp))
        raise


@contextmanager
def atomic_dir(path: str | os.PathLike[str], *, what_flag: str = "--output-file") -> Iterator[Path]:
    """Write the directory `path` atomically (see module doc); yields the temporary directory to fill."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise NprofError(f"{target}: exists and is not a directory; pick another {what_flag}")
    parent = _parent(target, what_flag)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise NprofError(f"{target}: cannot write here ({exc.strerror}); pick a writable {what_flag}") from exc
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=parent))
            os.replace(target, old / "x")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        _remove(tmp)
        raise NprofError(f"{target}: cannot write ({exc.strerror or exc}); pick another {what_flag}") from exc
    except BaseException:
        _remove(tmp)
        raise
