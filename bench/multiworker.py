"""Benchmark: multi-worker capture and view ingest of the data-parallel MLP step (seed 000 step 6).

Compiles examples/data_parallel/train_dp.py's train step (forward, backward, six gradient all-reduces,
SGD; traced in one gloo process for a 32-worker job) into a fresh compile cache, then times, as a user
runs them (`nprof` subprocesses, wall time including Python start-up):

* `nprof capture -n model.neff -r N -s DIR` for N = 2, 8, 32 (numerics on: every rank's program runs and
  the all-reduces really sum), and the 32-worker capture with `--timing-only`;
* `nprof view -d DIR --ingest-only` of the 32-rank directory (parallel ingest into a fresh store);
* `nprof view -d DIR --output-format summary-text`;
* `nprof view -d DIR --output-format dataset` (the Hive-partitioned dataset) and `nprof analyze` on it with
  DuckDB and, when pyspark and Java are installed, Spark local[2] (side by side: the same SQL).
Each line prints wall time and the command's peak RSS.

Goal (issue: scale-out): 1,024 ranks captured, ingested and first-painted each under 2 minutes; cross-rank
queries under 2 s. Usage: .venv/bin/python bench/multiworker.py [--workers 2,8,32,256,1024] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "data_parallel" / "train_dp.py"


def _nprof() -> list[str]:
    exe = shutil.which("nprof", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "nprof"]


def _run(cmd: list[str], env: dict[str, str]) -> str:
    """Run `cmd`; 'wall s  peak RSS MB' of that one process (os.wait4 gives its own rusage)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode(errors='replace')}")
    return f"{took:8.2f} s  {usage.ru_maxrss / 1024:7.0f} MB peak RSS"


def _spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,8,32")
    parser.add_argument("--keep", default=None, help="keep the outputs in this directory")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="nprof-bench-mw-"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NPROF_NO_PROGRESS": "1", "NPROF_CACHE": str(tmp / "cache")}
    try:
        t = _run([sys.executable, str(EXAMPLE), "--steps", "1", "--world", str(max(counts))], env)
        (neff,) = (tmp / "cache").rglob("model.neff")
        print(f"compile data-parallel MLP step (1 process, gloo)   {t}   {neff.parent.name}")
        for n in counts:
            out = tmp / f"out{n}"
            shutil.rmtree(out, ignore_errors=True)
            t = _run([*_nprof(), "capture", "-n", str(neff), "-r", str(n), "-s", str(out)], env)
            print(f"capture {n:4d} workers (numerics)                    {t}")
        n = max(counts)
        t = _run([*_nprof(), "capture", "-n", str(neff), "-r", str(n), "-s", str(tmp / "timing"), "--timing-only"], env)
        print(f"capture {n:4d} workers (--timing-only)               {t}")
        db = tmp / "db"
        shutil.rmtree(db, ignore_errors=True)
        t = _run([*_nprof(), "view", "-d", str(tmp / f"out{n}"), "--ingest-only", "--db", str(db)], env)
        print(f"view -d ingest of {n} ranks (parallel)               {t}")
        t = _run([*_nprof(), "view", "-d", str(tmp / f"out{n}"), "--output-format", "summary-text"], env)
        print(f"view -d summary-text of {n} ranks                    {t}")
        data = tmp / "dataset"
        dataset_cmd = ["view", "-d", str(tmp / f"out{n}"), "--output-format", "dataset", "--output-file", str(data)]
        t = _run([*_nprof(), *dataset_cmd], env)
        print(f"view -d dataset of {n} ranks (Hive Parquet)           {t}")
        t = _run([*_nprof(), "analyze", str(data)], env)
        print(f"analyze {n} ranks, DuckDB (6 queries, process total)  {t}")
        if _spark_available():
            t = _run([*_nprof(), "analyze", str(data), "--engine", "spark"], env)
            print(f"analyze {n} ranks, Spark local[2] (JVM start incl.)   {t}")
        else:
            print("analyze with Spark: skipped (pip install 'nprof[spark]' and a Java runtime)")
        print(f"(wall times of nprof subprocesses on {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
