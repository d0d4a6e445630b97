"""numpy passes of the table checks: each says only "certainly passes", never refuses.

Contract: every function returns True only when the pyarrow.compute check it stands for in
`nprof.profile.validate` certainly passes on the same column, and False when it cannot tell
(nulls, a type it does not read, a value at or past the bound): the caller then runs the
pyarrow.compute check, which refuses with its own message. So a refusal and its message
always come from pyarrow.compute, and a table that passes needs no Arrow compute kernels:
importing a trace keeps `pyarrow.compute` (and the pages of libarrow_compute its kernel
registry touches) out of the process.
* `ints(col)`: the column as a numpy integer array when it is an integer column without
  nulls, else None.
* `within(col, lo, hi)`: every value in [lo, hi].
* `sum_below(col, limit)`: the float64 sum (what pc.sum of the column cast to float64 gives)
  is at most `limit`: decided when the numpy float64 sum is below limit * (1 - 2^-20), a margin
  far wider than both sums' rounding (< 2^-22 relative for under 2^30 non-negative values).
* `end_within(ts, duration, hi)`: every ts + duration <= hi (ts and duration already checked
  within [0, 2^53], so the int64 sums cannot wrap).
* `none_greater(a, b)`: no a > b; `all_finite(col)`: a float column without nulls, all finite.
* `all_in(col, values)`: every value of a plain string column is one of `values` (ASCII strings
  of at most 7 bytes), compared byte for byte from the column's own buffers: no Python string
  per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_MAX_ROWS = 1 << 30  # the sum's rounding bound below holds for fewer values


def _plain(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return col.to_numpy()


def ints(col: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """The column as an integer numpy array (see module doc), or None."""
    if col.null_count or not pa.types.is_integer(col.type):
        return None
    return _plain(col)


def within(col: pa.ChunkedArray | pa.Array, lo: int, hi: int) -> bool:
    """Every value certainly in [lo, hi] (see module doc)."""
    v = ints(col)
    return v is not None and (not v.size or (int(v.min()) >= lo and int(v.max()) <= hi))


def sum_below(col: pa.ChunkedArray | pa.Array, limit: float) -> bool:
    """The float64 sum certainly at most `limit` (see module doc); the values must be non-negative."""
    v = ints(col)
    if v is None or v.size >= _MAX_ROWS or (v.size and int(v.min()) < 0):
        return False
    return float(np.add.reduce(v, dtype=np.float64)) <= limit * (1 - 2.0**-20)


def end_within(ts: pa.ChunkedArray, duration: pa.ChunkedArray, hi: int) -> bool:
    """Every ts + duration certainly <= hi (see module doc)."""
    t, d = ints(ts), ints(duration)
    if t is None or d is None:
        return False
    return not t.size or int(np.add(t, d, dtype=np.int64).max()) <= hi


def none_greater(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """No value of `a` greater than the one of `b` in its row (integer columns without nulls)."""
    x, y = ints(a), ints(b)
    return x is not None and y is not None and not bool(np.any(x > y))


def all_finite(col: pa.ChunkedArray | pa.Array) -> bool:
    """A float column without nulls whose values are all finite."""
    if col.null_count or not pa.types.is_floating(col.type):
        return False
    return bool(np.all(np.isfinite(_plain(col))))


def _keys(offsets: np.ndarray, data: np.ndarray, width: int) -> np.ndarray:
    """One uint64 per string: its first `width` (<= 7) bytes and, in the top byte, its length."""
    lengths = np.diff(offsets)
    key = lengths.astype(np.uint64) << np.uint64(56)
    if not data.size:
        return key
    for k in range(width):
        has = lengths > k
        byte = data[np.where(has, offsets[:-1] + k, 0)].astype(np.uint64)
        key |= (byte * has) << np.uint64(8 * k)
    return key


def all_in(col: pa.ChunkedArray, values: tuple[str, ...]) -> bool:
    """Every value certainly one of `values` (see module doc)."""
    encoded = [v.encode() for v in values]
    width = max((len(v) for v in encoded), default=0)
    if col.null_count or col.type != pa.string() or width > 7 or any(not v.isascii() for v in values):
        return False
    bounds = np.array([0, *np.cumsum([len(v) for v in encoded])])
    wanted = _keys(bounds, np.frombuffer(b"".join(encoded), np.uint8), width)
    for chunk in col.chunks:
        n = len(chunk)
        if not n:
            continue
        buffers = chunk.buffers()
        offsets = np.frombuffer(buffers[1], np.int32, n + 1, chunk.offset * 4)
        data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.empty(0, np.uint8)
        if int(np.diff(offsets).max()) > width:
            return False
        if not bool(np.all(np.isin(_keys(offsets, data, width), wanted))):
            return False
    return True
