"""Scale-out: a multi-worker capture as a rank-partitioned Parquet dataset, and the cross-rank analysis
run on it by an existing engine (embedded DuckDB, or Apache Spark when one machine is not enough).

Contract:
* `write_dataset(capture_dir, out)`: `nprof.dataset.write` (layout documented in docs/profile-format.md).
* `analyze(directory, engine="duckdb", master=None, top=20)`: `directory` is a dataset or a capture
  directory of `profile_rank_<i>.ntff` files (written to a temporary dataset first); returns
  `{name: (title, Result)}` from `nprof.dataset.engines.run_queries`.
* `analyze_from_args(args) -> str | bytes`: the `nprof analyze` command's output.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from nprof.dataset.engines import ENGINES, Result, run_queries
from nprof.dataset.report import as_json, as_text
from nprof.dataset.write import is_dataset, write_dataset
from nprof.errors import NprofError


def analyze(
    directory: str | os.PathLike[str], engine: str = "duckdb", master: str | None = None, top: int = 20
) -> dict[str, tuple[str, Result]]:
    """The cross-rank analysis of a dataset or a capture directory (see module doc)."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise NprofError(f"{path}: not a directory; give a multi-worker capture directory or a dataset")
    if is_dataset(path):
        return run_queries(path, engine, master, top)
    with tempfile.TemporaryDirectory(prefix="nprof-dataset-") as tmp:
        dataset = Path(tmp) / "dataset"
        write_dataset(path, dataset)
        return run_queries(dataset, engine, master, top)


def analyze_from_args(args: argparse.Namespace) -> str | bytes:
    """`nprof analyze DIR [--engine E] [--master URL] [--top N] [--output-format text|json]`."""
    results = analyze(args.directory, args.engine, args.master, args.top)
    return as_json(results) if args.output_format == "json" else as_text(results)


__all__ = ["ENGINES", "Result", "analyze", "analyze_from_args", "is_dataset", "write_dataset"]
