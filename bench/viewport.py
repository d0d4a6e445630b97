"""Viewport query latency (p50 / p95) on synthetic profiles of 10^6, 10^7 and 10^8 events.

Usage: .venv/bin/python bench/viewport.py [--sizes 1e6,1e7,1e8] [--queries 40] [--width 1500] [--store DIR]

10^6 and 10^7 go through the real ingest (Profile -> analysis -> store). 10^8 is built
straight into the store's timeline tables (`nprof.store.synthetic.build_timeline_store`):
a 10^8-event Profile would need ~15 GB of RAM, more than this shared machine should give.
Each query is a full HTTP request through the FastAPI app in-process (routing, query, JSON
encoding), all rows, at `--width` pixels; it is then repeated on the store alone (no HTTP,
no JSON). Windows: the whole profile ("overview") and random windows of 1% and 0.01% of
it. Prints one line per size and window kind, and the load average (the machine is shared).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7,1e8")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--store", default=None, help="store directory to (re)use (default: a temp dir, removed)")
    args = ap.parse_args()

    from fastapi.testclient import TestClient

    from nprof.store import Store, viewport
    from nprof.store.synthetic import build_timeline_store, synthetic_profile
    from nprof.web import create_app

    root = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="nprof-bench-"))
    store = Store(root)
    client = TestClient(create_app(store), base_url="http://localhost")
    rng = np.random.default_rng(1)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    try:
        for size in (int(float(s)) for s in args.sizes.split(",")):
            pid = f"bench-{size}"
            t = time.perf_counter()
            how = "ingest"
            if store.catalog.get(pid) is None:
                if size > 20_000_000:
                    how = "direct"
                    build_timeline_store(store, pid, size, seed=size % 97)
                else:
                    store.ingest(synthetic_profile(size, seed=size % 97), pid)
                build = f"built ({how}) in {time.perf_counter() - t:.1f} s"
            else:
                build = "reused"
            t_max = client.get(f"/api/profiles/{pid}/rows").json()["t_max"]
            mb = store.db_path(pid).stat().st_size / 1e6
            print(f"{size:>11,} events: {build}, store file {mb:,.0f} MB, t_max {t_max / 1e6:,.1f} ms")
            for kind, frac in (("overview", 1.0), ("zoom 1%", 0.01), ("zoom 0.01%", 0.0001)):
                lat, core, items, buckets = [], [], [], 0
                for q in range(args.queries + 3):
                    span = max(1, int(t_max * frac))
                    t0 = 0 if frac == 1.0 else int(rng.integers(0, t_max - span))
                    url = f"/api/profiles/{pid}/viewport?t0={t0}&t1={t0 + span}&width={args.width}"
                    t = time.perf_counter()
                    r = client.get(url)
                    dt = time.perf_counter() - t
                    assert r.status_code == 200, r.text
                    t = time.perf_counter()
                    with store.session(pid) as (cur, meta):
                        viewport(cur, meta, t0, t0 + span, args.width)
                    dq = time.perf_counter() - t
                    if q >= 3:  # the first queries open the file and load its metadata
                        lat.append(dt * 1e3)
                        core.append(dq * 1e3)
                        rows = r.json()["rows"]
                        items.append(max(len(row["ts"]) for row in rows))
                        buckets += sum(row["mode"] == "buckets" for row in rows)
                p50, p95 = np.percentile(lat, [50, 95])
                c50, c95 = np.percentile(core, [50, 95])
                print(
                    f"    {kind:<11} HTTP p50 {p50:6.1f} ms  p95 {p95:6.1f} ms (min {min(lat):5.1f}) | store query p50"
                    f" {c50:6.1f} ms  p95 {c95:6.1f} ms (min {min(core):5.1f}) | max items/row {max(items):>5}"
                    f"  bucketed rows {buckets / len(lat):4.1f}  | load {os.getloadavg()[0]:.1f}"
                )
    finally:
        store.close()
        if not args.store:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
