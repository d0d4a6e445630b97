"""Shared layout of the `parquet` and `csv` outputs: a directory of tables.

Contract: `write_tables(profile, directory, suffix, write_one)` creates
  manifest.json              the profile manifest (format, schema_version, device, ...)
                             plus "files": every table file with its row count
  profile/<table><suffix>    instructions, dma, collectives, counters (the Profile tables)
  analysis/<pass><suffix>    summary, engines, opcodes, layers, dma_queues, counters, warnings, findings
`write_one(table, path)` writes one table (streaming in batches).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa

from nprof.analysis import DEFAULT_THRESHOLDS, Thresholds, run_all
from nprof.profile import SCHEMA_VERSION, TABLES, Profile
from nprof.progress import progress


def write_tables(
    profile: Profile,
    directory: Path,
    suffix: str,
    write_one: Callable[[pa.Table, Path], None],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> None:
    """Write every profile and analysis table (findings by `thresholds`) under `directory` (see module doc)."""
    (directory / "profile").mkdir()
    (directory / "analysis").mkdir()
    files: dict[str, int] = {}
    analysis = run_all(profile, thresholds=thresholds)
    with progress(len(TABLES) + len(analysis), "Writing tables") as bar:
        for group, tables in (("profile", {n: profile.table(n) for n in TABLES}), ("analysis", analysis)):
            for name, table in tables.items():
                rel = f"{group}/{name}{suffix}"
                write_one(table, directory / rel)
                files[rel] = table.num_rows
                bar.advance()
    manifest = {"format": "nprof-profile-tables", "schema_version": SCHEMA_VERSION, **profile.info.to_json()}
    manifest["files"] = files
    (directory / "manifest.json").write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
