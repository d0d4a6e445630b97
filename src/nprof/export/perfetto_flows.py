"""Dependency edges for Perfetto flow arrows (`--show-perfetto-flows`).

Contract: `Flows(profile)` numbers every dependency edge (an id in an event's
`deps` that names an existing event) from 1 in table order (instructions, then
DMA); `outgoing(event_ids)` gives, per event, the edges leaving it (it is their
source) and `incoming(table, rows)` the edges arriving at each row of `table`,
both as (uint64 flow ids, int64 offsets[n+1]) ragged arrays. Memory: O(edges).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.analysis.facts import facts
from nprof.profile import Profile


def _list_parts(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        arr = arr.fill_null(pa.scalar([], arr.type))
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False).astype(np.int64)
    return offsets, values[offsets[0] : offsets[-1]] if offsets.size else values[:0]


def _ragged(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions starts[i] .. starts[i]+counts[i]-1 for every i, and the row of each position."""
    total = int(counts.sum())
    row_of = np.repeat(np.arange(counts.size), counts)
    first = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    within = np.arange(total) - np.repeat(first, counts)
    return np.repeat(starts, counts) + within, row_of


def _offsets(row_of: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(row_of, minlength=n), out=out[1:])
    return out


class Flows:
    """Dependency edges of a profile (see module doc)."""

    def __init__(self, profile: Profile) -> None:
        f = facts(profile)
        known = np.sort(np.concatenate([f.i_id, f.d_id]))
        self.tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        sources, edge_ids = [], []
        base = 0
        for name in ("instructions", "dma"):
            offsets, values = _list_parts(profile.table(name)["deps"])
            offsets = offsets - offsets[0] if offsets.size else np.zeros(1, np.int64)
            pos = np.searchsorted(known, values)
            valid = (
                (pos < known.size) & (known[np.minimum(pos, max(known.size - 1, 0))] == values)
                if known.size
                else (np.zeros(values.size, bool))
            )
            eids = (base + np.arange(values.size) + 1).astype(np.uint64)
            self.tables[name] = (offsets, valid, eids)
            sources.append(values[valid])
            edge_ids.append(eids[valid])
            base += values.size
        src = np.concatenate(sources)
        order = np.argsort(src, kind="stable")
        self.src_sorted = src[order]
        self.eid_by_src = np.concatenate(edge_ids)[order]

    def outgoing(self, event_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flow ids leaving each event (it is the dependency of a later event)."""
        lo = np.searchsorted(self.src_sorted, event_ids, side="left")
        hi = np.searchsorted(self.src_sorted, event_ids, side="right")
        pos, row_of = _ragged(lo, hi - lo)
        return self.eid_by_src[pos], _offsets(row_of, event_ids.size)

    def incoming(self, table: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flow ids arriving at each of `rows` of `table` (one per valid dependency)."""
        offsets, valid, eids = self.tables[table]
        pos, row_of = _ragged(offsets[rows], offsets[rows + 1] - offsets[rows])
        keep = valid[pos]
        return eids[pos[keep]], _offsets(row_of[keep], rows.size)
