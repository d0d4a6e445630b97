"""Ingest throughput: synthetic profiles of 10^6 and 10^7 events into the store, analysis included.

Usage: .venv/bin/python bench/ingest.py [--sizes 1e6,1e7] [--repeat 1] [--modes file,memory]
                                        [--orders overlap,writer-first,analysis-first] [--heap default,env]

Two modes: `file` times `Store.ingest_file(x.ntff)` (loading the Profile file included; its
Parquet members are copied into the store, not re-encoded), `memory` times
`Store.ingest(profile, id)` on a Profile built before the clock starts (capture is not ingest;
its tables are written as Parquet). Both include the analysis passes, the event/LOD tables and
the catalog update, into a fresh temporary store, each with a fresh Profile (cold caches). Prints
wall and CPU seconds (user + system, all threads), the peak resident memory above the level
before the ingest (sampled every 5 ms; each ingest runs in a fresh process), the analysis alone
(CPU) for reference, the store's size on disk, the machine load, and the wall and thread-CPU
seconds of each build step (`BuildResult.steps`; in `file` mode the Profile file's load first, whose Parquet
decoding threads are not in its thread-CPU figure). The system part of the CPU time (page faults, mostly)
is printed apart: on a loaded machine it swings by seconds between identical runs. `--orders`: how the
analysis and the writer share the two cores (`nprof.store.ingest.build_profile_db`: overlapped, the
default, or one after the other with the raw tables written before / after the analysis). `--heap`: glibc's
defaults (`default`) or glibc keeping freed memory for reuse (`env`: `GLIBC_ENV` in the child's environment;
Arrow's mimalloc and DuckDB's own allocator are not glibc's); several values are run interleaved, each
repeat in turn, and every run is printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("NPROF_NO_PROGRESS", "1")


GOAL_RATE = 5.0  # M events/s at 10^7, analysis included (docs/architecture.md, Performance goals)
GOAL_BYTES = 50  # peak extra memory per event
# `--heap env`: glibc keeps freed memory (no mmap for big blocks, trim above 1 GiB), for the whole child process
GLIBC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_TOP_PAD_": str(64 << 20)}


class PeakRss:
    """Peak resident memory above the level at start, sampled every 5 ms on a thread (/proc/self/statm)."""

    def __init__(self) -> None:
        import threading

        self.page = os.sysconf("SC_PAGE_SIZE")
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def _child(size: int, mode: str, order: str) -> None:
    """Measure one ingest in this (fresh) process and print it as one JSON line."""
    import ctypes
    import gc
    import json

    import pyarrow as pa

    import nprof.store.store as store_mod

    results = []
    build = store_mod.build_profile_db

    def capture(*a: object, **k: object) -> object:  # keep each BuildResult for its step breakdown
        results.append(build(*a, **k, order=order))
        return results[-1]

    store_mod.build_profile_db = capture
    root = Path(os.environ["NPROF_BENCH_DIR"])
    from nprof.profile import Profile
    from nprof.store import Store

    loaded: dict[str, float] = {}

    def timed(load: Any) -> Any:  # the file's load is a step of `ingest_file` too
        def timed_load(*a: object, **k: object) -> Profile:
            t, c = time.perf_counter(), time.thread_time()
            try:
                return load(*a, **k)
            finally:
                loaded.update({"load profile": time.perf_counter() - t, "load profile cpu": time.thread_time() - c})

        return timed_load

    Profile.load = timed(Profile.load)  # type: ignore[method-assign]
    if hasattr(store_mod, "load_lean"):  # the streamed lean load of `ingest_file` (nprof.store.lean)
        store_mod.load_lean = timed(store_mod.load_lean)

    profile = None
    if mode == "memory":
        from nprof.store.synthetic import synthetic_profile

        profile = synthetic_profile(size, seed=1)
    gc.collect()
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    store = Store(root / "store")
    with PeakRss() as mem:
        t, c = time.perf_counter(), os.times()
        if profile is None:  # loading the file is part of this ingest (what `nprof view -s file.ntff` does)
            store.ingest_file(root / "bench.ntff", profile_id="bench")
        else:
            store.ingest(profile, "bench")
        wall, c2 = time.perf_counter() - t, os.times()
    files = [store.db_path("bench"), *(store.dir / "profiles").glob("*.parts/*")]
    out = {
        "wall": wall,
        "cpu": (c2.user - c.user) + (c2.system - c.system),
        "sys": c2.system - c.system,
        "extra": mem.peak - mem.base,
        "steps": {**loaded, **results[-1].steps},
        "mb": sum(f.stat().st_size for f in files) / 1e6,
    }
    store.close()
    print(json.dumps(out))


def _run(size: int, mode: str, order: str, heap: str) -> dict:
    import json
    import subprocess
    import sys

    from nprof.store.synthetic import synthetic_profile

    root = Path(tempfile.mkdtemp(prefix="nprof-bench-ingest-"))
    try:
        if mode == "file":
            synthetic_profile(size, seed=1).save(root / "bench.ntff")
        env = {**os.environ, "NPROF_BENCH_DIR": str(root), **(GLIBC_ENV if heap == "env" else {})}
        cmd = [sys.executable, __file__, "--child", f"{size}:{mode}:{order}:{heap}"]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _steps(steps: dict[str, float]) -> str:
    names = [k for k in steps if not k.endswith(" cpu")]
    return ", ".join(f"{k} {steps[k]:.2f}/{steps.get(k + ' cpu', 0.0):.2f}" for k in names)


def _report(size: int, mode: str, order: str, heap: str, r: dict, analysis_cpu: float) -> None:
    """Print one run's line and its step breakdown."""
    wall, cpu, extra = r["wall"], r["cpu"], r["extra"]
    print(
        f"{size:>11,} events, {mode:<6} {order} heap={heap}: ingest {wall:6.2f} s = "
        f"{size / wall / 1e6:5.2f} M events/s wall, "
        f"CPU {cpu:6.2f} s (user {cpu - r['sys']:5.2f}, sys {r['sys']:5.2f}) = "
        f"{size / cpu / 1e6:5.2f} M events/CPU-s (goal {GOAL_RATE}); "
        f"peak extra RSS {extra / 1e6:,.0f} MB = {extra / size:,.0f} B/event (goal {GOAL_BYTES}); "
        f"analysis alone CPU {analysis_cpu:5.2f} s; store {r['mb']:,.0f} MB; load {os.getloadavg()[0]:.1f}"
    )
    print("    steps (wall/thread-CPU s): " + _steps(r["steps"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--modes", default="file,memory", help="file: ingest_file(.ntff); memory: ingest(Profile)")
    ap.add_argument("--orders", default="overlap", help="overlap, writer-first, analysis-first (comma-separated)")
    ap.add_argument("--heap", default="default", help="default (glibc's), env (GLIBC_ENV; comma-separated)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        size, mode, order, _heap = args.child.split(":")  # the heap policy is in the child's environment
        _child(int(size), mode, order)
        return
    from nprof.analysis import run_all
    from nprof.store.synthetic import synthetic_profile

    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"goal: >= {GOAL_RATE} M events/s at 10^7 with analysis, peak extra memory <= {GOAL_BYTES} B/event")
    for size in (int(float(s)) for s in args.sizes.split(",")):
        profile = synthetic_profile(size, seed=1)
        c = time.process_time()
        run_all(profile)
        analysis_cpu = time.process_time() - c
        del profile
        heaps = args.heap.split(",")
        for mode, order in ((m, o) for m in args.modes.split(",") for o in args.orders.split(",")):
            runs = [(h, _run(size, mode, order, h)) for _ in range(args.repeat) for h in heaps]
            if len(heaps) == 1:  # one setting: its fastest run
                runs = [min(runs, key=lambda hr: hr[1]["wall"])]
            for heap, r in runs:
                _report(size, mode, order, heap, r, analysis_cpu)


if __name__ == "__main__":
    main()
