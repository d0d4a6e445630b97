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
the ingest frees the rest of a big profile before gathering the events. `event_columns(p)` is
`gather_events(event_sources(p))`: `event_sources` takes the arrays out of the profile (no table or
Facts kept), so the ingest frees the profile first and `gather_events` drops each source array once its
output column is made: the profile's columns give way to the event columns one by one. A column is gathered
GATHER_CHUNK output rows at a time (its codes looked up per slice: no full-size temporary), a numeric column
joined from its Arrow chunks only when it is gathered, and the memory each column frees is handed back to the
system at once (`tests/store/test_event_gather.py` holds chunked and whole gathers to an event-by-event
reference).

Speed: string columns are dictionary-encoded once per Profile, shared with the analysis
passes (`nprof.analysis.facts` caches the encodings on the Profile); the output columns
are gathered straight into preallocated arrays, table by table, when DMA queues and
tracks are distinct rows (the usual case): one pass per column, no concatenate + permute.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
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
    c, lut = coded(f, table, name, mapping, dtype)
    return lut[c]  # code -1 (null) reads the last entry; int32 indices directly (np.take would copy them to intp)


def coded(
    f: Facts, table: str, name: str, mapping: dict[str, int], dtype: npt.DTypeLike = np.int64
) -> tuple[np.ndarray, np.ndarray]:
    """`codes` unapplied: the column's own codes and the lookup table mapping them (`lut[c]` is `codes`)."""
    c, dictionary = f.column(table, name)
    return c, np.array([mapping.get(v, -1) for v in dictionary.to_pylist()] + [-1], dtype=dtype)


def uniques(f: Facts, *columns: tuple[str, str]) -> list[str]:
    """Sorted distinct non-null values of (table, column) string columns."""
    seen: set[str] = set()
    for table, name in columns:
        seen.update(v for v in f.column(table, name)[1].to_pylist() if v is not None)
    return sorted(seen)


def np_col(col: pa.ChunkedArray, dtype: npt.DTypeLike = np.int64) -> np.ndarray:
    return col.to_numpy().astype(dtype, copy=False) if len(col) else np.zeros(0, dtype=dtype)


Coded = tuple[np.ndarray, np.ndarray]  # a string column's codes and the lookup table mapping them (`coded`)
Index = slice | np.ndarray  # which rows of a table: a slice of it, or positions in it
Maker = Callable[[], Callable[[Index], np.ndarray]]  # a column's values at given rows, once its sources are ready
GATHER_CHUNK = 1 << 18  # output rows gathered at once: each column's temporaries (codes before lookup) stay this small


def _looked_up(c: Coded, ix: Index) -> np.ndarray:
    """`lut[codes[ix]]`; code -1 (null) reads the last entry; int32 indices directly (no intp copy)."""
    return c[1][c[0][ix]]


def _source_codes(nki: Coded, layer: Coded, ix: Index) -> np.ndarray:
    """Source line codes of rows `ix` from (codes, lut) pairs: nki_source_location, else layer, else -1."""
    out = _looked_up(nki, ix)
    if out.size and (out < 0).any():
        out = np.where(out < 0, _looked_up(layer, ix), out)
    return out


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
    """One source table's event columns in table order and its (row, ts) permutation. Holds no table: each
    column's source arrays (numpy views of the table's columns, string codes with their lookup tables) are taken
    out at construction and dropped when the column is made (`column`, `gather`), so the table's memory goes
    column by column once its other holders let go of it (the ingest frees the events profile before gathering).
    A column is gathered GATHER_CHUNK output rows at a time: no full-size temporary (gathered codes before their
    lookup, the layer fallback of `src`) beside the output."""

    def __init__(self, f: Facts, table: str, row: np.ndarray, maps: dict[str, dict[str, int]]) -> None:
        t: pa.Table = f.instructions if table == "instructions" else f.dma
        self.row, self.kind, self.n = row, ("ins" if table == "instructions" else "dma"), t.num_rows
        ts = np_col(t["ts"])
        self.order = _order(row, ts)
        self.src: dict[str, Maker] = {"ts": lambda: ts.__getitem__, **_sources(f, table, t, maps)}

    def column(self, name: str) -> np.ndarray:
        """Event column `name` of this table in table order; its sources are released (one call per name)."""
        out = np.empty(self.n, dtype=EVENT_DTYPES[name])
        self._fill(name, out, slice)
        return out

    def gather(self, name: str, out: np.ndarray) -> None:
        """Event column `name` of this table in (row, ts) order into `out`; its sources are released."""
        order = self.order
        self._fill(name, out, lambda a, b: slice(a, b) if order is None else order[a:b])

    def _fill(self, name: str, out: np.ndarray, index: Callable[[int, int], Index]) -> None:
        """out[a:b] = column `name` at rows index(a, b), chunk by chunk; a column the table lacks is filled."""
        fill = _constant(self.kind, name)
        if fill is not None:
            out.fill(fill)  # a column this table does not have: no array to permute
            return
        make = self.row.__getitem__ if name == "row" else self.src.pop(name)()
        for a in range(0, self.n, GATHER_CHUNK):
            b = min(a + GATHER_CHUNK, self.n)
            out[a:b] = make(index(a, b))


