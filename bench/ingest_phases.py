"""Where a file ingest's peak memory and CPU go: RSS and CPU per phase of `Store.ingest_file` (analysis passes
one by one), synthetic profiles of 10^6 and 10^7 events.

Usage: .venv/bin/python bench/ingest_phases.py [--sizes 1e6,1e7] [--order overlap] [--tracemalloc]

Each size runs in a fresh process. A thread samples the resident set (/proc/self/statm) every 5 ms and
charges it to the innermost phase running on the main thread: the streamed lean load, each build step of
`nprof.store.ingest` (`_timed`), and inside "analysis passes" each pass of `nprof.analysis.PASSES`. Per phase it
prints the wall seconds, the process CPU seconds (all threads: the background writer's too), the peak RSS above
the level before the ingest and the RSS when the phase ended, both as B/event. `--tracemalloc`: also each
phase's peak of memory traced by Python's tracemalloc (numpy arrays and Python objects; not Arrow's or
DuckDB's buffers), above the traced size at the phase's start (slows the run down: its CPU figures are not the
ingest's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("NPROF_NO_PROGRESS", "1")


class Phases:
    """Per-phase wall, CPU, peak and end RSS (sampled on a thread every 5 ms), phases nested as a stack."""

    def __init__(self, traced: bool) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.base = self._rss()
        self.stack: list[str] = []
        self.rows: dict[str, dict[str, float]] = {}
        self.traced = traced
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self.page

    def _charge(self, rss: int) -> None:
        for name in self.stack:  # an enclosing phase's peak includes its inner phases'
            row = self.rows[name]
            row["peak"] = max(row["peak"], rss - self.base)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self._charge(self._rss())

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` timed and sampled as phase `name` when called on the main thread."""

        def run(*a: Any, **k: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                return fn(*a, **k)
            import tracemalloc

            row = self.rows.setdefault(name, {"wall": 0.0, "cpu": 0.0, "peak": 0.0, "end": 0.0, "traced": 0.0})
            self.stack.append(name)
            traced0 = 0
            if self.traced:
                traced0 = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
            t, c = time.perf_counter(), os.times()
            try:
                return fn(*a, **k)
            finally:
                c2 = os.times()
                row["wall"] += time.perf_counter() - t
                row["cpu"] += (c2.user - c.user) + (c2.system - c.system)
                if self.traced:
                    row["traced"] = max(row["traced"], tracemalloc.get_traced_memory()[1] - traced0)
                rss = self._rss()
                self._charge(rss)
                row["end"] = rss - self.base
                self.stack.pop()

        return run

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _child(size: int, order: str, traced: bool) -> None:
    """One ingest in this fresh process; prints its phases as one JSON line."""
    import ctypes
    import gc
    import tracemalloc

    import pyarrow as pa

    import nprof.analysis as analysis
    import nprof.store.ingest as ingest_mod
    import nprof.store.store as store_mod
    from nprof.store import Store

    root = Path(os.environ["NPROF_BENCH_DIR"])
    gc.collect()
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    if traced:
        tracemalloc.start()
    ph = Phases(traced)
    timed = ingest_mod._timed
    ingest_mod._timed = lambda steps, name, fn, *a: timed(steps, name, ph.wrap(name, fn), *a)
    store_mod.load_lean = ph.wrap("load (lean, streamed)", store_mod.load_lean)
    for name, fn in list(analysis.PASSES.items()):
        analysis.PASSES[name] = ph.wrap(f"  pass {name}", fn)
    for name, fn in list(analysis.TUNED.items()):
        analysis.TUNED[name] = ph.wrap(f"  pass {name}", fn)
    for name, fn in list(getattr(analysis, "STREAMED", {}).items()):  # a stream's setup (read by the writer)
        analysis.STREAMED[name] = ph.wrap(f"  pass {name} (stream set up)", fn)
    build = store_mod.build_profile_db
    store_mod.build_profile_db = lambda *a, **k: build(*a, **k, order=order)
    store = Store(root / "store")
    ingest = ph.wrap("ingest_file (whole)", store.ingest_file)
    ingest(root / "bench.ntff", profile_id="bench")
    ph.stop()
    store.close()
    print(json.dumps(ph.rows))


def _run(size: int, order: str, traced: bool) -> dict[str, dict[str, float]]:
    from nprof.store.synthetic import synthetic_profile

    root = Path(tempfile.mkdtemp(prefix="nprof-bench-phases-"))
    try:
        synthetic_profile(size, seed=1).save(root / "bench.ntff")
        cmd = [sys.executable, __file__, "--child", f"{size}:{order}:{int(traced)}"]
        env = {**os.environ, "NPROF_BENCH_DIR": str(root)}
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7")
    ap.add_argument("--order", default="overlap", help="overlap, writer-first, analysis-first")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        size, order, traced = args.child.split(":")
        _child(int(size), order, traced == "1")
        return
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; goal <= 50 B/event peak")
    for size in (int(float(s)) for s in args.sizes.split(",")):
        rows = _run(size, args.order, args.tracemalloc)
        print(f"{size:,} events, order {args.order} (load {os.getloadavg()[0]:.1f}):")
        print(f"  {'phase':<36} {'wall s':>7} {'CPU s':>7} {'peak B/ev':>10} {'end B/ev':>9}"
              + (f" {'traced B/ev':>12}" if args.tracemalloc else ""))  # fmt: skip
        for name, r in rows.items():
            line = f"  {name:<36} {r['wall']:7.2f} {r['cpu']:7.2f} {r['peak'] / size:10.0f} {r['end'] / size:9.0f}"
            print(line + (f" {r['traced'] / size:12.0f}" if args.tracemalloc else ""))


if __name__ == "__main__":
    main()
