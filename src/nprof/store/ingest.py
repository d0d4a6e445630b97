"""Build one profile's DuckDB file: raw tables, analysis tables and level-of-detail structures.

Contract: `build_profile_db(profile, path, analyse, bar, parts, source)` writes a complete
DuckDB database at `path` (which must not exist; timeline tables in row groups of
ROW_GROUP_SIZE rows so zone maps prune range reads tightly, the reverse dependency index and the
analysis tables in RAW_ROW_GROUP_SIZE groups) plus the parts directory `parts` beside it (the Profile's own
tables as Parquet, read in place: nothing ingest does not derive is copied into DuckDB), with the tables of
`analyse` (the analysis passes), and returns the catalog facts
(`BuildResult`). It never touches the catalog; `Store.ingest` builds into a
temporary file and renames it into place, so a failure here leaves nothing.

Tables written (all immutable after ingest):
* `instructions`, `dma`, `collectives`, `counters`: views over the Profile's own tables kept as
  Parquet files in the parts directory beside the database (`nprof.store.raw_parts`: copied
  from the Profile file when possible, else written; instructions/dma by id, counters by name, ts);
* `events(row, ts, dur, id, op, nbytes, flops, src, layer, tensor)`: every instruction and DMA
  (`src`: source line, else layer; `layer`; both codes into `sources`; `tensor`: the DMA's tensor, a code
  into `tensors`, -1 for none and for instructions; stats `events_tensor` says the column is there),
  sorted by (row, ts) so DuckDB zone maps prune viewport and box-select scans;
* `lod(level, row, bucket, count, busy, op, nbytes, flops)`: per-row bucket pyramids
  (bucket width 2**level ns, from each row's own base level: ~8 events per bucket)
  sorted by (level, row, bucket); the pending-DMA counter row holds all DMA queues summed;
* `rows` (display order, kind, event count, max duration, LOD base level),
  `opcodes(op, name)`, `sources(src, name)`, `tensors(tensor, name)`, `deps_rev(dep, id)` (who waits on whom);
* `analysis_<name>` for every table of `nprof.analysis.run_all`;
* `meta(key, value)` with JSON values: store_format, manifest, summary, analysis table names, stats.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis.facts import release as release_facts
from nprof.gcpause import gc_paused
from nprof.profile import TABLES, Profile
from nprof.progress import Progress
from nprof.store.deps_rev import deps_rev_table, write_deps_rev_sql
from nprof.store.ingest_events import event_sources, events_only, gather_events
from nprof.store.ingest_lod import LOD_SCHEMA as LOD_SCHEMA
from nprof.store.ingest_lod import lod_table as _lod_table
from nprof.store.raw_parts import create_views, parts_name, search_path_config, write_parts
from nprof.store.rows import (
    COUNTER_DMA_THROUGHPUT,
    COUNTER_PENDING_DMA,
    COUNTER_TENSOR_UTIL,
    RowInfo,
    counter_rows,
)

_T = TypeVar("_T")
# the analysis of a build (`nprof.store.store.run_analysis`): (profile, emit=...) -> (tables, flat summary), where
# emit(name, table) receives each pass's table (or a reader of its rows) as the pass ends (then left out of the
# returned tables)
Analyse = Callable[..., tuple[dict[str, pa.Table], dict[str, Any]]]
TIMELINE_ONLY_TABLES = {**TABLES, "deps_rev": pa.schema([("dep", pa.int64()), ("id", pa.int64())])}


@dataclass(frozen=True)
class BuildResult:
    event_count: int
    total_time_ns: int
    steps: dict[str, float] = field(default_factory=dict)  # wall (and "<step> cpu") seconds per build step
    parts: str | None = None  # the parts directory's name (nprof.store.raw_parts)


def dump_value(value: Any) -> str:
    """`value` as JSON text for the meta table (numpy values allowed, anything else as its str)."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str).decode()


