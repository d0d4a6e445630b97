"""Synthetic profiles of any size, for the store's tests and benchmarks (deterministic per seed).

Contract: `synthetic_columns(n, seed)` returns the per-event columns of a virtual
NeuronCore-like run with `n` events: 3/4 instructions spread over the engine rows
(tensor.stationary, tensor.moving, vector, scalar, gpsimd, sync), 1/4 DMA
transfers over queues q0..q15; events on a row never overlap and leave gaps.
`synthetic_profile(n, seed)` wraps them in a `Profile` (with opcodes, layers,
source lines, operands and one dependency on every other instruction).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.profile import Profile, ProfileInfo

TRACKS = ("tensor.stationary", "tensor.moving", "vector", "scalar", "gpsimd", "sync")
ENGINE_OF = ("tensor", "tensor", "vector", "scalar", "gpsimd", "sync")
OPCODES = {
    "tensor.stationary": ("LOAD_STATIONARY",),
    "tensor.moving": ("MATMUL", "TRANSPOSE"),
    "vector": ("TENSOR_TENSOR", "TENSOR_REDUCE", "TENSOR_COPY"),
    "scalar": ("ACTIVATE", "ACTIVATE_EXP"),
    "gpsimd": ("IOTA", "AFFINE_SELECT"),
    "sync": ("SEM_WAIT",),
}
DIRECTIONS = ("hbm->sbuf", "sbuf->hbm", "sbuf->sbuf")
QUEUES = tuple(f"q{i}" for i in range(16))
LAYERS = tuple(f"model.layers.{i}.{part}" for i in range(8) for part in ("attn", "mlp"))
OPERANDS = ("sbuf[0:128] <- psum", "psum <- sbuf a, sbuf b", "sbuf c <- sbuf a", "sbuf d <- hbm x")
SOURCES = tuple(f"kernel.py:{10 + i}" for i in range(24))


def _sequential(rng: np.random.Generator, rows: np.ndarray, nrows: int, mean_dur: int) -> tuple[np.ndarray, ...]:
    """ts, dur of events laid out one after another on their row, with random gaps."""
    n = rows.size
    dur = rng.integers(mean_dur // 2, mean_dur * 3 // 2 + 1, n).astype(np.int64)
    gap = rng.integers(0, mean_dur, n).astype(np.int64)
    order = np.argsort(rows, kind="stable")
    step = (dur + gap)[order]
    cum = np.cumsum(step)
    bounds = np.searchsorted(rows[order], np.arange(nrows))
    counts = np.diff(np.append(bounds, n))
    base = np.where(bounds > 0, cum[np.maximum(bounds - 1, 0)], 0)
    start_of_row = np.repeat(base, counts)
    ts = np.empty(n, dtype=np.int64)
    ts[order] = cum - step - start_of_row
    return ts, dur


def _dict_strings(codes: np.ndarray, values: tuple[str, ...]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(values)).cast(pa.string())


def synthetic_profile(n: int, seed: int = 0, mean_dur: int = 400) -> Profile:
    """A deterministic profile with `n` events (see module doc)."""
    rng = np.random.default_rng(seed)
    n_dma = n // 4
    n_ins = n - n_dma
    trow = rng.integers(0, len(TRACKS), n_ins)
    qrow = rng.integers(0, len(QUEUES), n_dma)
    ts_i, dur_i = _sequential(rng, trow, len(TRACKS), mean_dur)
    ts_d, dur_d = _sequential(rng, qrow, len(QUEUES), mean_dur * 4)
    ids = np.arange(n, dtype=np.int64)
    order_i = np.argsort(ts_i, kind="stable")
    trow, ts_i, dur_i = trow[order_i], ts_i[order_i], dur_i[order_i]
    order_d = np.argsort(ts_d, kind="stable")
    qrow, ts_d, dur_d = qrow[order_d], ts_d[order_d], dur_d[order_d]
    all_ops = tuple(op for t in TRACKS for op in OPCODES[t])
    first = np.cumsum([0] + [len(OPCODES[t]) for t in TRACKS])
    pick = rng.integers(0, 1 << 30, n_ins)
    op_code = first[trow] + pick % np.array([len(OPCODES[t]) for t in TRACKS])[trow]
    is_mm = np.array([op == "MATMUL" for op in all_ops])[op_code]
    flops = np.where(is_mm, 2 * 128 * 128 * 512, 0).astype(np.int64)
    dep_has = (np.arange(n_ins) % 2 == 1) & (np.arange(n_ins) > 0)
    offsets = np.concatenate([[0], np.cumsum(dep_has)]).astype(np.int32)
    dep_vals = np.arange(n_ins, dtype=np.int64)[dep_has] - 1
    layer_i = rng.integers(0, len(LAYERS), n_ins)
    src_i = rng.integers(0, len(SOURCES), n_ins)
    info = ProfileInfo(
        device="virtual-neuroncore",
        name=f"synthetic-{n}",
        preset="trn1",
        peak_flops=9.5e13,
        hbm_bandwidth=4.1e11,
        peaks_source="synthetic",
    )
    return Profile.build(
        info,
        instructions={
            "id": pa.array(ids[:n_ins]),
            "ts": pa.array(ts_i),
            "duration": pa.array(dur_i),
            "engine": _dict_strings(trow, ENGINE_OF),
            "track": _dict_strings(trow, TRACKS),
            "opcode": _dict_strings(op_code, all_ops),
            "operands": _dict_strings(rng.integers(0, len(OPERANDS), n_ins), OPERANDS),
            "layer": _dict_strings(layer_i, LAYERS),
            "nki_source_location": _dict_strings(src_i, SOURCES),
            "flops": pa.array(flops),
            "hw_flops": pa.array(flops),
            "sbuf_read_bytes": pa.array(np.full(n_ins, 65536, dtype=np.int64)),
            "deps": pa.ListArray.from_arrays(pa.array(offsets), pa.array(dep_vals)),
            "pc": pa.array(np.arange(n_ins, dtype=np.int32)),
        },
        dma={
            "id": pa.array(ids[n_ins:]),
            "ts": pa.array(ts_d),
            "duration": pa.array(dur_d),
            "queue": _dict_strings(qrow, QUEUES),
            "direction": _dict_strings(rng.integers(0, 3, n_dma), DIRECTIONS),
            "bytes": pa.array((1 << rng.integers(8, 20, n_dma)).astype(np.int64)),
            "partitions": pa.array(np.full(n_dma, 128, dtype=np.int32)),
            "tensor": _dict_strings(rng.integers(0, 16, n_dma), tuple(f"t{i}" for i in range(16))),
            "layer": _dict_strings(rng.integers(0, len(LAYERS), n_dma), LAYERS),
        },
    )
