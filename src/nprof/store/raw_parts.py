"""The raw Profile tables of a stored profile, kept as Parquet files the store's DuckDB file reads in place.

Contract:
* A profile database does not copy the Profile's own tables (instructions, dma, collectives,
  counters): they live as `<name>.parquet` in a *parts directory* beside the database,
  `profiles/<parts>/` where `<parts>` (`parts_name()`: unique per ingest, `<pid>-<hex>.parts`) is
  recorded in the database's `meta` and in the catalog entry. The database holds views
  `CREATE VIEW <name> AS SELECT * FROM read_parquet('<parts>/<name>.parquet')`; the path is
  relative and resolved through DuckDB's `file_search_path`, so every connection on a store
  profile sets it to the profiles directory (`search_path_config`), and the build connection to
  the directory it builds in (the parts directory moves with the database, under the same name).
* `write_parts(p, parts_dir, source)`: when `source` is the Profile file `p` was loaded from
  (an nprof container: Parquet members stored uncompressed in a ZIP), a member whose schema and
  row count match and whose ids are sorted is copied byte for byte (no decode, no encode);
  otherwise the Profile's table is written (zstd, ROW_GROUP rows per group, dictionary pages for the
  string columns only: numbers dictionary-encode poorly and cost half the write; instructions and
  dma sorted by id, counters by name then ts, so DuckDB's row-group statistics prune lookups).
* `remove_parts(profiles_dir, name)` deletes a parts directory (ignoring a missing one).
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nprof.container import open_container
from nprof.profile import TABLES, Profile
from nprof.profile.codes import plain_table
from nprof.profile.model import load_table
from nprof.profile.schema import FORMAT, SCHEMA_VERSION

ROW_GROUP = 131072  # rows per written row group: lookups by id decode at most this many rows
PARTS_SUFFIX = ".parts"


def parts_name() -> str:
    """A fresh parts directory name, unique per ingest (the pid lets a sweep spot dead builds)."""
    return f"{os.getpid()}-{secrets.token_hex(6)}{PARTS_SUFFIX}"


def search_path_config(directory: Path) -> dict[str, Any]:
    """DuckDB connection config resolving the views' relative Parquet paths against `directory`."""
    return {"file_search_path": str(directory)}


def in_id_order(table: pa.Table) -> bool:
    """Whether the rows of `table` are in increasing id order (True for a table without ids); one pass, no sort."""
    if table.num_rows < 2 or "id" not in table.column_names:
        return True
    ids = table["id"].to_numpy()
    return bool(np.all(ids[1:] >= ids[:-1]))


def _ordered(name: str, table: pa.Table) -> pa.Table:
    """Instructions and dma by id, counters by (name, ts); no copy when already in order."""
    if name in ("instructions", "dma"):
        if in_id_order(table):
            return table
        return table.take(pa.array(np.argsort(table["id"].to_numpy(), kind="stable")))
    if name == "counters" and table.num_rows:
        return table.sort_by([("name", "ascending"), ("ts", "ascending")])
    return table


def _copy_member(source: Path, offset: int, size: int, dest: Path) -> None:
    with open(source, "rb") as src, open(dest, "wb") as dst:
        done = 0
        while done < size:
            n = os.copy_file_range(src.fileno(), dst.fileno(), size - done, offset + done)
            if n <= 0:
                raise OSError("short copy")
            done += n


def _members(source: Path | None) -> dict[str, tuple[int, int]]:
    if source is None:
        return {}
    box = open_container(source, FORMAT, SCHEMA_VERSION, "profile")
    try:
        return {name: box.member(name) for name in TABLES if name in box.table_names}
    finally:
        box.close()


def _copied(name: str, table: pa.Table, source: Path, span: tuple[int, int], dest: Path) -> bool:
    """Copy the member when it holds exactly `table` in the order the store wants; False otherwise."""
    if (name in ("instructions", "dma") and not in_id_order(table)) or (name == "counters" and table.num_rows > 1):
        return False
    _copy_member(source, *span, dest)
    meta = pq.read_metadata(dest)
    if meta.num_rows == table.num_rows and meta.schema.to_arrow_schema().equals(TABLES[name], check_metadata=False):
        return True
    dest.unlink()
    return False


def write_parts(p: Profile, parts_dir: Path, source: Path | None = None) -> dict[str, str]:
    """Write the Profile's tables into `parts_dir` (see module doc); returns table -> how ("copied"/"written")."""
    parts_dir.mkdir()
    members = _members(source)
    how = {}
    for name in TABLES:
        table, dest = p.table(name), parts_dir / f"{name}.parquet"
        if source is not None and name in members and _copied(name, table, source, members[name], dest):
            how[name] = "copied"
            continue
        if table.schema.names != TABLES[name].names:  # a lean profile (nprof.store.lean): the file has it whole
            if source is None:
                raise ValueError(f"table {name} lacks columns and there is no source file to read it from")
            table = load_table(source, name)
        table = plain_table(_ordered(name, table))  # Profile.load(encoded=True): the file's own types
        strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
        options = {"compression": "zstd", "row_group_size": ROW_GROUP, "use_dictionary": strings}
        pq.write_table(table, dest, **options)
        how[name] = "written"
    return how


def create_views(con: duckdb.DuckDBPyConnection, parts: str) -> None:
    """Views over the parts directory `parts` (relative to the connection's file_search_path)."""
    for name in TABLES:
        path = f"{parts}/{name}.parquet".replace("'", "''")
        con.execute(f"CREATE VIEW \"{name}\" AS SELECT * FROM read_parquet('{path}')")


def remove_parts(profiles_dir: Path, name: str | None) -> None:
    """Delete the parts directory `name` under `profiles_dir` (nothing when None or missing)."""
    if name and name.endswith(PARTS_SUFFIX) and "/" not in name:
        shutil.rmtree(profiles_dir / name, ignore_errors=True)