def _derived_counters(rows: list[RowInfo]) -> list[str]:
    kinds = {r.kind for r in rows}
    keys = {r.key for r in rows}
    out = []
    if keys & {"tensor.moving", "tensor.stationary"} or any(r.engine == "tensor" for r in rows):
        out.append(COUNTER_TENSOR_UTIL)
    if "dma" in kinds:
        out += [COUNTER_PENDING_DMA, COUNTER_DMA_THROUGHPUT]
    return out


def put_table(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table | pa.RecordBatchReader) -> None:
    """Create table `name` in `con` holding the rows of arrow `table` (a reader: its batches, read as they come)."""
    view = f"_src_{name}"
    con.register(view, table)
    try:
        con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM "{view}"')
    finally:
        con.unregister(view)


STORE_FORMAT = 2  # bump when the tables of a profile database change; older files must be re-ingested
ROW_GROUP_SIZE = 8192  # small row groups: zone maps then prune range reads to a few thousand rows
RAW_ROW_GROUP_SIZE = 122880  # DuckDB's default, for the raw tables (read by id or whole): ~15% cheaper to write


# Without background threads DuckDB's allocator keeps the memory its writes freed (the reverse dependency index
# of 10^7 events: ~90 MB kept after the query, 9 MB with them): ~5-10 bytes/event less peak RSS at 10^7, measured
# with the analysis and event-column steps of the ingest; a process-wide DuckDB setting.
ALLOCATOR_CONFIG = {"allocator_background_threads": True}


def open_build_db(path: Path, row_group_size: int = ROW_GROUP_SIZE) -> duckdb.DuckDBPyConnection:
    """A connection whose default database is a new file at `path` (small row groups by default); Parquet
    paths of views resolve against the file's directory (`nprof.store.raw_parts`). DuckDB's allocator purges
    freed memory on background threads (ALLOCATOR_CONFIG)."""
    con = duckdb.connect(config={**search_path_config(path.parent), **ALLOCATOR_CONFIG})
    _attach(con, path, row_group_size)
    return con


def _attach(con: duckdb.DuckDBPyConnection, path: Path, row_group_size: int) -> None:
    quoted = str(path).replace("'", "''")
    con.execute(f"ATTACH '{quoted}' AS build (ROW_GROUP_SIZE {row_group_size})")
    con.execute("USE build")


def _reattach(con: duckdb.DuckDBPyConnection, path: Path, row_group_size: int = ROW_GROUP_SIZE) -> None:
    """Detach (checkpointing) and attach `path` again with another row group size for the next tables."""
    con.execute("USE memory")
    con.execute("DETACH build")
    _attach(con, path, row_group_size)


