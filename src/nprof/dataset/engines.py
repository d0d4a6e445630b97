"""Run the cross-rank queries on a dataset with an existing engine: embedded DuckDB or Apache Spark.

Contract:
* `Result(columns, rows)`: one query's answer, rows as tuples of plain Python values.
* `run_queries(dataset_dir, engine="duckdb", master=None, top=20) -> {name: (title, Result)}` registers
  the dataset's tables as views named after them and runs `nprof.dataset.queries`. DuckDB reads the
  Hive-partitioned Parquet in place; Spark (PySpark's DataFrame reader and `spark.sql`, `--master`
  default `local[2]`) does the same on its cluster. Both run the same SQL text, so they return the
  same rows. A missing pyspark or Java is one `NprofError` line saying what to install.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from nprof.dataset.queries import queries
from nprof.errors import NprofError

TABLES = ("ranks", "instructions", "dma", "collectives", "counters")
ENGINES = ("duckdb", "spark")
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # Spark logs errors only


@dataclass(frozen=True)
class Result:
    """One query's answer: column names and rows of plain Python values."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def _duckdb_results(dataset: Path, sqls: dict[str, str]) -> dict[str, Result]:
    """Each query run by an in-memory DuckDB over the dataset's Parquet files."""
    con = duckdb.connect()
    try:
        for table in TABLES:
            glob = str(dataset / table / "*" / "*.parquet").replace("'", "''")
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{glob}', hive_partitioning = true)")
        out = {}
        for name, sql in sqls.items():
            cur = con.execute(sql)
            columns = tuple(d[0] for d in cur.description)
            out[name] = Result(columns, tuple(tuple(_plain(v) for v in row) for row in cur.fetchall()))
        return out
    finally:
        con.close()


def _plain(value: Any) -> Any:
    """An engine's value as plain Python (a Decimal, which neither engine should return, becomes a float)."""
    return float(value) if isinstance(value, Decimal) else value


@contextmanager
def spark_session(master: str | None) -> Iterator[Any]:
    """A SparkSession on `master` (default local[2]), quiet and without its web UI; stopped on exit."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise NprofError("--engine spark needs pyspark: pip install 'nprof[spark]' (and a Java 17+ runtime)") from None
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        raise NprofError("--engine spark needs a Java 17+ runtime on PATH or JAVA_HOME (apt-get install default-jre)")
    spark = (
        SparkSession.builder.master(master or "local[2]")
        .appName("nprof-analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG_CONFIG}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _spark_results(dataset: Path, sqls: dict[str, str], master: str | None) -> dict[str, Result]:
    """Each query run by Spark SQL over the dataset's Parquet files (read with basePath for the rank column)."""
    with spark_session(master) as spark:
        for table in TABLES:
            path = str(dataset / table)
            spark.read.option("basePath", path).parquet(path).createOrReplaceTempView(table)
        out = {}
        for name, sql in sqls.items():
            df = spark.sql(sql)
            rows = tuple(tuple(_plain(v) for v in row) for row in df.collect())
            out[name] = Result(tuple(df.columns), rows)
        return out


def run_queries(
    dataset: str | os.PathLike[str], engine: str = "duckdb", master: str | None = None, top: int = 20
) -> dict[str, tuple[str, Result]]:
    """The cross-rank analysis of `dataset` on `engine` (see module doc)."""
    if engine not in ENGINES:
        raise NprofError(f"unknown --engine {engine!r}; use one of: {', '.join(ENGINES)}")
    if master is not None and engine != "spark":
        raise NprofError("--master applies to --engine spark only")
    named = queries(top)
    sqls = {name: sql for name, (_, sql) in named.items()}
    path = Path(dataset)
    results = _duckdb_results(path, sqls) if engine == "duckdb" else _spark_results(path, sqls, master)
    return {name: (named[name][0], results[name]) for name in named}
