"""Event columns of a profile database: every instruction and DMA as integer columns sorted by (row, ts).

Contract: `event_columns(profile)` returns `(rows, cols, opnames, srcnames, tensornames)` where `rows`
are the event rows in display order (`nprof.store.rows.order_event_rows`), `cols` maps
row, ts, dur, id, op, nbytes, flops, src, layer, tensor to numpy arrays (int16 row, int32 codes,
int64 otherwise) sorted by (row, ts), ties in table order (instructions before DMA);
`op` codes index `opnames` (opcodes and DMA directions), `src`/`layer` index `srcnames`
(-1: none; `src` is nki_source_location, else layer), `tensor` indexes `tensornames` (the DMA's
`tensor`; -1: none, and for every instruction). `dma_slice(rows, cols)` selects the
events on DMA-queue rows: a slice when those rows are contiguous (always, in display order), else a mask.
`events_only(p)` is `p` cut to the columns `event_columns` reads (the same columns, so the same result):
the ingest frees the rest of a big profile before gathering the events.

Speed: string columns are dictionary-encoded once per Profile, shared with the analysis
passes (`nprof.analysis.facts` caches the encodings on the Profile); the output columns
are gathered straight into preallocated arrays, table by table, when DMA queues and
tracks are distinct rows (the usual case): one pass per column, no concatenate + permute.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from nprof.analysis.facts import Facts, facts
from nprof.profile import Profile
from nprof.store.rows import RowInfo, order_event_rows

EVENT_DTYPES: dict[str, Any] = {
    "row": np.int16,
    "ts": np.int64,
    "dur": np.int64,
    "id": np.int64,
    "op": np.int32,
    "nbytes": np.int64,
    "flops": np.int64,
    "src": np.int32,
    "layer": np.int32,
    "tensor": np.int32,
}


def codes(f: Facts, table: str, name: str, mapping: dict[str, int], dtype: npt.DTypeLike = np.int64) -> np.ndarray:
    """Map a string column of `table` (instructions or dma) to codes through `mapping` (null, unmapped -> -1)."""
    c, dictionary = f.column(table, name)
    lut = np.array([mapping.get(v, -1) for v in dictionary.to_pylist()] + [-1], dtype=dtype)
    return lut[c]  # code -1 (null) reads the last entry; int32 indices directly (np.take would copy them to intp)


def uniques(f: Facts, *columns: tuple[str, str]) -> list[str]:
    """Sorted distinct non-null values of (table, column) string columns."""
    seen: set[str] = set()
    for table, name in columns:
        seen.update(v for v in f.column(table, name)[1].to_pylist() if v is not None)
    return sorted(seen)


def np_col(col: pa.ChunkedArray, dtype: npt.DTypeLike = np.int64) -> np.ndarray:
    return col.to_numpy().astype(dtype, copy=False) if len(col) else np.zeros(0, dtype=dtype)


def _source_codes(f: Facts, table: str, src_of: dict[str, int]) -> np.ndarray:
    """Source line code: nki_source_location, else layer, else -1."""
    nki = codes(f, table, "nki_source_location", src_of, np.int32)
    if nki.size and (nki < 0).any():
        nki = np.where(nki < 0, codes(f, table, "layer", src_of, np.int32), nki)
    return nki


def _unsorted_within_rows(row: np.ndarray, ts: np.ndarray) -> bool:
    if row.size < 2:
        return False
    return bool(np.any((ts[1:] < ts[:-1]) & (row[1:] == row[:-1])))


def _order(row: np.ndarray, ts: np.ndarray) -> np.ndarray | None:
    """Permutation sorting one table's events by (row, ts) stably; None when already in that order."""
    if row.size < 2:
        return None
    if not np.any(row[1:] < row[:-1]):
        if not _unsorted_within_rows(row, ts):
            return None
        return np.lexsort((ts, row))
    by_row = np.argsort(row, kind="stable")  # radix sort on int16: keeps the table's ts order
    if _unsorted_within_rows(row[by_row], ts[by_row]):
        return np.lexsort((ts, row))
    return by_row


