"""Synthetic profiles of any size, for the store's tests and benchmarks (deterministic per seed).

Contract: `synthetic_profile(n, seed)` is a virtual NeuronCore-like run with `n`
events: 3/4 instructions spread over the engine rows (tensor.stationary,
tensor.moving, vector, scalar, gpsimd, sync), 1/4 DMA transfers over queues
q0..q15; events on a row never overlap and leave gaps. Instructions carry
opcodes, layers, source lines, operands and one dependency on every other one.
`synthetic_columns` / `build_timeline_store` produce the same layout straight as
store columns, for 10^8-event viewport benchmarks.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from nprof.profile import Profile, ProfileInfo
from nprof.store.rows import RowInfo, order_event_rows
from nprof.store.store import Store

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


def synthetic_columns(
    n: int, seed: int = 0, mean_dur: int = 400
) -> tuple[list[RowInfo], dict[str, np.ndarray], list[str]]:
    """Store `events` columns (sorted by row, ts) of an `n`-event synthetic run, without building a Profile.

    Same layout as `synthetic_profile` (3/4 instructions on 6 engine rows, 1/4 DMA on 16 queues);
    used to benchmark viewport queries at sizes (10^8 events) where a Profile would not fit in memory.
    Returns (rows, columns, opcode names).
    """
    rng = np.random.default_rng(seed)
    rows = order_event_rows(set(TRACKS), set(QUEUES))
    opnames = sorted({op for t in TRACKS for op in OPCODES[t]} | set(DIRECTIONS))
    n_dma = n // 4
    share = {r.key: (n_dma // len(QUEUES) if r.kind == "dma" else (n - n_dma) // len(TRACKS)) for r in rows}
    share[rows[-1].key] += n - sum(share.values())
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("row", "ts", "dur", "id", "op", "nbytes", "flops", "src")}
    next_id = 0
    for r in rows:
        m = share[r.key]
        scale = mean_dur * (4 if r.kind == "dma" else 1)
        dur = rng.integers(scale // 2, scale * 3 // 2 + 1, m).astype(np.int64)
        step = dur + rng.integers(0, scale, m)
        choices = DIRECTIONS if r.kind == "dma" else OPCODES[r.key]
        codes = np.array([opnames.index(c) for c in choices], dtype=np.int32)[rng.integers(0, len(choices), m)]
        parts["row"].append(np.full(m, r.index, dtype=np.int16))
        parts["ts"].append(np.cumsum(step) - step)
        parts["dur"].append(dur)
        parts["id"].append(np.arange(next_id, next_id + m, dtype=np.int64))
        parts["op"].append(codes)
        nbytes = (1 << rng.integers(8, 20, m)).astype(np.int64) if r.kind == "dma" else np.zeros(m, np.int64)
        parts["nbytes"].append(nbytes)
        is_mm = codes == opnames.index("MATMUL")
        parts["flops"].append(np.where(is_mm, 2 * 128 * 128 * 512, 0).astype(np.int64))
        parts["src"].append(rng.integers(0, len(SOURCES), m).astype(np.int32))
        next_id += m
    return rows, {k: np.concatenate(v) for k, v in parts.items()}, opnames


def build_timeline_store(store: Store, profile_id: str, n: int, seed: int = 0) -> None:
    """Register an `n`-event synthetic profile whose database holds the timeline tables only.

    The raw `instructions`/`dma` tables and the analysis tables are empty (details and search
    find nothing); the viewport, rows and box select work as on any ingested profile.
    """
    from nprof.progress import progress
    from nprof.store.ingest import (
        STORE_FORMAT,
        TIMELINE_ONLY_TABLES,
        close_build_db,
        open_build_db,
        put_meta,
        put_table,
        write_timeline,
    )

    rows, cols, opnames = synthetic_columns(n, seed)
    span = int((cols["ts"] + cols["dur"]).max())
    info = ProfileInfo(device="virtual-neuroncore", name=f"synthetic-{n}", preset="trn1", peak_flops=9.5e13)
    path = store.dir / "tmp" / f"{profile_id}.timeline.duckdb"
    path.unlink(missing_ok=True)
    con = open_build_db(path)
    done = False
    try:
        with progress(3, f"Building {profile_id}") as bar:
            base = write_timeline(con, rows, cols, opnames, list(SOURCES), span, [], bar)
        for name, schema in TIMELINE_ONLY_TABLES.items():
            put_table(con, name, schema.empty_table())
        stats = {
            "t_max": span,
            "total_time_ns": span,
            "base_level": base,
            "event_count": n,
            "max_dur": int(cols["dur"].max()),
            "instruction_count": 0,
            "dma_count": 0,
            "flops": 0,
            "hw_flops": 0,
        }
        meta = {
            "store_format": STORE_FORMAT,
            "manifest": info.to_json(),
            "summary": {},
            "analysis_tables": [],
            "stats": stats,
        }
        put_meta(con, meta)
        close_build_db(con)
        done = True
    finally:
        if not done:
            con.close()
    entry = {
        "id": profile_id,
        "display_name": info.name,
        "name": info.name,
        "device": info.device,
        "preset": info.preset,
        "created": "",
        "ingested": "",
        "total_time_ns": span,
        "event_count": n,
        "rank": 0,
        "world_size": 1,
        "group": None,
        "source": None,
        "fingerprint": None,
    }

    def register(data: dict) -> None:
        os.replace(path, store.db_path(profile_id))
        data["profiles"][profile_id] = entry

    store.catalog.update(register)
