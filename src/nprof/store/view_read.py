"""Reads shared by the viewport answers (`view`, `view_counters`): events of rows in a window, pixel columns.

Contract: `fetch_events(cur, rows, t0, t1, layer, tensor)` returns the events of `rows` overlapping [t0, t1) as
numpy columns sorted by (row, ts) (with `layer` / `tensor` when asked: stores that have those columns);
`px_group(starts, widths, t0, b, width)` the pixel of each item.
"""

from __future__ import annotations

import duckdb
import numpy as np


def fetch_events(
    cur: duckdb.DuckDBPyConnection, rows: list[dict], t0: int, t1: int, layer: bool = False, tensor: bool = False
) -> dict[str, np.ndarray]:
    """Events of `rows` overlapping [t0, t1), sorted by (row, ts).

    The scan starts at t0 minus the longest event of the rows read together, so rows whose
    longest event is far longer than the others' (a whole-run span on a CPU thread) are read
    on their own instead of widening every row's scan.
    """
    extra = (", layer" if layer else "") + (", tensor" if tensor else "")
    durs = sorted(int(r["max_dur"]) for r in rows)
    typical = durs[len(durs) // 2]
    together = [r for r in rows if int(r["max_dur"]) <= 4 * typical + 1024]
    batches = [together] + [[r] for r in rows if r not in together]
    parts = []
    for batch in batches:
        q = (
            "SELECT row, id, ts, dur, op, nbytes, flops{} FROM events WHERE row IN ({}) AND ts < ? AND ts >= ? "
            "AND (ts + dur > ? OR (dur = 0 AND ts >= ?))"
        ).format(extra, ",".join(str(int(r["row"])) for r in batch))
        maxdur = max(int(r["max_dur"]) for r in batch)
        parts.append(cur.execute(q, [t1, t0 - maxdur, t0, t0]).fetchnumpy())
    ev = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    row, ts = ev["row"], ev["ts"]
    if row.size > 1 and np.any(row[1:] < row[:-1]):  # batches interleave rows: regroup, keeping ts order
        order = np.argsort(row, kind="stable")
        ev = {k: v[order] for k, v in ev.items()}
        row, ts = ev["row"], ev["ts"]
    if row.size > 1 and np.any((ts[1:] < ts[:-1]) & (row[1:] == row[:-1])):  # scans return storage order
        order = np.lexsort((ts, row))
        ev = {k: v[order] for k, v in ev.items()}
    return ev


def px_group(starts: np.ndarray, widths: np.ndarray, t0: int, b: float, width: int) -> np.ndarray:
    """The pixel column (0..width-1) of each item's centre, at b ns per pixel from t0."""
    center = starts + widths / 2.0
    return np.clip(np.floor((center - t0) / b), 0, width - 1).astype(np.int64)
