"""The embedded store: a directory of per-profile DuckDB files plus a JSON catalog.

Contract of `Store(path=None)`:
* location: `path`, else $NPROF_DB, else ~/.local/share/nprof/store. Layout:
  `catalog.json`, `profiles/<id>.duckdb` (immutable after ingest) and its parts directory
  `profiles/<pid>-<hex>.parts/` (the raw tables as Parquet, named in the catalog entry's
  `parts`; replaced and deleted with the profile, `nprof.store.raw_parts`),
  `annotations/<id>.json`, `tmp/` (ingest in progress).
* `ingest(profile, profile_id=..., force=...)` runs the analysis passes, builds the
  profile's database in `tmp/`, renames it into `profiles/` and only then registers
  it in the catalog: a crash or Ctrl-C at any point leaves no half profile visible
  and every other profile intact. An id already in the catalog raises NprofError
  unless `force`. `ingest_file(path)` opens .ntff / Chrome JSON and derives the id
  (slug of the name + hash of the file's path, size and mtime, and of the findings'
  `thresholds` when not the defaults); ingesting the same unchanged file again with the
  same thresholds reuses the stored profile.
* `cursor(id)` yields a DuckDB cursor on the profile (read-only). Connections open
  lazily, live in a small LRU (`max_open`) and close when idle, so thousands of
  stored profiles never exhaust file descriptors or memory. A profile replaced by
  another process (`--force`) is reopened on next use.
* Unknown ids raise `NotFound` (an NprofError; the web layer maps it to 404).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import duckdb
import pyarrow as pa

from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.progress import progress
from nprof.store.catalog import Catalog, check_display_name, check_id, derive_id, locked
from nprof.store.ingest import Analyse, Handoff, build_profile_db
from nprof.store.lean import load_lean
from nprof.store.raw_parts import parts_name, remove_parts, search_path_config

if TYPE_CHECKING:
    from nprof.analysis.thresholds import Thresholds


class NotFound(NprofError):
    """A profile, event, marker, table or group that does not exist."""


def default_store_path() -> Path:
    env = os.environ.get("NPROF_DB")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "share" / "nprof" / "store"


def run_analysis(
    p: Profile,
    thresholds: Thresholds | None = None,
    emit: Callable[[str, pa.Table | pa.RecordBatchReader], None] | None = None,
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The analysis passes' tables (findings by `thresholds`, None = the defaults) and the flat summary of `p`.
    `emit`: called with (name, table) as each pass ends, the table then left out of the returned dict and
    not held here (the caller can store and free it before the next pass runs); the dict is then empty, and
    the passes of `nprof.analysis.STREAMED` (the counters) give a record batch reader of their table's rows
    instead (`nprof.analysis.each_output`: made as it is read, never whole; it may be read on another thread
    while the later passes run)."""
    from nprof.analysis import DEFAULT_THRESHOLDS, each_output, each_pass

    tables: dict[str, pa.Table] = {}
    summary: dict[str, Any] = {}
    th = thresholds or DEFAULT_THRESHOLDS
    for name, table in each_pass(p, thresholds=th) if emit is None else each_output(p, thresholds=th):
        if name == "summary":
            summary = _flat_summary(cast(pa.Table, table))
        if emit is None:
            tables[name] = cast(pa.Table, table)
        else:
            emit(name, table)
        del table  # not held while the next pass runs
    return tables, summary


def _flat_summary(table: pa.Table) -> dict[str, Any]:
    """The summary pass's table as {name: number, else text}."""
    summary: dict[str, Any] = {}
    t = table.to_pydict()
    for name, text, num in zip(t["name"], t["value"], t["numeric"], strict=True):
        summary[name] = text if num is None else (int(num) if text.lstrip("-").isdigit() else num)
    return summary


