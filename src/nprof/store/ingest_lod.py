"""Level-of-detail table of a profile database: per-row bucket pyramids built from the event columns.

Contract: `lod_table(rows, cols, span, dma_total_row)` takes the event rows and columns of
`nprof.store.ingest_events.event_columns` (sorted by row, ts) and returns the `lod` table
(LOD_SCHEMA, sorted by level, row, bucket) plus per-row stats (count, max_dur, first_ts,
last_end, base_level) by row index. Each row's pyramid starts at its own base level (about
8 events per bucket, `nprof.store.lod.base_level_for`); under `dma_total_row` goes the
pyramid of all DMA queues together (for the DMA counters), the only row with `peak`/`peak_rate`
(exact per-bucket maxima, `nprof.store.lod.peaks`; null elsewhere). Sequential: building that one
on a second thread was measured slower (both cores are already busy with DuckDB's writes).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.store.ingest_events import dma_slice
from nprof.store.lod import base_level_for, row_pyramid
from nprof.store.rows import RowInfo

LOD_SCHEMA = pa.schema(
    [
        ("level", pa.int8()),
        ("row", pa.int16()),
        ("bucket", pa.int64()),
        ("count", pa.int32()),
        ("busy", pa.int64()),
        ("op", pa.int32()),
        ("nbytes", pa.float64()),
        ("flops", pa.float64()),
        ("peak", pa.int32()),  # most events in flight at one instant: only on the all-DMA-queues row, else null
        ("peak_rate", pa.float64()),  # highest summed bytes/ns at one instant: idem
    ]
)


def lod_table(
    rows: list[RowInfo], cols: dict[str, np.ndarray], span: int, dma_total_row: int | None = None
) -> tuple[pa.Table, dict[int, dict[str, int]]]:
    """Per-row pyramids, each from its own base level (about 8 events per bucket on that row), plus,
    under `dma_total_row`, the pyramid of all DMA queues together (for the DMA counters; see the module doc).
    Returns the table and per-row stats (count, max_dur, first_ts, last_end, base_level) by row index."""
    parts: dict[int, list[pa.Table]] = {}
    stats: dict[int, dict[str, int]] = {}
    _row_pyramids(rows, cols, span, parts, stats)
    if dma_total_row is not None:
        dma = dma_slice(rows, cols)
        n_dma = dma.stop - dma.start if isinstance(dma, slice) else int(dma.sum())
        base = base_level_for(span, n_dma)
        stats[dma_total_row] = {"count": 0, "max_dur": 0, "first_ts": 0, "last_end": 0, "base_level": base}
        if n_dma:
            ts, dur, op, nbytes, flops = (cols[k][dma] for k in ("ts", "dur", "op", "nbytes", "flops"))
            _add_pyramid(parts, dma_total_row, ts, dur, op, nbytes, flops, base, span, with_peaks=True)
    tables = [t for level in sorted(parts) for t in sorted(parts[level], key=lambda t: t["row"][0].as_py())]
    return (pa.concat_tables(tables) if tables else LOD_SCHEMA.empty_table()), stats


def _row_pyramids(
    rows: list[RowInfo],
    cols: dict[str, np.ndarray],
    span: int,
    parts: dict[int, list[pa.Table]],
    stats: dict[int, dict[str, int]],
) -> None:
    bounds = np.searchsorted(cols["row"], np.arange(len(rows) + 1), side="left")
    for r in rows:
        lo, hi = int(bounds[r.index]), int(bounds[r.index + 1])
        sl = slice(lo, hi)
        dur = cols["dur"][sl]
        ts = cols["ts"][sl]
        base = base_level_for(span, hi - lo)
        stats[r.index] = {
            "count": hi - lo,
            "max_dur": int(dur.max()) if hi > lo else 0,
            "first_ts": int(ts[0]) if hi > lo else 0,
            "last_end": int((ts + dur).max()) if hi > lo else 0,
            "base_level": base,
        }
        if hi > lo:
            _add_pyramid(parts, r.index, ts, dur, cols["op"][sl], cols["nbytes"][sl], cols["flops"][sl], base, span)


def _add_pyramid(
    parts: dict[int, list[pa.Table]],
    row: int,
    ts: np.ndarray,
    dur: np.ndarray,
    op: np.ndarray,
    nbytes: np.ndarray,
    flops: np.ndarray,
    base: int,
    span: int,
    with_peaks: bool = False,
) -> None:
    for level, idx, b in row_pyramid(ts, dur, op, nbytes, flops, base, span, with_peaks):
        if idx.size:
            peak = pa.nulls(idx.size, pa.int32()) if b.peak is None else pa.array(b.peak.astype(np.int32))
            rate = pa.nulls(idx.size, pa.float64()) if b.peak_rate is None else pa.array(b.peak_rate)
            parts.setdefault(level, []).append(
                pa.table(
                    {
                        "level": pa.array(np.full(idx.size, level, dtype=np.int8)),
                        "row": pa.array(np.full(idx.size, row, dtype=np.int16)),
                        "bucket": pa.array(idx.astype(np.int64)),
                        "count": pa.array(b.count.astype(np.int32)),
                        "busy": pa.array(b.busy),
                        "op": pa.array(b.op.astype(np.int32)),
                        "nbytes": pa.array(b.nbytes),
                        "flops": pa.array(b.flops),
                        "peak": peak,
                        "peak_rate": rate,
                    }
                )
            )
