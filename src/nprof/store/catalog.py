"""The store catalog and small JSON documents kept next to the profile databases.

Contract: `Catalog(dir)` reads and updates `<dir>/catalog.json` (profiles and
multi-worker groups) under an exclusive `fcntl` lock on `<dir>/.lock`, writing a
temporary file and renaming it, so concurrent `nprof view` processes never lose
or corrupt entries and a crash leaves the previous catalog. Reads are cached by
file mtime/size, so listing thousands of profiles costs one small file read.
`read_json`/`write_json` do the same atomic write for annotation files.
Ids are validated by `check_id`: [A-Za-z0-9._-], 1..128 chars, not starting with '.'.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from nprof.atomic import atomic_file
from nprof.errors import NprofError

ID_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def check_id(profile_id: str, what: str = "profile id") -> str:
    """Return `profile_id` if it is a valid store id, else raise NprofError."""
    if not isinstance(profile_id, str) or not ID_RE.fullmatch(profile_id):
        raise NprofError(
            f"invalid {what} {profile_id!r}: use 1-128 characters from A-Z a-z 0-9 . _ - (not starting with '.')"
        )
    return profile_id


def check_display_name(name: str) -> str:
    """The display name stripped, if 1-200 characters on one line; else NprofError (CLI and API share it)."""
    text = name.strip() if isinstance(name, str) else ""
    if not text or len(text) > 200 or "\n" in text or "\r" in text:
        raise NprofError("display name must be 1-200 characters on one line")
    return text


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return (s[:limit].rstrip("-._") or "profile").lower()


def derive_id(name: str, fingerprint: str) -> str:
    """A readable, stable id: slug of the name plus 8 hex chars of the fingerprint's hash."""
    return f"{slug(name)}-{hashlib.sha1(fingerprint.encode()).hexdigest()[:8]}"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file in the same directory, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, what_flag="path", fsync=True) as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def read_json(path: Path, default: Any) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return default
    except orjson.JSONDecodeError as exc:
        raise NprofError(f"{path}: corrupt JSON ({exc}); delete or restore it") from exc


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Exclusive inter-process lock on `<directory>/.lock`."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class Catalog:
    """`catalog.json`: {"version": 1, "profiles": {id: entry}, "groups": {id: group}}."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.path = directory / "catalog.json"
        self._cache: tuple[tuple[int, int], dict[str, Any]] | None = None

    def _empty(self) -> dict[str, Any]:
        return {"version": 1, "profiles": {}, "groups": {}}

    def read(self) -> dict[str, Any]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return self._empty()
        key = (st.st_mtime_ns, st.st_size)
        if self._cache is None or self._cache[0] != key:
            data = read_json(self.path, self._empty())
            data.setdefault("profiles", {})
            data.setdefault("groups", {})
            self._cache = (key, data)
        return self._cache[1]

    def update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        """Apply `change(data)` under the lock and write the result atomically; returns change's result."""
        with locked(self.dir):
            self._cache = None
            data = orjson.loads(orjson.dumps(self.read()))
            result = change(data)
            write_json(self.path, data)
            self._cache = None
            return result

    def profiles(self) -> dict[str, dict[str, Any]]:
        return self.read()["profiles"]

    def get(self, profile_id: str) -> dict[str, Any] | None:
        return self.profiles().get(profile_id)

    def group(self, group_id: str) -> dict[str, Any] | None:
        return self.read()["groups"].get(group_id)
