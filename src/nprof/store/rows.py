"""Timeline rows: which rows a profile has, their display order and labels.

Contract: `order_rows(event_rows, has_counters...)` takes the row keys found in a
profile (instruction `track` values and DMA `queue` values, tagged by kind) and
returns `RowInfo`s in viewer order: DMA queues on top (natural order q0..q15),
then the engine rows tensor.stationary, tensor.moving, vector, scalar, gpsimd,
sync, cc.<k>, then every other track (real-hardware threads/streams), then the
counter rows (TensorMatrix utilization, Pending DMA count, DMA throughput and
any sampled counters). A system profile (host tracks `cpu:<tid>` / `nprof.*`, copy
queues `h2d:*` / `d2h:*`, device tracks `nc:<k>`; docs/system.md) is ordered host
first: host threads, nprof.compile, nprof.launch, then the copy queues, then every
other track, the NeuronCore tracks last. Keys are the same strings the API uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENGINE_ORDER = ("tensor.stationary", "tensor.moving", "vector", "scalar", "gpsimd", "sync")
ENGINE_LABELS = {
    "tensor.stationary": "TensorE (LoadStationary)",
    "tensor.moving": "TensorMatrix (MultiplyMoving)",
    "vector": "VectorE",
    "scalar": "ScalarE",
    "gpsimd": "GpSimdE",
    "sync": "SyncE",
}
TRACK_ENGINE = {
    "tensor.stationary": "tensor",
    "tensor.moving": "tensor",
    "vector": "vector",
    "scalar": "scalar",
    "gpsimd": "gpsimd",
    "sync": "sync",
}

COUNTER_TENSOR_UTIL = "counter:tensor_util"
COUNTER_PENDING_DMA = "counter:pending_dma"
COUNTER_DMA_THROUGHPUT = "counter:dma_throughput"
DERIVED_COUNTERS = {
    COUNTER_TENSOR_UTIL: ("TensorMatrix utilization", "%"),
    COUNTER_PENDING_DMA: ("Pending DMA count", ""),
    COUNTER_DMA_THROUGHPUT: ("DMA throughput", "GB/s"),
}


@dataclass(frozen=True)
class RowInfo:
    """One timeline row; `index` is its position (and its id in the store's event tables)."""

    index: int
    key: str
    label: str
    kind: str  # dma, engine, track, counter
    engine: str | None = None
    unit: str | None = None


def natural_key(text: str) -> tuple[object, ...]:
    """Sort key that orders embedded numbers numerically: q2 < q10, cc.2 < cc.10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _engine_rank(track: str) -> tuple[int, tuple[object, ...]]:
    if track in ENGINE_ORDER:
        return (ENGINE_ORDER.index(track), ())
    if track == "cc" or track.startswith("cc."):
        return (len(ENGINE_ORDER), natural_key(track))
    return (len(ENGINE_ORDER) + 1, natural_key(track))


_HOST_TRACK = re.compile(r"cpu:|nprof\.")
_COPY_QUEUE = re.compile(r"(h2d|d2h):")


def _system_rows(tracks: set[str], queues: set[str]) -> list[RowInfo] | None:
    """Host-first order of a system profile's rows (module doc); None for other profiles."""
    host = sorted((t for t in tracks if _HOST_TRACK.match(t)), key=lambda t: (t.startswith("nprof."), natural_key(t)))
    copies = sorted((q for q in queues if _COPY_QUEUE.match(q)), key=lambda q: (q.startswith("d2h"), natural_key(q)))
    if not copies and not any(t.startswith(("nprof.", "nc:")) for t in tracks):
        return None  # a plain host capture keeps the default order
    rest = sorted(tracks - set(host) - queues, key=lambda t: (t.startswith("nc:"), natural_key(t)))
    other_queues = sorted(queues - set(copies), key=natural_key)
    rows = [RowInfo(i, t, t, "track") for i, t in enumerate(host)]
    rows += [RowInfo(len(rows) + i, q, q, "dma") for i, q in enumerate(copies + other_queues)]
    return rows + [RowInfo(len(rows) + i, t, t, "track") for i, t in enumerate(rest)]


def order_event_rows(tracks: set[str], queues: set[str]) -> list[RowInfo]:
    """Event rows in display order. A name used both as a DMA queue and a track is one row."""
    system = _system_rows(tracks, queues)
    if system is not None:
        return system
    rows: list[RowInfo] = []
    for q in sorted(queues, key=natural_key):
        label = f"DMA {q}" if re.fullmatch(r"q\d+", q) else q
        rows.append(RowInfo(len(rows), q, label, "dma"))
    for t in sorted(tracks - queues, key=_engine_rank):
        if t in ENGINE_LABELS:
            rows.append(RowInfo(len(rows), t, ENGINE_LABELS[t], "engine", TRACK_ENGINE[t]))
        elif t == "cc" or t.startswith("cc."):
            rows.append(RowInfo(len(rows), t, f"CC-core {t[3:]}" if t.startswith("cc.") else "CC-core", "engine", "cc"))
        else:
            rows.append(RowInfo(len(rows), t, t, "track"))
    return rows


def counter_rows(start: int, derived: list[str], sampled: list[str]) -> list[RowInfo]:
    """Counter rows after the event rows: derived ones in fixed order, then sampled counters by name."""
    rows: list[RowInfo] = []
    for key in (COUNTER_TENSOR_UTIL, COUNTER_PENDING_DMA, COUNTER_DMA_THROUGHPUT):
        if key in derived:
            label, unit = DERIVED_COUNTERS[key]
            rows.append(RowInfo(start + len(rows), key, label, "counter", unit=unit))
    for name in sorted(sampled, key=natural_key):
        rows.append(RowInfo(start + len(rows), f"counter:{name}", name, "counter", unit=""))
    return rows
