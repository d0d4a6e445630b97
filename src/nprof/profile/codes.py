"""String columns read dictionary-encoded from a Profile file, their codes kept for the analysis.

Contract:
* `read_strings(box, name, schema)` reads table `name` of an opened profile container with every
  string column of `schema` decoded from its Parquet dictionary pages (no hash of each value):
  returns the table with plain string columns (the dictionary values gathered by index, the same
  values as a plain read) and, per such column, `(codes, dictionary)`: int32 codes (-1 for null)
  into the Arrow string array `dictionary`, whose values are distinct and in order of first
  appearance: exactly what `nprof.analysis.facts.encode_arrow` computes from the plain column.
  A column whose dictionary repeats a value (a foreign writer) gets no codes.
  `encoded=True`: the string columns that get codes stay Arrow dictionary arrays (one chunk whose
  indices are the codes' own memory, nulls masked; the same values; no plain strings built) for a
  reader that goes through the codes (the store's ingest: `Profile.load(path, encoded=True)`);
  `plain(col)` decodes one such column.
* `remember(table, codes)` / `recall(table, column)`: codes of a table object, kept while the
  object lives (Arrow tables are immutable: the same object always holds the same values);
  `recall` returns None for any other table, so a Profile rebuilt with other tables never
  sees stale codes; `carry(old, new)` gives a column subset of `old` the codes of its columns.
"""

from __future__ import annotations

import weakref
from functools import partial

import numpy as np
import pyarrow as pa

from nprof.container import Container

Codes = tuple[np.ndarray, pa.Array]
_KEPT: dict[int, tuple[weakref.ref[pa.Table], dict[str, Codes]]] = {}


def _indices(col: pa.ChunkedArray) -> np.ndarray:
    """int32 indices of a dictionary column with a single dictionary per chunk set, -1 for nulls."""
    parts = [c.indices.fill_null(-1) if c.null_count else c.indices for c in col.chunks]
    arrays = [p.to_numpy(zero_copy_only=False) for p in parts]
    if not arrays:
        return np.empty(0, np.int32)
    return (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)).astype(np.int32, copy=False)


def decoded(col: pa.ChunkedArray, encoded: bool = False) -> tuple[pa.ChunkedArray, Codes | None]:
    """A dictionary column as plain strings (`encoded`: as one unified dictionary column when its
    dictionary values are distinct), plus its codes when they are."""
    import pyarrow.compute as pc  # here, not at module level: importing a trace needs no Arrow compute

    unified = col.unify_dictionaries()
    dictionary = unified.chunk(0).dictionary if unified.num_chunks else pa.array([], pa.string())
    indices = pa.chunked_array([c.indices for c in unified.chunks], pa.int32())
    if pc.count_distinct(dictionary, mode="all").as_py() != len(dictionary):
        return pc.take(dictionary, indices), None
    codes = _indices(unified)
    if not encoded:
        return pc.take(dictionary, indices), (codes, dictionary)
    shared = pa.array(codes, mask=codes < 0) if unified.null_count else pa.array(codes)  # the codes' own memory
    return pa.chunked_array([pa.DictionaryArray.from_arrays(shared, dictionary)]), (codes, dictionary)


def plain(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string column as plain strings: a dictionary column decoded, any other returned as is."""
    return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col


def read_strings(
    box: Container, name: str, schema: pa.Schema, encoded: bool = False, columns: list[str] | None = None
) -> tuple[pa.Table, dict[str, Codes]]:
    """Table `name` of `box` (only `columns`, when given) with its string columns decoded from their
    dictionaries, or kept as dictionary columns where `encoded` and their values are distinct (see module doc)."""
    wanted = [f.name for f in schema if pa.types.is_string(f.type)]
    raw = box.read_table(name, columns=columns, dictionary=wanted)
    codes: dict[str, Codes] = {}
    for column in wanted:
        i = raw.schema.get_field_index(column)
        if i < 0 or not pa.types.is_dictionary(raw.schema.field(i).type):
            continue
        values, got = decoded(raw.column(i), encoded)
        raw = raw.set_column(i, raw.schema.field(i).with_type(values.type), values)
        if got is not None:
            codes[column] = got
    return raw, codes


def plain_table(table: pa.Table) -> pa.Table:
    """`table` with its dictionary columns decoded (`plain`); the same object when it has none."""
    dicts = [i for i, f in enumerate(table.schema) if pa.types.is_dictionary(f.type)]
    for i in dicts:
        col = plain(table.column(i))
        table = table.set_column(i, table.schema.field(i).with_type(col.type), col)
    return table


def as_plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every dictionary column typed as its value type (what `plain` makes of it)."""
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema])


def _forget(key: int, _ref: object) -> None:
    _KEPT.pop(key, None)


def remember(table: pa.Table, codes: dict[str, Codes]) -> None:
    """Keep `codes` (column -> (codes, dictionary)) for as long as `table` lives."""
    if codes:
        _KEPT[id(table)] = (weakref.ref(table, partial(_forget, id(table))), codes)


def recall(table: pa.Table, column: str) -> Codes | None:
    """The remembered codes of `column` of this very table object, else None."""
    hit = _KEPT.get(id(table))
    if hit is None or hit[0]() is not table:
        return None
    return hit[1].get(column)


def carry(old: pa.Table, new: pa.Table) -> pa.Table:
    """`new`, a column subset of `old` (the same arrays), remembering `old`'s codes of the columns it kept."""
    hit = _KEPT.get(id(old))
    if hit is not None and hit[0]() is old:
        remember(new, {c: v for c, v in hit[1].items() if c in new.column_names})
    return new
