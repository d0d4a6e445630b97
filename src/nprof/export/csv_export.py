"""`csv`: a directory (default `ntff_csv`) of CSV files, one per profile and analysis table.

Contract: layout of `nprof.export.tables` with suffix `.csv`; a header line,
comma-separated, strings quoted when needed, empty fields for nulls, booleans
as true/false, and list columns (deps, event_ids, sources) as their items
joined by ";". Written in batches, so memory does not grow with the profile.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from nprof.export.options import ExportOptions
from nprof.export.tables import write_tables
from nprof.profile import Profile

SEPARATOR = ";"


def flatten_lists(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """Replace list columns by their items joined with `SEPARATOR` (CSV has no lists)."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            as_text = table.column(i).cast(pa.list_(pa.string()))
            joined = pc.binary_join(as_text, SEPARATOR)
            table = table.set_column(i, pa.field(field.name, pa.string()), joined)
    return table


def _write_one(table: pa.Table, path: Path) -> None:
    schema = flatten_lists(table.slice(0, 0)).schema
    with pcsv.CSVWriter(path, schema) as writer:
        for batch in table.to_batches(max_chunksize=65_536):
            writer.write_table(flatten_lists(batch))


def write(profile: Profile, directory: Path, options: ExportOptions) -> None:
    """Write every table of `profile` as CSV under `directory`."""
    write_tables(profile, directory, ".csv", _write_one, options.thresholds)