class _Part:
    """One source table's event columns (lazy, in table order) and its (row, ts) permutation."""

    def __init__(self, f: Facts, table: str, row: np.ndarray, maps: dict[str, dict[str, int]]) -> None:
        self.f, self.table, self.row, self.maps = f, table, row, maps
        self.t: pa.Table = f.instructions if table == "instructions" else f.dma
        self.kind, self.n = ("ins" if table == "instructions" else "dma"), self.t.num_rows
        self.order = _order(row, np_col(self.t["ts"]))

    def column(self, name: str) -> np.ndarray:
        t, dt = self.t, EVENT_DTYPES[name]
        if name == "row":
            return self.row
        if name in ("ts", "id"):
            return np_col(t[name], dt)
        if name == "dur":
            return np_col(t["duration"], dt)
        if name == "op":
            return codes(self.f, self.table, "opcode" if self.kind == "ins" else "direction", self.maps["op"], dt)
        if name == "src":
            return _source_codes(self.f, self.table, self.maps["src"])
        if name == "layer":
            return codes(self.f, self.table, "layer", self.maps["src"], dt)
        if name == "tensor":
            if self.kind == "ins":
                return np.full(self.n, -1, dtype=dt)
            return codes(self.f, self.table, "tensor", self.maps["tensor"], dt)
        if (name == "nbytes" and self.kind == "ins") or (name == "flops" and self.kind == "dma"):
            return np.zeros(self.n, dtype=dt)  # calloc: untouched pages, read as zeros
        return np_col(t["bytes" if name == "nbytes" else "flops"], dt)

    def gather(self, name: str, out: np.ndarray) -> None:
        if (name == "nbytes" and self.kind == "ins") or (name == "flops" and self.kind == "dma"):
            out.fill(0)  # a column this table does not have: no zeros array to permute
            return
        if name == "tensor" and self.kind == "ins":
            out.fill(-1)
            return
        src = self.column(name)
        if self.order is None:
            out[:] = src
        else:
            np.take(src, self.order, out=out, mode="clip")


EVENT_SOURCES = {  # the columns of each table `event_columns` reads
    "instructions": ("id", "ts", "duration", "track", "opcode", "nki_source_location", "layer", "flops"),
    "dma": ("id", "ts", "duration", "queue", "direction", "nki_source_location", "layer", "bytes", "tensor"),
}


def events_only(p: Profile) -> Profile:
    """`p` with only the instructions and dma columns `event_columns` reads (the same arrays, no copy) and
    empty collectives and counters: what the events need, so the rest of a big profile can be freed first."""
    return Profile(
        p.info,
        p.instructions.select(list(EVENT_SOURCES["instructions"])),
        p.dma.select(list(EVENT_SOURCES["dma"])),
        p.collectives.schema.empty_table(),
        p.counters.schema.empty_table(),
    )


def event_columns(p: Profile) -> tuple[list[RowInfo], dict[str, np.ndarray], list[str], list[str], list[str]]:
    """The event rows, columns and code tables of `p` (see the module doc)."""
    f = facts(p)
    rows = order_event_rows(set(uniques(f, ("instructions", "track"))), set(uniques(f, ("dma", "queue"))))
    row_of = {r.key: r.index for r in rows}
    opnames = uniques(f, ("instructions", "opcode"), ("dma", "direction"))
    srcnames = uniques(f, *((t, c) for t in ("instructions", "dma") for c in ("nki_source_location", "layer")))
    tensornames = uniques(f, ("dma", "tensor"))
    maps = {
        "op": {n: i for i, n in enumerate(opnames)},
        "src": {n: i for i, n in enumerate(srcnames)},
        "tensor": {n: i for i, n in enumerate(tensornames)},
    }
    parts = [
        _Part(f, "instructions", codes(f, "instructions", "track", row_of, np.int16), maps),
        _Part(f, "dma", codes(f, "dma", "queue", row_of, np.int16), maps),
    ]
    parts = [x for x in parts if x.n]
    n = sum(x.n for x in parts)
    if len(parts) == 2 and parts[1].row.max() < parts[0].row.min():
        parts.reverse()  # DMA queues come first in display order: the two tables do not interleave
    elif len(parts) == 2 and not parts[0].row.max() < parts[1].row.min():
        return rows, _interleaved(parts, n), opnames, srcnames, tensornames
    cols = {}
    for name, dt in EVENT_DTYPES.items():
        out = np.empty(n, dtype=dt)
        at = 0
        for x in parts:
            x.gather(name, out[at : at + x.n])
            at += x.n
        cols[name] = out
    return rows, cols, opnames, srcnames, tensornames


def _interleaved(parts: list[_Part], n: int) -> dict[str, np.ndarray]:
    """General case (a name is both a track and a DMA queue): concatenate, then sort by (row, ts)."""
    cols = {k: np.concatenate([x.column(k) for x in parts]) for k in EVENT_DTYPES}
    by_row = np.argsort(cols["row"], kind="stable")
    if _unsorted_within_rows(cols["row"][by_row], cols["ts"][by_row]):
        by_row = np.lexsort((cols["ts"], cols["row"]))
    return {k: v[by_row] for k, v in cols.items()}


def dma_slice(rows: list[RowInfo], cols: dict[str, np.ndarray]) -> slice | np.ndarray:
    """Where the DMA-queue events are: a slice when their rows are contiguous, else a boolean mask."""
    dma_rows = [r.index for r in rows if r.kind == "dma"]
    if not dma_rows:
        return slice(0, 0)
    lo, hi = min(dma_rows), max(dma_rows)
    if hi - lo + 1 == len(dma_rows):
        a, b = np.searchsorted(cols["row"], [lo, hi + 1], side="left")
        return slice(int(a), int(b))
    return np.isin(cols["row"], dma_rows)
