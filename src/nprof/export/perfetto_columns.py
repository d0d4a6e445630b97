"""Where the Perfetto writer reads event columns from: the whole table, or one contiguous batch of it.

Contract: both sources answer `numeric(name, rows)` (a numpy array for table
positions `rows`) and `strings(name, rows)` -> (codes, dictionary, values):
int32 codes into an Arrow `dictionary` (-1 = null) and, when the dictionary is
small, its values as Python strings (for per-sequence lookups). `TableColumns`
uses the profile-wide cached encodings (random access to any rows);
`BatchColumns` encodes one zero-copy slice [start, stop) of the table, so the
memory it needs is bounded by the batch, not by the profile.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.analysis.facts import Facts, encode_arrow, to_numpy

SMALL_DICTIONARY = 4096  # dictionaries up to this size are also given as Python strings


class TableColumns:
    """Columns of a whole profile table (cached encodings shared with the analysis)."""

    def __init__(self, f: Facts, table: str) -> None:
        self.f, self.table = f, table

    def numeric(self, name: str, rows: np.ndarray) -> np.ndarray:
        return self.f.column(self.table, name)[rows]

    def strings(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, pa.Array, list[str] | None]:
        codes, dictionary = self.f.column(self.table, name)
        return codes[rows], dictionary, None


class BatchColumns:
    """Columns of rows [start, stop) of a table, encoded on first use."""

    def __init__(self, table: pa.Table, start: int, stop: int) -> None:
        self.slice = table.slice(start, stop - start)
        self.start = start
        self._numeric: dict[str, np.ndarray] = {}
        self._strings: dict[str, tuple[np.ndarray, pa.Array, list[str] | None]] = {}

    def numeric(self, name: str, rows: np.ndarray) -> np.ndarray:
        if name not in self._numeric:
            col = self.slice[name]
            self._numeric[name] = to_numpy(col, bool if pa.types.is_boolean(col.type) else np.int64)
        return self._numeric[name][rows - self.start]

    def strings(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, pa.Array, list[str] | None]:
        if name not in self._strings:
            codes, dictionary = encode_arrow(self.slice[name])
            values = dictionary.to_pylist() if len(dictionary) <= SMALL_DICTIONARY else None
            self._strings[name] = (codes, dictionary, values)
        codes, dictionary, values = self._strings[name]
        return codes[rows - self.start], dictionary, values
