"""Exit codes over many runs: `nprof view --output-format summary-json` (success, 0) and a bad file (2).

Usage: python bench/exit_codes.py [--runs N]. Goal: every run exits 0 / 2, never 1 or 134 (the abort
pyarrow's thread pool can raise at interpreter shutdown). Also Ctrl-C during ingest: goal exit 130,
no traceback, store unchanged.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    from nprof.store.synthetic import synthetic_profile
    from tests.conftest import tiny_profile

    env = {**os.environ, "NPROF_NO_PROGRESS": "1"}
    with tempfile.TemporaryDirectory() as d:
        good = tiny_profile().save(Path(d) / "t.ntff")
        bad = Path(d) / "bad.ntff"
        bad.write_bytes(b"PK\x03\x04junk")
        big = synthetic_profile(400_000).save(Path(d) / "big.ntff")
        env["NPROF_DB"] = str(Path(d) / "store")
        for label, args, want in (("summary-json", [str(good)], 0), ("bad file", [str(bad)], 2)):
            codes: Counter[int] = Counter()
            wall = time.perf_counter()
            for _ in range(a.runs):
                cmd = [sys.executable, "-m", "nprof", "view", "-s", *args, "--output-format", "summary-json"]
                codes[subprocess.run(cmd, capture_output=True, env=env).returncode] += 1
            wall = time.perf_counter() - wall
            cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
            print(f"{label:13} runs {a.runs}: exit codes {dict(codes)} (goal {{{want}: {a.runs}}}); "
                  f"wall {wall:.1f} s, children cpu {cpu:.1f} s")  # fmt: skip
        codes = Counter()
        tracebacks = 0
        for k in range(16):
            proc = subprocess.Popen(
                [sys.executable, "-m", "nprof", "view", "-s", str(big), "--ingest-only", "--db-bucket", f"b{k}"],
                env=env, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(1.0 + 0.25 * k)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
            codes[proc.returncode] += 1
            tracebacks += "Traceback" in err
        print(f"Ctrl-C during ingest, 16 trials: exit codes {dict(codes)} (goal 130, or 0 if done first); "
              f"tracebacks {tracebacks} (goal 0)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
