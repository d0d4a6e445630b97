"""Write a multi-worker capture as one rank-partitioned Parquet dataset.

Contract:
* `write_dataset(capture_dir, out)` reads `profile_rank_<i>.ntff` one rank at a time (memory bounded
  by one rank) and writes, atomically (a temporary directory renamed into place, nothing left on
  error), a Hive-partitioned dataset that pandas, DuckDB, Spark or Trino read unchanged:

      out/_nprof_dataset.json                      {"format": "nprof-dataset", "schema_version": 1, ...}
      out/ranks/rank=<r>/part-0.parquet            one row: the rank's manifest facts
      out/instructions/rank=<r>/part-0.parquet     the rank's tables, without a `rank` column
      out/dma/rank=<r>/part-0.parquet
      out/collectives/rank=<r>/part-0.parquet      only the rows describing rank r
      out/counters/rank=<r>/part-0.parquet

  Every rank gets a file in every table (possibly with no rows), so each table's schema is always
  readable. The partition column `rank` is the global worker rank.
* `is_dataset(path)` tells a dataset directory from a capture directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nprof.atomic import atomic_dir
from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.profile.schema import TABLES

MARKER = "_nprof_dataset.json"
FORMAT = "nprof-dataset"
SCHEMA_VERSION = 1
RANKS = pa.schema(
    [
        pa.field("world_size", pa.int32()),  # workers in the whole job
        pa.field("nd_idx", pa.int32()),  # Neuron device of the rank
        pa.field("nc_idx", pa.int32()),  # NeuronCore of the rank on its device
        pa.field("total_time_ns", pa.int64()),  # the rank's execution window
        pa.field("preset", pa.string()),  # virtual device preset, null on real hardware
        pa.field("name", pa.string()),  # program or profile name
    ]
)


def is_dataset(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a directory written by `write_dataset`."""
    return (Path(path) / MARKER).is_file()


def _rank_row(profile: Profile) -> pa.Table:
    """The one-row `ranks` table of a rank's manifest."""
    m = profile.info
    values = [m.world_size, m.nd_idx, m.nc_idx, profile.total_time_ns, m.preset, m.name]
    return pa.table([pa.array([v], type=f.type) for v, f in zip(values, RANKS, strict=True)], schema=RANKS)


def _rank_tables(profile: Profile, rank: int) -> dict[str, pa.Table]:
    """The rank's tables, ready for its partition: the `rank` column removed (the partition holds it)."""
    out = {"ranks": _rank_row(profile)}
    for name in TABLES:
        table = profile.table(name)
        if "rank" in table.column_names:
            table = table.filter(pc.equal(table["rank"], rank)).drop_columns(["rank"])
        out[name] = table
    return out


def write_dataset(
    capture_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    on_rank: Callable[[int], None] | None = None,
) -> list[int]:
    """Write the capture in `capture_dir` as a dataset at `out` (see module doc); returns the ranks written."""
    from nprof.dataset.ranks import rank_files

    files = rank_files(capture_dir)
    target = Path(out).expanduser()
    if target.resolve() == Path(capture_dir).expanduser().resolve():
        raise NprofError(f"{target}: a dataset cannot replace its own capture; pick another --output-file")
    with atomic_dir(target) as tmp:
        for rank, path in files.items():
            for name, table in _rank_tables(Profile.load(path), rank).items():
                part = Path(tmp) / name / f"rank={rank}"
                part.mkdir(parents=True)
                pq.write_table(table, part / "part-0.parquet", compression="zstd")
            if on_rank is not None:
                on_rank(rank)
        marker = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "ranks": list(files)}
        (Path(tmp) / MARKER).write_bytes(orjson.dumps(marker))
    return list(files)
