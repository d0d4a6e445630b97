"""Ingest throughput: synthetic profiles of 10^6 and 10^7 events into the store, analysis included.

Usage: .venv/bin/python bench/ingest.py [--sizes 1e6,1e7] [--repeat 1]

Times `Store.ingest(profile, id)`: the analysis passes (nprof.analysis.run_all), the
event/LOD tables, the raw tables and the catalog update, into a fresh temporary store.
The synthetic Profile is built before the clock starts (capture is not ingest); the
analysis-alone run uses another Profile object, so the ingest starts with cold caches. Prints
wall and CPU seconds (user + system, all threads) of the ingest, the analysis alone for
reference, the size of the store file, and the wall seconds of each build step
(`BuildResult.steps`; the raw tables are written in the background, overlapping the rest).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NPROF_NO_PROGRESS", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()

    import nprof.store.store as store_mod
    from nprof.analysis import run_all
    from nprof.store import Store
    from nprof.store.synthetic import synthetic_profile

    results = []
    build = store_mod.build_profile_db

    def capture(*a: object, **k: object) -> object:  # keep each BuildResult for its step breakdown
        results.append(build(*a, **k))
        return results[-1]

    store_mod.build_profile_db = capture
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for size in (int(float(s)) for s in args.sizes.split(",")):
        profile = synthetic_profile(size, seed=1)
        t = time.perf_counter()
        run_all(profile)
        analysis_s = time.perf_counter() - t
        del profile  # the analysis caches per-profile arrays: each ingest gets a fresh Profile object
        best, cpu, steps = float("inf"), 0.0, {}
        mb = 0.0
        for _ in range(args.repeat):
            profile = synthetic_profile(size, seed=1)
            root = Path(tempfile.mkdtemp(prefix="nprof-bench-ingest-"))
            try:
                store = Store(root)
                t, c = time.perf_counter(), os.times()
                store.ingest(profile, "bench")
                wall, c2 = time.perf_counter() - t, os.times()
                if wall < best:
                    best, cpu = wall, (c2.user - c.user) + (c2.system - c.system)
                    steps = getattr(results[-1], "steps", {})
                mb = store.db_path("bench").stat().st_size / 1e6
                store.close()
            finally:
                shutil.rmtree(root, ignore_errors=True)
        print(
            f"{size:>11,} events: ingest {best:6.2f} s = {size / best / 1e6:5.2f} M events/s, "
            f"CPU {cpu:6.2f} s = {size / cpu / 1e6:5.2f} M events/CPU-s "
            f"(analysis alone {analysis_s:5.2f} s), store file {mb:,.0f} MB"
        )
        print("    steps (wall s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
        del profile


if __name__ == "__main__":
    main()
