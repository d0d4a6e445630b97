"""`parquet`: a directory (default `ntff_parquet`) of Parquet files, one per profile and analysis table.

Contract: layout of `nprof.export.tables` with suffix `.parquet`, zstd
compression, row groups of 1M rows; readable by any Parquet tool, e.g.
`duckdb.sql("SELECT opcode, sum(duration) FROM 'ntff_parquet/profile/instructions.parquet' GROUP BY 1")`.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nprof.export.options import ExportOptions
from nprof.export.tables import write_tables
from nprof.profile import Profile


def _write_one(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd", row_group_size=1 << 20)


def write(profile: Profile, directory: Path, options: ExportOptions) -> None:
    """Write every table of `profile` as Parquet under `directory`."""
    write_tables(profile, directory, ".parquet", _write_one, options.thresholds)
