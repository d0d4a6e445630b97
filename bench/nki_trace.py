"""Benchmark: NKI tracing speed (kernel -> Program) on the matmul tutorial's kernels at their published size.

The four variants of bench/fidelity_kernels.py (the NKI matrix multiplication tutorial's shapes:
lhsT [8192, 4096] . rhs [8192, 8192], bf16) are traced with `Kernel.trace` and simulated timing-only
(`nprof.device.simulate(..., numerics=False)`). Prints, per variant, the instructions traced per CPU second
beside the goal (>= 200,000 instr/s) and the tutorial's trace + simulate time (CPU and wall) beside the goal
(< 10 s). CPU time is the figure to read on a shared machine; wall time is printed beside it.

Usage: .venv/bin/python bench/nki_trace.py [--scale 1.0] [--variants tiled,hoisted,block_free,blocked]
  --scale s  M = 4096 * s (the fully blocked variant needs M >= 2048).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity_kernels as fk

import nprof.nki.language as nl
from nprof.device import simulate
from nprof.nki.kernel import Kernel
from nprof.nki.typing import tensor

TRACE_GOAL = 200_000  # instructions traced per CPU second (issue 14)
TOTAL_GOAL = 10.0  # seconds to trace + simulate (timing-only) the tutorial at its published size
VARIANTS = {
    "tiled": fk.mm_tiled,
    "hoisted": fk.mm_hoisted,
    "block_free": fk.mm_block_free,
    "blocked": fk.mm_blocked,
}


def _clock() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def measure(kernel, m: int) -> dict[str, float]:
    """Trace and simulate one variant at lhsT [8192, m]: instructions and (cpu, wall) seconds of each stage."""
    shapes = ((8192, m), (8192, 8192))
    gc.collect()
    c0, w0 = _clock()
    traced = Kernel(kernel).trace(*(tensor[list(s), nl.bfloat16] for s in shapes))
    c1, w1 = _clock()
    simulate(traced.program, numerics=False)
    c2, w2 = _clock()
    return {
        "n": len(traced.program.instructions),
        "trace_cpu": c1 - c0,
        "trace_wall": w1 - w0,
        "sim_cpu": c2 - c1,
        "sim_wall": w2 - w1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="M as a fraction of 4096 (1.0: published size)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    args = ap.parse_args()
    m = int(4096 * args.scale)
    print(f"load average {os.getloadavg()[0]:.1f}; lhsT [8192, {m}] . rhs [8192, 8192] bf16; "
          f"goals: trace >= {TRACE_GOAL:,} instr/s (CPU), trace + simulate < {TOTAL_GOAL:.0f} s")  # fmt: skip
    print(f"{'variant':11} {'instrs':>8} {'trace cpu':>9} {'instr/s':>9} {'goal':>8}  "
          f"{'sim cpu':>8} {'total cpu':>9} {'total wall':>10} {'goal':>6}")  # fmt: skip
    for name in args.variants.split(","):
        r = measure(VARIANTS[name], m)
        rate = r["n"] / r["trace_cpu"]
        total_cpu, total_wall = r["trace_cpu"] + r["sim_cpu"], r["trace_wall"] + r["sim_wall"]
        ok_rate = "ok" if rate >= TRACE_GOAL else "MISSED"
        ok_total = "ok" if total_cpu < TOTAL_GOAL * args.scale else "MISSED"
        print(f"{name:11} {r['n']:>8,} {r['trace_cpu']:>8.2f}s {rate:>9,.0f} {ok_rate:>8}  "
              f"{r['sim_cpu']:>7.2f}s {total_cpu:>8.2f}s {total_wall:>9.2f}s {ok_total:>6}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
