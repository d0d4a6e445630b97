"""Benchmark: Perfetto export speed and peak memory for 10^6 and 10^7 events.

Usage: .venv/bin/python bench/perfetto_export.py [--sizes 1000000 10000000] [--flows]
Each size runs in its own subprocess (so peak RSS is that size's alone): it builds
the synthetic profile of bench/analysis_speed.py, records RSS, exports to a
temporary .pftrace, and prints events/s (CPU and wall), the file size, RSS
before the export (profile in memory) and peak RSS, so the exporter's own memory
(peak minus before, which includes the per-event ts/end/track arrays it shares
with the analysis, ~20 B/event) can be compared across sizes; the peak mark is
reset after the synthetic profile is built. Goal: >= 1 M events/s, flat memory.

With --stages it also exports once more under tracemalloc and prints the peak Python/numpy memory of
the writer's stages (event streams, counter series): the streams are bounded by the batch
(`ExportOptions.chunk_rows`), the counter series of `nprof.analysis.counters` grow with the profile.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> None:
    """Reset the kernel's peak-RSS mark of this process (Linux: clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(n: int, flows: bool, stages: bool = False) -> None:
    sys.path.insert(0, str(HERE))
    from analysis_speed import synthetic_profile

    from nprof.export import ExportOptions, export_profile

    profile = synthetic_profile(n)
    _reset_peak()  # so the peak is the export's, not the synthetic generation's
    before = _rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ntff.pftrace"
        w, c = time.perf_counter(), time.process_time()
        export_profile(profile, "perfetto", path, ExportOptions(show_flows=flows))
        dw, dc = time.perf_counter() - w, time.process_time() - c
        size = path.stat().st_size
    peak = _peak_mb()
    with tempfile.TemporaryDirectory() as tmp:
        traced = stage_peaks(profile, Path(tmp) / "ntff.pftrace") if stages else {}
    print(json.dumps({"events": profile.event_count, "cpu_s": dc, "wall_s": dw, "bytes": size,
                      "rss_before_mb": before, "peak_rss_mb": peak, "stages": traced}))  # fmt: skip


def stage_peaks(profile: object, path: Path) -> dict[str, float]:
    """Peak traced memory (MB) of each writer stage during one export (tracemalloc: slow, not timed)."""
    import tracemalloc

    import nprof.export.perfetto_export as pe
    from nprof.export import ExportOptions, export_profile

    peaks: dict[str, float] = {}
    originals = {name: getattr(pe._Writer, name) for name in ("stream", "lane", "counters", "collectives")}

    def traced(name: str) -> Callable[..., Any]:
        def run(self: Any, *args: Any, **kw: Any) -> Any:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            out = originals[name](self, *args, **kw)
            peaks[name] = max(peaks.get(name, 0.0), (tracemalloc.get_traced_memory()[1] - base) / 1e6)
            return out

        return run

    for name in originals:
        setattr(pe._Writer, name, traced(name))
    tracemalloc.start()
    try:
        export_profile(profile, "perfetto", path, ExportOptions())
    finally:
        tracemalloc.stop()
        for name, fn in originals.items():
            setattr(pe._Writer, name, fn)
    return peaks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--flows", action="store_true", help="also write dependency flows")
    parser.add_argument("--stages", action="store_true", help="also print each writer stage's peak memory")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.flows, args.stages)
        return 0
    print(f"perfetto export{' with flows' if args.flows else ''} (CPU = process CPU time; wall = elapsed)")
    for n in args.sizes:
        cmd = [sys.executable, __file__, "--child", str(n)] + (["--flows"] if args.flows else [])
        cmd += ["--stages"] if args.stages else []
        env = {**os.environ, "NPROF_NO_PROGRESS": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        print(f"  {r['events']:>9} events: CPU {r['cpu_s']:6.2f} s {r['events'] / r['cpu_s'] / 1e6:5.2f} M events/s  "
              f"wall {r['wall_s']:6.2f} s {r['events'] / r['wall_s'] / 1e6:5.2f} M events/s  "
              f"file {r['bytes'] / 1e6:7.1f} MB  RSS before {r['rss_before_mb']:6.0f} MB  "
              f"peak {r['peak_rss_mb']:6.0f} MB  (+{r['peak_rss_mb'] - r['rss_before_mb']:.0f} MB)")  # fmt: skip
        if r["stages"]:
            print("             traced peak per stage: "
                  + ", ".join(f"{k} {v:.0f} MB" for k, v in r["stages"].items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