def file_fingerprint(path: Path, thresholds: Thresholds | None = None) -> str:
    """What makes a stored profile current for the file at `path`: its resolved path, size and mtime, plus
    the findings thresholds that differ from the defaults (a profile analysed otherwise is another one)."""
    src = path.resolve()
    st = src.stat()
    changed = thresholds.changed() if thresholds is not None else {}
    tuned = "|thresholds " + ",".join(f"{k}={v}" for k, v in sorted(changed.items())) if changed else ""
    return f"{src}|{st.st_size}|{st.st_mtime_ns}{tuned}"


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (a process we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class _Conn:
    def __init__(self, con: duckdb.DuckDBPyConnection, key: tuple[int, int]) -> None:
        self.con = con
        self.key = key
        self.users = 0
        self.last = time.monotonic()
        self.meta: dict[str, Any] | None = None


class Store:
    """See module doc."""

    def __init__(self, path: str | os.PathLike[str] | None = None, max_open: int = 8, idle_seconds: float = 120.0):
        self.dir = Path(path).expanduser() if path else default_store_path()
        self._claimed: set[str] = set()
        try:
            for sub in ("profiles", "annotations", "tmp"):
                (self.dir / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NprofError(
                f"cannot create the store at {self.dir} ({exc.strerror}); choose another with --db"
            ) from exc
        self.catalog = Catalog(self.dir)
        self.max_open = max_open
        self.idle_seconds = idle_seconds
        self._conns: OrderedDict[str, _Conn] = OrderedDict()
        self._lock = threading.Lock()

    # ---- catalog -------------------------------------------------------------------------
    def db_path(self, profile_id: str) -> Path:
        return self.dir / "profiles" / f"{check_id(profile_id)}.duckdb"

    def list(self) -> list[dict[str, Any]]:
        entries = list(self.catalog.profiles().values())
        return sorted(entries, key=lambda e: (e.get("ingested", ""), e["id"]), reverse=True)

    def entry(self, profile_id: str) -> dict[str, Any]:
        check_id(profile_id)
        e = self.catalog.get(profile_id)
        if e is None:
            raise NotFound(f'no profile "{profile_id}" in the store {self.dir}; list them at /api/profiles')
        return e

    def group(self, group_id: str) -> dict[str, Any]:
        check_id(group_id, "group id")
        g = self.catalog.group(group_id)
        if g is None:
            raise NotFound(f'no multi-worker group "{group_id}" in the store {self.dir}')
        return g

    def rename(self, profile_id: str, display_name: str) -> dict[str, Any]:
        name = check_display_name(display_name)
        self.entry(profile_id)

        def change(data: dict[str, Any]) -> dict[str, Any]:
            if profile_id not in data["profiles"]:
                raise NotFound(f'no profile "{profile_id}" in the store {self.dir}')
            data["profiles"][profile_id]["display_name"] = name
            return data["profiles"][profile_id]

        return self.catalog.update(change)

    def delete(self, profile_id: str) -> None:
        self.entry(profile_id)

        def change(data: dict[str, Any]) -> None:
            data["profiles"].pop(profile_id, None)
            for g in data["groups"].values():
                g["ranks"] = [r for r in g["ranks"] if r["profile_id"] != profile_id]
            data["groups"] = {k: g for k, g in data["groups"].items() if g["ranks"]}

        parts = self.catalog.get(profile_id) or {}
        self.catalog.update(change)
        self._drop(profile_id)
        with locked(self.dir):
            self.db_path(profile_id).unlink(missing_ok=True)
            remove_parts(self.dir / "profiles", parts.get("parts"))
            (self.dir / "annotations" / f"{profile_id}.json").unlink(missing_ok=True)

    # ---- ingest --------------------------------------------------------------------------
    def ingest(
        self,
        p: Profile | Handoff,
        profile_id: str,
        *,
        display_name: str | None = None,
        force: bool = False,
        source: str | None = None,
        fingerprint: str | None = None,
        group: str | None = None,
        raw_source: Path | None = None,
        thresholds: Thresholds | None = None,
    ) -> dict[str, Any]:
        """Store `p` under `profile_id` atomically (see module doc); returns the catalog entry.
        `raw_source`: the nprof Profile file `p` was loaded from (its tables are then copied, not re-encoded);
        `thresholds`: when findings are reported (None: the defaults). A `Handoff` (`p` held nowhere else) lets
        the build free the profile once its event columns are built."""
        check_id(profile_id)
        with self.claim(profile_id):
            analyse = partial(run_analysis, thresholds=thresholds)
            return self._ingest(p, profile_id, display_name, force, source, fingerprint, group, raw_source, analyse)

    def _ingest(
        self,
        p: Profile | Handoff,
        profile_id: str,
        display_name: str | None,
        force: bool,
        source: str | None,
        fingerprint: str | None,
        group: str | None,
        raw_source: Path | None,
        analyse: Analyse,
    ) -> dict[str, Any]:
        if not force and self.catalog.get(profile_id) is not None:
            raise self._exists(profile_id)
        info = p.info
        self._sweep_tmp()
        tmp = self.dir / "tmp" / f"{profile_id}.{os.getpid()}.{secrets.token_hex(4)}.duckdb"
        parts = parts_name()
        try:
            with progress(5, f"Ingesting {profile_id}") as bar:
                result = build_profile_db(p, tmp, analyse, bar, parts, raw_source)
            entry = {
                "id": profile_id,
                "display_name": display_name or info.name or profile_id,
                "name": info.name,
                "device": info.device,
                "preset": info.preset,
                "created": info.created,
                "ingested": datetime.now(UTC).isoformat(timespec="seconds"),
                "total_time_ns": result.total_time_ns,
                "event_count": result.event_count,
                "rank": info.rank,
                "world_size": info.world_size,
                "group": group,
                "source": source,
                "fingerprint": fingerprint,
                "parts": parts,
            }

            def register(data: dict[str, Any]) -> None:
                if not force and profile_id in data["profiles"]:
                    raise self._exists(profile_id)
                self._drop(profile_id)
                old = data["profiles"].get(profile_id, {}).get("parts")
                os.replace(tmp.parent / parts, self.dir / "profiles" / parts)
                os.replace(tmp, self.db_path(profile_id))
                data["profiles"][profile_id] = entry
                remove_parts(self.dir / "profiles", old)

            self.catalog.update(register)
            return entry
        finally:
            for f in (tmp, tmp.with_name(tmp.name + ".wal")):
                f.unlink(missing_ok=True)
            remove_parts(tmp.parent, parts)

    def _exists(self, profile_id: str) -> NprofError:
        return NprofError(
            f'profile "{profile_id}" is already in the store; '
            "use --force to replace it or --db-bucket ID for another id"
        )

    def ingest_file(
        self,
        path: str | os.PathLike[str],
        *,
        profile_id: str | None = None,
        display_name: str | None = None,
        force: bool = False,
        group: str | None = None,
        thresholds: Thresholds | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Open and ingest a profile file (findings by `thresholds`, None = the defaults); returns (entry,
        reused) where reused means it was already stored."""
        from nprof.capture import open_profile, sniff_kind

        src = Path(path).expanduser()
        if not src.exists():
            raise NprofError(f"{src}: no such file; check the -s path")
        src = src.resolve()
        fingerprint = file_fingerprint(src, thresholds)
        if profile_id is None:
            profile_id = derive_id(src.name.split(".")[0], fingerprint)
            old = self.catalog.get(profile_id)
            if old is not None and old.get("fingerprint") == fingerprint and not force:
                if display_name and display_name != old.get("display_name"):
                    old = self.rename(profile_id, display_name)
                return old, True
        check_id(profile_id)
        with self.claim(profile_id):
            if not force and self.catalog.get(profile_id) is not None:
                raise self._exists(profile_id)
            kind = sniff_kind(src)  # an nprof file keeps its string columns encoded: ingest reads their codes
            # own: the sole holder; an nprof file's raw tables are copied from it, so the lean profile suffices
            own = Handoff(load_lean(src) if kind == "ntff" else open_profile(src))
            pa.default_memory_pool().release_unused()  # the dropped columns (Arrow's allocator keeps freed pages)
            entry = self.ingest(
                own,
                profile_id,
                display_name=display_name or own.info.name or src.stem,
                force=force,
                source=str(src),
                fingerprint=fingerprint,
                group=group,
                raw_source=src if kind == "ntff" else None,
                thresholds=thresholds,
            )
        return entry, False

    def register_group(self, group_id: str, display_name: str, ranks: Sequence[tuple[int, str]], force: bool) -> dict:
        check_id(group_id, "group id")

        def change(data: dict[str, Any]) -> dict[str, Any]:
            if group_id in data["groups"] and not force:
                raise NprofError(f'group "{group_id}" is already in the store; use --force to replace it')
            g = {
                "id": group_id,
                "display_name": display_name,
                "ranks": [{"rank": r, "profile_id": pid} for r, pid in sorted(ranks)],
            }
            data["groups"][group_id] = g
            return g

        return self.catalog.update(change)

    @contextmanager
    def claim(self, profile_id: str) -> Iterator[None]:
        """Hold the ingest claim on `profile_id`: a second process ingesting the same id is refused at
        once (not after its full ingest). An flock on `locks/<id>.lock`: released by the OS if we die."""
        if profile_id in self._claimed:
            yield
            return
        lock_dir = self.dir / "locks"
        lock_dir.mkdir(exist_ok=True)
        fd = os.open(lock_dir / f"{profile_id}.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise NprofError(
                f'"{profile_id}" is being ingested by another nprof process; wait for it or use --db-bucket ID'
            ) from None
        self._claimed.add(profile_id)
        try:
            yield
        finally:
            self._claimed.discard(profile_id)
            os.close(fd)

    def _sweep_tmp(self) -> None:
        """Remove temp files left by ingests whose process is gone (crash, kill -9)."""
        for f in (self.dir / "tmp").iterdir():
            if f.is_dir():  # a parts directory: <pid>-<hex>.parts
                head = f.name.split("-", 1)[0]
                if head.isdigit() and not _alive(int(head)):
                    shutil.rmtree(f, ignore_errors=True)
                continue
            parts = f.name.split(".")
            pid = next((int(x) for x in parts[1:] if x.isdigit()), None)
            if pid is None or pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                f.unlink(missing_ok=True)
            except PermissionError:
                pass

    # ---- connections ---------------------------------------------------------------------
    @contextmanager
    def cursor(self, profile_id: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only DuckDB cursor on the profile's database (LRU-cached connection)."""
        with self.session(profile_id) as (cur, _meta):
            yield cur

    @contextmanager
    def session(self, profile_id: str) -> Iterator[tuple[duckdb.DuckDBPyConnection, dict[str, Any]]]:
        """A read-only cursor plus the profile's cached metadata (rows, opcodes, stats, manifest, summary)."""
        from nprof.store.info import load_meta

        self.entry(profile_id)
        path = self.db_path(profile_id)
        with self._lock:
            c = self._open(profile_id, path)
            c.users += 1
        cur = c.con.cursor()
        try:
            if c.meta is None:
                c.meta = load_meta(cur)
            yield cur, c.meta
        finally:
            cur.close()
            with self._lock:
                c.users -= 1
                c.last = time.monotonic()
                self._evict()

    def _open(self, profile_id: str, path: Path) -> _Conn:
        try:
            st = path.stat()
        except FileNotFoundError as exc:
            raise NotFound(f'profile "{profile_id}" is registered but its data file is missing; re-ingest it') from exc
        key = (st.st_ino, st.st_mtime_ns)
        c = self._conns.get(profile_id)
        if c is not None and c.key != key and c.users == 0:
            c.con.close()
            del self._conns[profile_id]
            c = None
        if c is None:
            config = {"memory_limit": "1GB", "threads": 2, **search_path_config(path.parent)}
            con = duckdb.connect(str(path), read_only=True, config=config)
            c = _Conn(con, key)
            self._conns[profile_id] = c
        self._conns.move_to_end(profile_id)
        return c

    def _evict(self) -> None:
        now = time.monotonic()
        for pid in list(self._conns):
            c = self._conns[pid]
            too_many = len(self._conns) > self.max_open
            if c.users == 0 and (too_many or now - c.last > self.idle_seconds):
                c.con.close()
                del self._conns[pid]

    def _drop(self, profile_id: str) -> None:
        with self._lock:
            c = self._conns.pop(profile_id, None)
            if c is not None:
                c.con.close()

    def close_idle(self) -> int:
        """Close connections idle for longer than `idle_seconds`; returns how many remain open."""
        with self._lock:
            self._evict()
            return len(self._conns)

    def open_count(self) -> int:
        return len(self._conns)

    def close(self) -> None:
        with self._lock:
            for c in self._conns.values():
                c.con.close()
            self._conns.clear()