def _constant(kind: str, name: str) -> int | None:
    """The value of a column a table does not have (instructions move no bytes, DMA has no FLOPs or ... )."""
    if (name == "nbytes" and kind == "ins") or (name == "flops" and kind == "dma"):
        return 0
    return -1 if name == "tensor" and kind == "ins" else None


def _sources(f: Facts, table: str, t: pa.Table, maps: dict[str, dict[str, int]]) -> dict[str, Maker]:
    """Makers of the event columns of `table` (but ts and row) over arrays taken out of `t` and `f` now (each
    maker holds only its own sources). A numeric column stays Arrow's (its chunks, no copy) until its maker is
    called: a column of several chunks is joined then, while the gather needs it, not beside the whole table."""
    ins = table == "instructions"
    dur, ids, amount = t["duration"], t["id"], t["flops" if ins else "bytes"]
    op = coded(f, table, "opcode" if ins else "direction", maps["op"], np.int32)
    nki = coded(f, table, "nki_source_location", maps["src"], np.int32)
    layer = coded(f, table, "layer", maps["src"], np.int32)
    out: dict[str, Maker] = {
        "dur": lambda: np_col(dur).__getitem__,
        "id": lambda: np_col(ids).__getitem__,
        "flops" if ins else "nbytes": lambda: np_col(amount).__getitem__,
        "op": lambda: partial(_looked_up, op),
        "src": lambda: partial(_source_codes, nki, layer),
        "layer": lambda: partial(_looked_up, layer),
    }
    if not ins:
        tensor = coded(f, table, "tensor", maps["tensor"], np.int32)
        out["tensor"] = lambda: partial(_looked_up, tensor)
    return out


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


EventRows = tuple[list[RowInfo], dict[str, np.ndarray], list[str], list[str], list[str]]


class EventSources:
    """What `gather_events` reads of a profile (`event_sources`): the rows, code tables and each table's `_Part`,
    holding the column arrays but no table or Facts, so the profile can be freed before the gather."""

    def __init__(self, rows: list[RowInfo], parts: list[_Part], names: tuple[list[str], list[str], list[str]]) -> None:
        self.rows, self.parts, self.names = rows, parts, names


def event_columns(p: Profile) -> EventRows:
    """The event rows, columns and code tables of `p` (see the module doc)."""
    return gather_events(event_sources(p))


def event_sources(p: Profile) -> EventSources:
    """The arrays of `p` its event columns are made of (see `EventSources`)."""
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
    return EventSources(rows, [x for x in parts if x.n], (opnames, srcnames, tensornames))


def gather_events(src: EventSources) -> EventRows:
    """The event rows, columns and code tables of the profile `src` was taken from; each source array is
    dropped once its column is made and its memory handed back to the system (numpy views of Arrow buffers:
    Arrow's pool would keep it to the end otherwise), so the peak is the sources plus about one column, not
    the sources and the columns side by side (`src` is spent: a second gather raises KeyError)."""
    rows, parts, (opnames, srcnames, tensornames) = src.rows, src.parts, src.names
    n = sum(x.n for x in parts)
    if len(parts) == 2 and parts[1].row.max() < parts[0].row.min():
        parts = parts[::-1]  # DMA queues come first in display order: the two tables do not interleave
    elif len(parts) == 2 and not parts[0].row.max() < parts[1].row.min():
        return rows, _interleaved(parts, n), opnames, srcnames, tensornames
    cols, pool = {}, pa.default_memory_pool()
    for name, dt in EVENT_DTYPES.items():
        out = np.empty(n, dtype=dt)
        at = 0
        for x in parts:
            x.gather(name, out[at : at + x.n])
            at += x.n
        cols[name] = out
        pool.release_unused()  # the sources this column freed go back now (Arrow's allocator keeps them otherwise)
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
