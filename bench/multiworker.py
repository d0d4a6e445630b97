"""Benchmark: multi-worker capture, view ingest, the aggregated view's first paint and cross-rank queries.

Compiles examples/data_parallel/train_dp.py's train step (forward, backward, six gradient all-reduces, SGD;
traced in one gloo process) into a fresh compile cache, then times, as a user runs them (`nprof`
subprocesses, wall time including Python start-up; CPU = user + system of the process and its children):

* small jobs (N <= 32): `nprof capture -n model.neff -r N -s DIR` (numerics on: every rank's program runs and
  the all-reduces really sum), the largest also with `--timing-only`; `nprof view -d DIR --ingest-only`
  (every rank fully ingested, in parallel); `--output-format summary-text`; the Hive-partitioned dataset and
  `nprof analyze` on it with DuckDB and, when pyspark and Java are installed, Spark local[2];
* large jobs (N > 32, e.g. 256 and 1024): nodes of 64 workers, one `nprof capture -n model.neff -r 64
  --collectives-worker-count N --collectives-worker-start-id K --timing-only
  --collectives-rank-delay 17:250` per node (each simulates the whole job: identical ranks share one
  schedule; rank 17 starts 250 us late, a straggler), then the same job as one command `-r N`;
  `nprof view -d DIR --ingest-only` (the group index: every rank read in parallel, one at a time per worker;
  the ranks themselves are ingested when first opened); then `nprof view -d DIR` serving, and in Debian's
  Chromium the CC Aggregated view's first paint (navigation -> drawn and idle, fresh server), then the
  cross-rank queries over HTTP on a fresh server: slowest rank per collective (`/collectives`, the
  straggler of every op) and the wait distribution (`/waits`), cold (first request) and warm.
Peak RSS: the largest single process (rusage) and the sum over the process tree (sampled every 0.1 s).

Goal (issue 17, scale-out): 1,024 ranks captured, ingested and first-painted each under 2 minutes; cross-rank
queries under 2 s. Usage: .venv/bin/python bench/multiworker.py [--workers 2,8,32,256,1024] [--keep DIR]
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root, for tests.browser
from tests.browser import free_port, launch_chromium, start_view, stop  # noqa: E402

EXAMPLE = ROOT / "examples" / "data_parallel" / "train_dp.py"
GOAL_S = 120.0
QUERY_GOAL_S = 2.0
PER_NODE = 64


def _nprof() -> list[str]:
    exe = shutil.which("nprof", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "nprof"]


def _tree_rss(root: int) -> int:
    """Summed RSS (bytes) of `root` and its descendants, read from /proc."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    parent[int(d)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, todo = set(), [root]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo.extend(c for c, pp in parent.items() if pp == p and c not in tree)
    total = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run `cmd`; (wall s, 'wall s  cpu s  peak RSS MB (largest process / process tree)')."""
    start = time.perf_counter()
    peak = [0]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.1):
                peak[0] = max(peak[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        done.set()
        sampler.join()
        took = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode(errors='replace')}")
    cpu = usage.ru_utime + usage.ru_stime
    return took, (f"{took:8.2f} s wall {cpu:7.2f} s CPU  {usage.ru_maxrss / 1024:5.0f} MB largest process "
                  f"{peak[0] / 2**20:5.0f} MB tree")  # fmt: skip


def _goal(took: float, goal: float) -> str:
    return f"(goal < {goal:.0f} s: {'met' if took < goal else 'MISSED'})"


def _spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


def _small(neff: Path, counts: list[int], tmp: Path, env: dict[str, str]) -> None:
    """The numerics captures, full ingest, summary and dataset of the small jobs (see module doc)."""
    for n in counts:
        out = tmp / f"out{n}"
        shutil.rmtree(out, ignore_errors=True)
        _, t = _run([*_nprof(), "capture", "-n", str(neff), "-r", str(n), "-s", str(out)], env)
        print(f"capture {n:4d} workers (numerics)                        {t}")
    n = max(counts)
    _, t = _run([*_nprof(), "capture", "-n", str(neff), "-r", str(n), "-s", str(tmp / "timing"), "--timing-only"], env)
    print(f"capture {n:4d} workers (--timing-only)                   {t}")
    db = tmp / "db"
    shutil.rmtree(db, ignore_errors=True)
    _, t = _run([*_nprof(), "view", "-d", str(tmp / f"out{n}"), "--ingest-only", "--db", str(db)], env)
    print(f"view -d ingest of {n} ranks (every rank, parallel)       {t}")
    _, t = _run([*_nprof(), "view", "-d", str(tmp / f"out{n}"), "--output-format", "summary-text"], env)
    print(f"view -d summary-text of {n} ranks                        {t}")
    data = tmp / "dataset"
    dataset_cmd = ["view", "-d", str(tmp / f"out{n}"), "--output-format", "dataset", "--output-file", str(data)]
    _, t = _run([*_nprof(), *dataset_cmd], env)
    print(f"view -d dataset of {n} ranks (Hive Parquet)               {t}")
    _, t = _run([*_nprof(), "analyze", str(data)], env)
    print(f"analyze {n} ranks, DuckDB (6 queries, process total)      {t}")
    if _spark_available():
        _, t = _run([*_nprof(), "analyze", str(data), "--engine", "spark"], env)
        print(f"analyze {n} ranks, Spark local[2] (JVM start incl.)       {t}")
    else:
        print("analyze with Spark: skipped (pip install 'nprof[spark]' and a Java runtime)")


def _get(url: str) -> tuple[float, dict]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as res:
        data = json.loads(res.read())
    return time.perf_counter() - start, data


def _serve(out: Path, db: Path) -> tuple[subprocess.Popen[str], str, str]:
    port = free_port()
    proc, line = start_view(["-d", str(out), "--db", str(db), "--port", str(port)], marker="/profile_cc/")
    return proc, f"http://127.0.0.1:{port}", line.strip().rsplit("/", 1)[-1]


def _paint_and_queries(out: Path, db: Path) -> None:
    """First paint in Chromium (fresh server), then the cross-rank queries cold and warm (another fresh one)."""
    from playwright.sync_api import sync_playwright

    proc, base, gid = _serve(out, db)
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            start = time.perf_counter()
            page.goto(f"{base}/profile_cc/{gid}?agg=1")
            ready = "() => window.__nprof && window.__nprof.agg && window.__nprof.idle()"
            page.wait_for_function(ready, timeout=600_000)
            took = time.perf_counter() - start
            bands = page.evaluate("() => { const l = window.__nprof.agg.data.lod; return l ? l.bands.length : 0; }")
            browser.close()
        print(f"  aggregated view first paint (Chromium, cold server)   {took:8.2f} s  {bands} rank bands  "
              f"{_goal(took, GOAL_S)}")  # fmt: skip
    finally:
        stop(proc)
    for label, path in [
        ("slowest rank per collective (/collectives)", "collectives?bins=600&rows=100"),
        ("wait distribution, all ops (/waits)", "waits?buckets=20&top=10"),
        ("wait distribution, op 0 (/waits?op=0)", "waits?op=0&buckets=20&top=10"),
    ]:
        proc, base, gid = _serve(out, db)  # a fresh server each: cold = nothing cached
        try:
            cold, data = _get(f"{base}/api/groups/{gid}/{path}")
            warm, _ = _get(f"{base}/api/groups/{gid}/{path}")
        finally:
            stop(proc)
        print(f"  query {label:43s} {cold:6.2f} s cold {warm:6.3f} s warm  {_goal(cold, QUERY_GOAL_S)}")
        if "ops" in data:
            print(f"  (straggler of every collective: ranks {sorted({op['straggler'] for op in data['ops']})})")


def _large(neff: Path, n: int, tmp: Path, env: dict[str, str]) -> None:
    """Capture per node and as one command, index ingest, first paint and queries of an n-rank job."""
    out = tmp / f"scale{n}"
    shutil.rmtree(out, ignore_errors=True)
    nodes = max(1, n // PER_NODE)
    total, cpu_line = 0.0, ""
    for k in range(nodes):
        cmd = [*_nprof(), "capture", "-n", str(neff), "-r", str(min(PER_NODE, n)), "--collectives-worker-count",
               str(n), "--collectives-worker-start-id", str(k * PER_NODE), "--timing-only",
               "--collectives-rank-delay", "17:250", "-s", str(out)]  # fmt: skip
        took, cpu_line = _run(cmd, env)
        total += took
    print(f"capture {n:4d} ranks: {nodes} node commands of -r {PER_NODE}     {total:8.2f} s wall in all  "
          f"{_goal(total, GOAL_S)}  (last node: {cpu_line.strip()})")  # fmt: skip
    one = tmp / f"one{n}"
    shutil.rmtree(one, ignore_errors=True)
    took, t = _run([*_nprof(), "capture", "-n", str(neff), "-r", str(n), "--timing-only",
                    "--collectives-rank-delay", "17:250", "-s", str(one)], env)  # fmt: skip
    print(f"capture {n:4d} ranks: one command -r {n:<5d}              {t}  {_goal(took, GOAL_S)}")
    shutil.rmtree(one, ignore_errors=True)
    db = tmp / f"db{n}"
    shutil.rmtree(db, ignore_errors=True)
    took, t = _run([*_nprof(), "view", "-d", str(out), "--ingest-only", "--db", str(db)], env)
    print(f"view -d ingest of {n} ranks (index, parallel)           {t}  {_goal(took, GOAL_S)}")
    _paint_and_queries(out, db)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,8,32,256,1024")
    parser.add_argument("--keep", default=None, help="keep the outputs in this directory")
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="nprof-bench-mw-"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NPROF_NO_PROGRESS": "1", "NPROF_CACHE": str(tmp / "cache")}
    try:
        _, t = _run([sys.executable, str(EXAMPLE), "--steps", "1", "--world", str(max(counts))], env)
        (neff,) = (tmp / "cache").rglob("model.neff")
        print(f"compile data-parallel MLP step (1 process, gloo)       {t}   {neff.parent.name}")
        small = [n for n in counts if n <= 32]
        if small:
            _small(neff, small, tmp, env)
        for n in (n for n in counts if n > 32):
            _large(neff, n, tmp, env)
        print(f"(nprof subprocesses on {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
