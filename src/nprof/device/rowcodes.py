"""Dense codes of equal rows of integer columns, numbered in order of first occurrence, in C-level passes.

Contract: `row_codes(columns) -> (codes, first)`: for equal-length int64 arrays `columns` (the row `i` is
`tuple(c[i] for c in columns)`), `codes[i]` numbers row i's value in order of first occurrence (0, 1, ...)
and `first[k]` is the index of the first row with code k (ascending). Exact: the columns are first packed
losslessly into as few 63-bit words as their value ranges allow (`pack`); one word is dictionary-encoded by
Arrow as it is (first-occurrence order). Several words are hashed into one 64-bit key per row (a splitmix64
mix), the keys dictionary-encoded, and every word then checked against its code's first row; if two
different rows share a key (astronomically unlikely), the codes are recomputed by sorting the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_GOLDEN, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place."""
    h ^= h >> np.uint64(30)
    h *= _M1
    h ^= h >> np.uint64(27)
    h *= _M2
    h ^= h >> np.uint64(31)
    return h


def row_hash(columns: Sequence[np.ndarray], n: int) -> np.ndarray:
    """One uint64 key per row (equal rows, equal keys)."""
    h = np.full(n, 0x2545F4914F6CDD1D, np.uint64)
    with np.errstate(over="ignore"):
        for c in columns:
            h += np.asarray(c, np.int64).view(np.uint64) + _GOLDEN
            _mix(h)
    return h


def _first_occurrence(codes: np.ndarray) -> np.ndarray:
    """Indices where a first-occurrence-numbered code appears for the first time."""
    if not len(codes):
        return np.zeros(0, np.int64)
    new = np.empty(len(codes), bool)
    new[0] = True
    np.greater(codes[1:], np.maximum.accumulate(codes)[:-1], out=new[1:])
    return np.flatnonzero(new)


def _exact(columns: Sequence[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The same codes by sorting the rows (the collision fallback)."""
    rows = np.stack([np.asarray(c, np.int64) for c in columns], axis=1) if columns else np.zeros((n, 1), np.int64)
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    order = np.argsort(first, kind="stable")
    rank[order] = np.arange(len(first))
    return rank[inverse.reshape(-1)], first[order]


def pack(columns: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Int64 words holding the columns losslessly (equal rows, equal words, and conversely): each column
    shifted to start at 0 takes the bits of its range, and consecutive columns share a word up to 63 bits."""
    words: list[np.ndarray] = []
    word: np.ndarray | None = None
    used = 0
    for c in columns:
        c = np.asarray(c, np.int64)
        lo, hi = int(c.min()), int(c.max())
        if lo == hi:
            continue  # a constant column tells no rows apart
        bits = (hi - lo).bit_length()
        if bits > 62:  # a full-range column is its own word
            words.append(c)
            continue
        if word is None or used + bits > 63:
            if word is not None:
                words.append(word)
            word, used = c - lo, bits
        else:
            word = (word << bits) | (c - lo)
            used += bits
    if word is not None:
        words.append(word)
    return words


def _encode(keys: np.ndarray) -> np.ndarray:
    """First-occurrence codes of one key per row (Arrow's hash table)."""
    return pc.dictionary_encode(pa.array(keys)).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def row_codes(
    columns: Sequence[np.ndarray], n: int | None = None, hasher: Callable[..., np.ndarray] = row_hash
) -> tuple[np.ndarray, np.ndarray]:
    """(codes, first) of the rows of `columns` (see module doc); `n` rows when there are no columns."""
    n = len(columns[0]) if columns else int(n or 0)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    words = pack(columns)
    if not words:  # every row equal
        return np.zeros(n, np.int64), np.zeros(1, np.int64)
    if len(words) == 1 and hasher is row_hash:
        codes = _encode(words[0])
        return codes, _first_occurrence(codes)
    codes = _encode(hasher(words, n))
    first = _first_occurrence(codes)
    rep = first[codes]
    for w in words:
        if not np.array_equal(w, w[rep]):
            return _exact(words, n)
    return codes, first


def padded(offsets: np.ndarray, *values: np.ndarray) -> list[np.ndarray]:
    """Key columns of CSR lists: each row's length, then for every position k < the longest, each of `values`'
    k-th item of the row (0 past its end; the length keeps rows of different lengths apart)."""
    count = np.diff(offsets)
    out = [count]
    total = len(values[0]) if values else 0
    for k in range(int(count.max()) if len(count) and total else 0):
        has = count > k
        at = np.minimum(offsets[:-1] + k, total - 1)
        out += [np.where(has, v[at], 0) for v in values]
    return out
