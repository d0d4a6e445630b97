"""Helpers that name the source of events: grouping rows by key and finding their code locations.

Contract: pure functions over the Profile tables; `top_sources` returns the
most frequent source locations (nki_source_location, else hlo_name, else
layer) of a set of rows, most frequent first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.profile.codes import plain

SOURCE_COLUMNS = ("nki_source_location", "hlo_name", "layer")


def row_sources(table: pa.Table, rows: np.ndarray) -> list[str | None]:
    """The source location of each of `rows` (first non-null of SOURCE_COLUMNS)."""
    if rows.size == 0:
        return []
    picked = table.select(list(SOURCE_COLUMNS)).take(pa.array(rows))
    merged = pc.coalesce(*[plain(picked[c]) for c in SOURCE_COLUMNS])
    return merged.to_pylist()


def top_sources(table: pa.Table, rows: np.ndarray, limit: int = 3, sample: int = 20_000) -> list[str]:
    """Up to `limit` most frequent source locations among `rows` (a sample of at most `sample` rows)."""
    if rows.size > sample:
        rows = rows[np.linspace(0, rows.size - 1, sample).astype(np.int64)]
    counts = Counter(s for s in row_sources(table, rows) if s)
    return [s for s, _ in counts.most_common(limit)]


def top_per_group(
    group_of_row: np.ndarray, source_codes: np.ndarray, names: list[str], n_groups: int, limit: int = 3
) -> list[list[str]]:
    """Most frequent source names per group, vectorised: rows give their group index and source code (-1 = none)."""
    out: list[list[str]] = [[] for _ in range(n_groups)]
    if not names or source_codes.size == 0:
        return out
    keep = source_codes >= 0
    if not keep.all():  # no copies when every row has a source
        group_of_row, source_codes = group_of_row[keep], source_codes[keep]
    width = len(names)
    pair = group_of_row.astype(np.int64) * width
    pair += source_codes
    if n_groups * width <= 4_000_000:  # a dense count table: no sort
        dense = np.bincount(pair, minlength=n_groups * width)
        uniq = np.flatnonzero(dense)
        counts = dense[uniq]
    else:
        uniq, counts = np.unique(pair, return_counts=True)
    groups, srcs = uniq // width, uniq % width
    order = np.lexsort((srcs, -counts, groups))
    groups, srcs = groups[order], srcs[order]
    first = np.searchsorted(groups, groups, side="left")
    rank = np.arange(groups.size) - first
    for g, s in zip(groups[rank < limit].tolist(), srcs[rank < limit].tolist(), strict=True):
        out[g].append(names[s])
    return out


def coalesce_codes(encodings: Sequence[tuple[np.ndarray, Sequence[str | None]]]) -> tuple[np.ndarray, list[str]]:
    """Codes of the first non-null of several dictionary-encoded string columns (each as int32 codes, -1 for
    null, and its distinct values), numbered by first appearance: exactly what dictionary-encoding the
    coalesced strings gives (`nprof.analysis.facts.encode`), without decoding them. A value in several
    columns' dictionaries gets one code."""
    union: dict[str, int] = {}
    merged: np.ndarray | None = None
    for codes, names in encodings:
        lut = np.array([-1 if v is None else union.setdefault(v, len(union)) for v in names] + [-1], np.int64)
        mapped = lut[codes]  # code -1 (null) reads the last entry
        merged = mapped if merged is None else np.where(merged >= 0, merged, mapped)
    if merged is None or not union:
        return np.full(0 if merged is None else merged.size, -1, np.int32), []
    valid = merged >= 0
    first = np.full(len(union), merged.size, np.int64)  # each value's first row
    if valid.all():
        np.minimum.at(first, merged, np.arange(merged.size))
    else:
        np.minimum.at(first, merged[valid], np.flatnonzero(valid))
    seen = np.flatnonzero(first < merged.size)
    seen = seen[np.argsort(first[seen])]
    renumber = np.full(len(union) + 1, -1, np.int32)  # the last entry maps null (-1) to -1
    renumber[seen] = np.arange(seen.size)
    names_of = list(union)
    return renumber[merged], [names_of[k] for k in seen.tolist()]


def group_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group row positions by integer code (codes < 0 ignored).

    Returns (group_codes, offsets, rows): rows[offsets[i]:offsets[i+1]] are the
    positions (ascending) of the rows whose code is group_codes[i]. One stable radix sort on the
    narrowest key type (int8 for under 128 codes: one pass) plus one count per code; no gather of the
    sorted codes, and no filtering pass when no code is negative.
    """
    if codes.size == 0 or int(codes.max()) < 0:
        return np.empty(0, np.int64), np.zeros(1, np.int64), np.empty(0, np.int64)
    valid = np.flatnonzero(codes >= 0) if int(codes.min()) < 0 else None
    keys = codes if valid is None else codes[valid]
    top = int(keys.max())
    narrow = np.int8 if top < 128 else np.int16 if top < 32768 else None
    order = np.argsort(keys if narrow is None else keys.astype(narrow), kind="stable")
    if valid is not None:
        order = valid[order]
    counts = np.bincount(keys, minlength=top + 1)
    group_codes = np.flatnonzero(counts)
    offsets = np.zeros(group_codes.size + 1, np.int64)
    np.cumsum(counts[group_codes], out=offsets[1:])
    return group_codes.astype(np.int64), offsets, order.astype(np.int64, copy=False)


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_ns(ns: float) -> str:
    """1500 -> '1.50 us'."""
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.2f} us"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.3f} s"