def close_build_db(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CHECKPOINT build")
    con.execute("USE memory")
    con.execute("DETACH build")
    con.close()


class Handoff:
    """A Profile handed to `build_profile_db` by its only holder (`Store.ingest_file`): the build drops it
    as soon as it has read what it needs (after the event columns), so its tables are freed before the
    events, pyramids and analysis tables are written. `info`/`event_count` stay readable after the drop."""

    def __init__(self, profile: Profile) -> None:
        self._profile: Profile | None = profile
        self.info = profile.info
        self.event_count = profile.event_count

    def get(self) -> Profile:
        """The profile; RuntimeError once dropped (a build step reading it too late is a bug)."""
        if self._profile is None:
            raise RuntimeError("the profile of this ingest was already released")
        return self._profile

    def drop(self) -> None:
        """Let the profile be freed (this handoff held its last reference, unless the caller kept one)."""
        self._profile = None


def _write_raw(con: duckdb.DuckDBPyConnection, held: list[Profile], parts_dir: Path, source: Path | None) -> None:
    """The Profile's own tables as Parquet parts read in place through views, plus the reverse dependency index.
    `held`: [the profile], taken out at once (the job's arguments then no longer hold it once this returns,
    before its result is set: a worker thread's job item outlives its result)."""
    p = held.pop()
    write_parts(p, parts_dir, source)
    create_views(con, parts_dir.name)
    if not write_deps_rev_sql(con, p):
        put_table(con, "deps_rev", deps_rev_table(p))


def build_profile_db(
    p: Profile | Handoff,
    path: Path,
    analyse: Analyse,
    bar: Progress,
    parts: str | None = None,
    source: Path | None = None,
    order: str = "overlap",
) -> BuildResult:
    """Write the profile database at `path` and the raw tables in the parts directory `parts` beside it
    (`source`: the Profile file `p` was loaded from, whose members are then copied; see
    `nprof.store.raw_parts`); `bar` advances 5 steps. A `Handoff` is dropped once the event columns are
    built (the caller then holds no other reference: the Profile is freed before the tables are written).

    `order` "overlap" (the default): the raw tables are written on a second cursor from a worker thread
    while this thread runs the analysis passes, each pass's table after them as the pass ends (so it is
    freed before the later passes run), and the events while it builds the pyramids (numpy and Arrow):
    DuckDB releases the GIL, so its writer and the numpy work share the two cores. "writer-first" /
    "analysis-first": every step on this thread, the raw tables before / after the analysis (each pass's
    table written as the pass ends; the same database; for measuring what the overlap gains,
    bench/ingest.py --orders).
    The raw and analysis tables are written with RAW_ROW_GROUP_SIZE rows per group (the reverse dependency
    index is read by dep, the analysis tables whole or by page: ~0.45 s CPU less for 10^7 events, whose
    pending-DMA counter series has 5 M points); the database is then re-attached with ROW_GROUP_SIZE for the
    timeline tables, whose zone maps need small groups. `BuildResult.steps` holds each step's wall seconds.
    """
    if order not in ORDERS:
        raise ValueError(f"unknown ingest order {order!r}; use one of {', '.join(ORDERS)}")
    own = p if isinstance(p, Handoff) else Handoff(p)
    del p  # from here on only `own` holds the profile, so that dropping it frees it
    with gc_paused():  # the build makes many acyclic objects (tables, lists of names): no collector passes
        return _build(own, path, analyse, bar, parts, source, order)


def _build(own: Handoff, path: Path, analyse: Analyse,
           bar: Progress, parts: str | None, source: Path | None, order: str) -> BuildResult:  # fmt: skip
    """`build_profile_db` on a Handoff."""
    con = open_build_db(path, RAW_ROW_GROUP_SIZE)
    parts = parts or parts_name()
    steps: dict[str, float] = {}
    pool = ThreadPoolExecutor(1, thread_name_prefix="nprof-ingest") if order == "overlap" else _Inline()

    def raw() -> Future[None]:
        return pool.submit(_timed, steps, "raw tables (background)", _on_cursor, con, _write_raw, [own.get()],
                           path.parent / parts, source)  # fmt: skip

    raw_job = None if order == "analysis-first" else raw()
    done = False
    jobs: list[Future[None]] = []
    written: list[Future[None]] = []  # the analysis tables' writes, one per pass
    names: list[str] = []

    def emit(name: str, table: pa.Table | pa.RecordBatchReader) -> None:  # written (and freed) as the pass ends
        names.append(name)
        held = [table]
        del table
        written.append(pool.submit(_timed, steps, "write analysis (background)", _on_cursor, con, _put_held,
                                   f"analysis_{name}", held))  # fmt: skip

    try:
        _, summary = _timed(steps, "analysis passes", partial(analyse, emit=emit), own.get())
        raw_job = raw_job or raw()

        def write_events(events: pa.Table) -> None:  # in the background while the pyramids are built
            _timed(steps, "wait for raw tables", raw_job.result)
            _timed(steps, "wait for analysis tables", lambda: [job.result() for job in written])
            _timed(steps, "re-attach", _reattach, con, path)
            jobs.append(
                pool.submit(_timed, steps, "write events (background)", _on_cursor, con, put_table, "events", events)
            )

        tables, meta_stats = _timeline_of_profile(own, bar, steps, write_events)
        for job in jobs:
            _timed(steps, "wait for background writes", job.result)
        bar.advance(1)
        for name, table in tables.items():
            _timed(steps, f"write {name}", put_table, con, name, table)
        bar.advance(1)
        meta = {
            "store_format": STORE_FORMAT,
            "manifest": own.info.to_json(),
            "summary": summary,
            "analysis_tables": names,
            "stats": meta_stats,
            "parts": parts,
        }
        _timed(steps, "write meta", put_meta, con, meta)
        _timed(steps, "checkpoint+close", close_build_db, con)
        done = True
    finally:
        for job in [j for j in (raw_job, *written, *jobs) if j is not None]:
            job.cancel()
        pool.shutdown(wait=True)
        if not done:
            con.close()
    bar.advance(1)
    return BuildResult(own.event_count, meta_stats["total_time_ns"], steps, parts)


ORDERS = ("overlap", "writer-first", "analysis-first")


def put_meta(con: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> None:
    """Create the `meta(key, value)` table: each value as JSON text (`dump_value`)."""
    put_table(con, "meta", pa.table({"key": list(meta), "value": [dump_value(v) for v in meta.values()]}))


class _Inline(Executor):
    """An executor that runs each job at once on the calling thread (the orders without overlap)."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        job: Future[_T] = Future()
        try:
            job.set_result(fn(*args, **kwargs))
        except Exception as exc:  # raised where the job's result is awaited, as from a thread
            job.set_exception(exc)
        return job


def _put_held(con: duckdb.DuckDBPyConnection, name: str, held: list[pa.Table | pa.RecordBatchReader]) -> None:
    """Write table `name` from `held` ([the table]), taken out first (so it is freed once written, though the
    job's arguments outlive it)."""
    put_table(con, name, held.pop())


def _on_cursor(con: duckdb.DuckDBPyConnection, fn: Callable[..., None], *args: Any) -> None:
    """Run `fn(cursor, *args)` on a cursor of its own (for another thread) using the build database."""
    cur = con.cursor()
    try:
        cur.execute("USE build")
        fn(cur, *args)
    finally:
        cur.close()


def _timed(steps: dict[str, float], name: str, fn: Callable[..., _T], *args: Any) -> _T:
    """Run `fn(*args)`; adds its wall seconds to steps[name], this thread's CPU seconds to steps[name + " cpu"]."""
    t, c = time.perf_counter(), time.thread_time()
    try:
        return fn(*args)
    finally:
        steps[name] = steps.get(name, 0.0) + time.perf_counter() - t
        steps[f"{name} cpu"] = steps.get(f"{name} cpu", 0.0) + time.thread_time() - c


def _timeline_of_profile(
    own: Handoff, bar: Progress, steps: dict[str, float], write_events: Callable[[pa.Table], None]
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """Hands the events table of the profile to `write_events` (the profile dropped first), then returns the
    other timeline tables (lod, rows, opcodes, sources) and the stats for `meta`."""
    p = own.get()
    total_time = p.total_time_ns
    stats = {
        "total_time_ns": total_time,
        "event_count": p.event_count,
        "instruction_count": p.instructions.num_rows,
        "dma_count": p.dma.num_rows,
        "flops": int(pc.sum(p.instructions["flops"]).as_py() or 0),
        "hw_flops": int(pc.sum(p.instructions["hw_flops"]).as_py() or 0),
    }
    sampled = sorted(v for v in pc.unique(p.counters["name"]).to_pylist() if v is not None)
    slim = events_only(p)
    release_facts(p, keep_strings=True, into=slim)  # the analysis' per-event arrays go, the string codes stay
    del p
    own.drop()  # the other columns go now, before the event columns are gathered
    pa.default_memory_pool().release_unused()  # (Arrow's allocator keeps freed pages otherwise)
    sources = _timed(steps, "event sources", event_sources, slim)
    release_facts(slim)
    del slim  # now only `sources` holds the event arrays: the gather frees each table column once it is made
    rows, cols, opnames, srcnames, tensornames = _timed(steps, "event columns", gather_events, sources)
    del sources
    pa.default_memory_pool().release_unused()
    span = max(total_time, int((cols["ts"] + cols["dur"]).max()) if cols["ts"].size else 0, 1)
    bar.advance(1)
    write_events(events_table(cols))
    tables, base = timeline_tables(rows, cols, opnames, srcnames, span, sampled, steps, tensornames)
    bar.advance(1)
    return tables, {
        "t_max": span,
        "total_time_ns": total_time,
        "base_level": base,
        "event_count": stats["event_count"],
        "max_dur": int(cols["dur"].max()) if cols["dur"].size else 0,
        **{k: stats[k] for k in ("instruction_count", "dma_count", "flops", "hw_flops")},
        "events_layer": True,
        "events_tensor": True,
    }


def write_timeline(
    con: duckdb.DuckDBPyConnection,
    rows: list[RowInfo],
    cols: dict[str, np.ndarray],
    opnames: list[str],
    srcnames: list[str],
    span: int,
    sampled: list[str],
    bar: Progress,
) -> int:
    """Write events (cols sorted by row, ts), lod, rows, opcodes, sources; returns the finest LOD base level."""
    tables, base = timeline_tables(rows, cols, opnames, srcnames, span, sampled, {})
    bar.advance(1)
    for name, table in {"events": events_table(cols), **tables}.items():
        put_table(con, name, table)
    bar.advance(1)
    return base


def events_table(cols: dict[str, np.ndarray]) -> pa.Table:
    """The events table of event columns sorted by (row, ts) (zero-copy)."""
    return pa.table({k: pa.array(v) for k, v in cols.items()})


def timeline_tables(
    rows: list[RowInfo],
    cols: dict[str, np.ndarray],
    opnames: list[str],
    srcnames: list[str],
    span: int,
    sampled: list[str],
    steps: dict[str, float],
    tensornames: list[str] | None = None,
) -> tuple[dict[str, pa.Table], int]:
    """lod, rows, opcodes, sources (and tensors, given `tensornames`) as Arrow tables (cols sorted by row, ts),
    and the finest LOD base level."""
    all_rows = rows + counter_rows(len(rows), _derived_counters(rows), sampled)
    dma_total = next((r.index for r in all_rows if r.key == COUNTER_PENDING_DMA), None)
    lod, stats = _timed(steps, "lod pyramids", _lod_table, rows, cols, span, dma_total)
    empty = {"count": 0, "max_dur": 0, "first_ts": 0, "last_end": 0, "base_level": 0}
    per_row = [stats.get(r.index, empty) for r in all_rows]
    row_table = pa.table(
        {
            "row": pa.array([r.index for r in all_rows], pa.int16()),
            "key": [r.key for r in all_rows],
            "label": [r.label for r in all_rows],
            "kind": [r.kind for r in all_rows],
            "engine": pa.array([r.engine for r in all_rows], pa.string()),
            "unit": pa.array([r.unit for r in all_rows], pa.string()),
            **{
                f: pa.array([s[k] for s in per_row], pa.int64())
                for f, k in (("event_count", "count"), ("max_dur", "max_dur"), ("first_ts", "first_ts"),
                             ("last_end", "last_end"), ("base_level", "base_level"))
            },
        }
    )  # fmt: skip
    base = min((s["base_level"] for s in stats.values()), default=0)
    out = {
        "lod": lod,
        "rows": row_table,
        "opcodes": pa.table({"op": pa.array(range(len(opnames)), pa.int32()), "name": opnames}),
        "sources": pa.table({"src": pa.array(range(len(srcnames)), pa.int32()), "name": srcnames}),
    }
    if tensornames is not None:
        out["tensors"] = pa.table({"tensor": pa.array(range(len(tensornames)), pa.int32()), "name": tensornames})
    return out, base
