"""Benchmark: analysis passes on a synthetic 10^7-event profile (events/s per pass and for run_all).

Usage: .venv/bin/python bench/analysis_speed.py [--events N] [--encoded]
Prints one line per pass (seconds, events/s) and the run_all total. `--encoded`: the profile is saved and
read back with `Profile.load(encoded=True)` (as the store's ingest reads it), so the string columns' codes
come from the file instead of being hashed by the analysis. Each pass is
timed on a fresh Profile object so shared facts are not reused from a previous
pass; the run_all line is one cold run of every pass (facts shared, as in ingest).
Goal (docs/architecture.md, Performance goals): >= 5,000,000 events/s for run_all on one core.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pyarrow as pa

from nprof.profile import Profile, ProfileInfo

TRACKS = {
    "tensor.stationary": ("tensor", ["LDWEIGHTS"]),
    "tensor.moving": ("tensor", ["MATMUL"]),
    "vector": ("vector", ["TENSOR_TENSOR", "TENSOR_SCALAR", "TENSOR_REDUCE"]),
    "scalar": ("scalar", ["ACTIVATE"]),
    "gpsimd": ("gpsimd", ["IOTA"]),
    "sync": ("sync", ["EVENT_SEMAPHORE"]),
}


def _strings(pool: list[str], codes: np.ndarray) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(pool)).cast(pa.string())


def synthetic_profile(n_events: int, seed: int = 0) -> Profile:
    """A virtual-device profile with `n_events` events (70% instructions, 30% DMA), sorted by ts."""
    rng = np.random.default_rng(seed)
    n_dma = int(n_events * 0.3)
    n_ins = n_events - n_dma
    track_names = list(TRACKS)
    track = rng.choice(len(track_names), n_ins, p=[0.15, 0.25, 0.25, 0.2, 0.1, 0.05]).astype(np.int32)
    dur = rng.integers(50, 400, n_ins)
    gap = rng.integers(0, 60, n_ins)
    ts = np.zeros(n_ins, np.int64)
    for k in range(len(track_names)):  # sequential per track
        m = track == k
        step = dur[m] + gap[m]
        ts[m] = np.concatenate([[0], np.cumsum(step)[:-1]])
    order = np.argsort(ts, kind="stable")
    track, dur, ts = track[order], dur[order], ts[order]
    engines = sorted({e for e, _ in TRACKS.values()})
    engine_code = np.array([engines.index(TRACKS[t][0]) for t in track_names])[track]
    opcodes = sorted({o for _, ops in TRACKS.values() for o in ops})
    op_choice = rng.integers(0, 3, n_ins)
    op_code = np.array([[opcodes.index(ops[i % len(ops)]) for i in range(3)] for _, ops in TRACKS.values()])
    op = op_code[track, op_choice]
    is_mm = np.asarray(track_names)[track] == "tensor.moving"
    flops = np.where(is_mm, 2 * 128 * 128 * 512, 0)
    ids = np.arange(n_ins, dtype=np.int64)
    deps_off = np.arange(n_ins + 1, dtype=np.int32)
    deps = pa.ListArray.from_arrays(pa.array(deps_off), pa.array(np.maximum(ids - 1, 0)))
    operands_pool = [f"sbuf[{i % 128}:{i % 128 + 128}, 0:512] <- psum bank {i % 8}" for i in range(1000)]
    sources = [f"kernel.py:{10 + i}" for i in range(50)]
    layers = [f"model.layers.{i}.mlp" for i in range(20)]
    instructions = {
        "id": ids,
        "ts": ts,
        "duration": dur,
        "engine": _strings(engines, engine_code),
        "track": _strings(track_names, track),
        "opcode": _strings(opcodes, op),
        "operands": _strings(operands_pool, rng.integers(0, 1000, n_ins)),
        "layer": _strings(layers, (ts // 2_000_000) % 20),
        "nki_source_location": _strings(sources, rng.integers(0, 50, n_ins)),
        "flops": flops,
        "hw_flops": flops,
        "sbuf_read_bytes": rng.integers(0, 1 << 17, n_ins),
        "psum_write_bytes": np.where(is_mm, 1 << 18, 0),
        "wait_ns": rng.integers(0, 20, n_ins),
        "deps": deps,
    }
    queue = rng.integers(0, 16, n_dma).astype(np.int32)
    ddur = rng.integers(100, 2000, n_dma)
    dgap = rng.integers(0, 800, n_dma)
    dts = np.zeros(n_dma, np.int64)
    for q in range(16):
        m = queue == q
        step = ddur[m] + dgap[m]
        dts[m] = np.concatenate([[0], np.cumsum(step)[:-1]]) if m.any() else dts[m]
    order = np.argsort(dts, kind="stable")
    queue, ddur, dts = queue[order], ddur[order], dts[order]
    sizes = np.array([512, 4096, 65536, 262144])[rng.integers(0, 4, n_dma)]
    dma = {
        "id": np.arange(n_ins, n_ins + n_dma, dtype=np.int64),
        "ts": dts,
        "duration": ddur,
        "queue": _strings([f"q{i}" for i in range(16)], queue),
        "direction": _strings(["hbm->sbuf", "sbuf->hbm"], (rng.random(n_dma) < 0.2).astype(np.int32)),
        "bytes": sizes,
        "partitions": np.full(n_dma, 128, np.int32),
        "tensor": _strings([f"w{i}" for i in range(1000)], rng.integers(0, 1000, n_dma)),
        "nki_source_location": _strings(sources, rng.integers(0, 50, n_dma)),
    }
    info = ProfileInfo(device="virtual-neuroncore", name=f"synthetic-{n_events}", preset="trn1",
                       peak_flops=92e12, hbm_bandwidth=820e9, peaks_source="docs/hardware.md trn1")  # fmt: skip
    return Profile.build(info, instructions=instructions, dma=dma)


def _print_compiled_load(n_dma: int) -> None:
    """Load (and run once) the compiled pending-DMA window that the counters pass uses for `n_dma` transfers, and
    print its once-per-process CPU cost: a fresh process's first analysis pays it (unless the store's LOD core
    loaded numba first); the pass lines below do not include it."""
    from nprof.analysis.counters import window_function

    c = time.process_time()
    window = window_function(n_dma)
    window(np.zeros(1, np.int64), np.ones(1, np.int64), 0, None)
    label = "compiled" if "nprof.analysis.pending_core" in sys.modules else "numpy (below the compiled threshold)"
    print(f"pending-DMA window: {label}; its load, once per process: CPU {time.process_time() - c:.3f} s "
          "(not in the figures below)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--encoded", action="store_true", help="analyse the profile as read back from its file")
    args = parser.parse_args()
    pa.set_cpu_count(1)  # one core: no Arrow worker threads
    from nprof.analysis import PASSES, run_all

    t0 = time.perf_counter()
    profile = synthetic_profile(args.events)
    if args.encoded:
        with tempfile.TemporaryDirectory() as tmp:
            profile = Profile.load(profile.save(os.path.join(tmp, "bench.nprof")), encoded=True)
    n = profile.event_count
    print(f"synthetic profile: {n} events ({profile.instructions.num_rows} instructions, "
          f"{profile.dma.num_rows} DMA), generated in {time.perf_counter() - t0:.1f} s")  # fmt: skip
    print("(CPU = process CPU time, the one-core figure on a shared machine; wall = elapsed)")
    _print_compiled_load(profile.dma.num_rows)
    for name, fn in PASSES.items():
        fresh = replace(profile)  # a new Profile object: no cached facts
        w, c = time.perf_counter(), time.process_time()
        fn(fresh)
        dw, dc = time.perf_counter() - w, time.process_time() - c
        print(f"  pass {name:<11} CPU {dc:6.3f} s {n / dc / 1e6:7.2f} M events/s   wall {dw:6.3f} s  (cold)")
    fresh = replace(profile)
    w, c = time.perf_counter(), time.process_time()
    tables = run_all(fresh)
    dw, dc = time.perf_counter() - w, time.process_time() - c
    rows = sum(t.num_rows for t in tables.values())
    print(f"run_all: CPU {dc:.3f} s  {n / dc / 1e6:.2f} M events/s   wall {dw:.3f} s  {n / dw / 1e6:.2f} M events/s"
          f"  ({rows} result rows)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
