"""Where a stored profile's `events` should live: DuckDB's own table (what ingest writes) against the
zero-copy alternatives, by their write cost and the viewport latency they give.

Usage: .venv/bin/python bench/events_storage.py [--size 1e7] [--queries 30] [--width 1500]

Ingests one synthetic profile (`Store.ingest`), then writes its `events` table again three ways,
timing each write as process CPU seconds (all threads, user + system):
* `duckdb table`: a DuckDB table with the store's row groups (`store.ingest.ROW_GROUP_SIZE`), as ingest does;
* `parquet view`: a Parquet file written by pyarrow (zstd level 1, no dictionaries, ROW_GROUP_SIZE rows
  per group, sorted by row, ts) read through `read_parquet` with DuckDB's Parquet metadata cache on;
* `arrow (registered)`: an uncompressed Arrow IPC file, memory-mapped (zero-copy) and registered
  on the connection as `events`.
Each variant then answers the same viewports with the store's own `viewport()` (every row, `--width`
pixels, random windows of 1% and 0.01% of the profile, where events rather than the LOD pyramid are
read), on a connection where every other table is the store's. Prints write CPU, size and p50/p95
latency per variant beside the viewport goal (ARCHITECTURE.md: <= 50 ms p95 at 10^7), and the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("NPROF_NO_PROGRESS", "1")

GOAL_P95_MS = 50.0  # viewport p95 at 10^7 events (ARCHITECTURE.md, Performance goals)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _write_variants(db: Path, out: Path) -> dict[str, tuple[float, int]]:
    """Write the store's events table three ways under `out`; variant -> (CPU seconds, bytes)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nprof.store.ingest import ROW_GROUP_SIZE

    con = duckdb.connect(str(db), read_only=True)
    events = con.sql("SELECT * FROM events").to_arrow_table().combine_chunks()
    con.close()
    res = {}
    c = _cpu()
    w = duckdb.connect()
    w.execute(f"ATTACH '{out / 'events.duckdb'}' AS b (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
    w.register("src", events)
    w.execute("CREATE TABLE b.events AS SELECT * FROM src")
    w.execute("CHECKPOINT b")
    w.close()
    res["duckdb table"] = (_cpu() - c, (out / "events.duckdb").stat().st_size)
    c = _cpu()
    options = {"compression": "zstd", "compression_level": 1, "use_dictionary": False}  # integers: no dictionaries
    pq.write_table(events, out / "events.parquet", row_group_size=ROW_GROUP_SIZE, **options)
    res["parquet view"] = (_cpu() - c, (out / "events.parquet").stat().st_size)
    c = _cpu()
    with pa.OSFile(str(out / "events.arrow"), "wb") as fh, pa.ipc.new_file(fh, events.schema) as writer:
        writer.write_table(events)
    res["arrow (registered)"] = (_cpu() - c, (out / "events.arrow").stat().st_size)
    return res


def _connection(db: Path, variant: str, out: Path):  # type: ignore[no-untyped-def]
    """A connection answering the store's queries, `events` served by `variant`."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect(config={"threads": 2, "file_search_path": str(db.parent)})
    con.execute(f"ATTACH '{db}' AS s (READ_ONLY)")
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 's' UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE database_name = 's' AND NOT internal"
    ).fetchall()]  # fmt: skip
    for name in names:
        if name != "events":
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM s."{name}"')
    if variant == "duckdb table":
        con.execute("CREATE VIEW events AS SELECT * FROM s.events")
    elif variant == "parquet view":
        con.execute("SET parquet_metadata_cache = true")
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{out / 'events.parquet'}')")
    else:
        con.register("events", pa.ipc.open_file(pa.memory_map(str(out / "events.arrow"))).read_all())
    return con


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1e7")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--width", type=int, default=1500)
    args = ap.parse_args()
    from nprof.store import Store, viewport
    from nprof.store.synthetic import synthetic_profile

    size = int(float(args.size))
    root = Path(tempfile.mkdtemp(prefix="nprof-bench-events-"))
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    try:
        store = Store(root / "store")
        store.ingest(synthetic_profile(size, seed=1), "bench")
        with store.session("bench") as (_cur, meta):
            meta = dict(meta)
        db = store.db_path("bench")
        store.close()
        written = _write_variants(db, root)
        t_max = int(meta["stats"]["t_max"])
        print(f"{size:,} events; viewport goal p95 <= {GOAL_P95_MS:.0f} ms")
        for variant, (cpu, nbytes) in written.items():
            con = _connection(db, variant, root)
            rng = np.random.default_rng(1)
            lat: dict[str, list[float]] = {"1%": [], "0.01%": []}
            for q in range(args.queries + 2):
                for kind, frac in (("1%", 0.01), ("0.01%", 0.0001)):
                    span = max(1, int(t_max * frac))
                    t0 = int(rng.integers(0, t_max - span))
                    t = time.perf_counter()
                    viewport(con, meta, t0, t0 + span, args.width)
                    if q >= 2:  # the first queries open the files and load their metadata
                        lat[kind].append((time.perf_counter() - t) * 1e3)
            con.close()
            figures = "; ".join(
                f"zoom {k} p50 {np.percentile(v, 50):6.1f} ms p95 {np.percentile(v, 95):6.1f} ms"
                for k, v in lat.items()
            )
            print(
                f"  {variant:<19} write CPU {cpu:5.2f} s, {nbytes / 1e6:6.0f} MB | {figures} "
                f"(goal p95 {GOAL_P95_MS:.0f}) | load {os.getloadavg()[0]:.1f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
