"""group_rows held to a plain per-code loop on random codes (narrow and wide codes, with and without -1);
coalesce_codes held to encoding the coalesced strings."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nprof.analysis.facts import encode
from nprof.analysis.sources import coalesce_codes, group_rows
from nprof.profile.codes import plain


def _reference(codes: np.ndarray) -> tuple[list[int], list[list[int]]]:
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(codes.tolist()):
        if c >= 0:
            groups.setdefault(c, []).append(i)
    keys = sorted(groups)
    return keys, [groups[k] for k in keys]


@pytest.mark.parametrize("seed", range(12))
def test_group_rows_matches_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    top = [3, 127, 128, 300, 40_000][seed % 5]
    codes = rng.integers(-1 if seed % 2 else 0, top, n).astype([np.int32, np.int64][seed % 3 == 0])
    group_codes, offsets, rows = group_rows(codes)
    keys, members = _reference(codes)
    assert group_codes.tolist() == keys
    assert offsets[0] == 0 and offsets.size == len(keys) + 1
    assert [rows[offsets[g] : offsets[g + 1]].tolist() for g in range(len(keys))] == members
    assert group_codes.dtype == offsets.dtype == rows.dtype == np.int64


def test_group_rows_of_nothing() -> None:
    for codes in (np.empty(0, np.int32), np.full(5, -1, np.int32)):
        group_codes, offsets, rows = group_rows(codes)
        assert group_codes.size == 0 and offsets.tolist() == [0] and rows.size == 0


@pytest.mark.parametrize("seed", range(30))
def test_coalesced_codes_equal_encoding_the_coalesced_strings(seed: int) -> None:
    """`coalesce_codes` on the columns' own encodings (plain, several chunks, or dictionary columns whose
    dictionaries hold unused and shared values) is held to dictionary-encoding the coalesced strings."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    pool = [f"k.py:{i}" for i in range(6)] + [f"layer.{i}" for i in range(3)]

    def column() -> pa.ChunkedArray:
        values = [None if rng.random() < 0.4 else pool[int(k)] for k in rng.integers(0, len(pool), n)]
        cut = int(rng.integers(0, n + 1))
        chunks = [pa.array(values[:cut], pa.string()), pa.array(values[cut:], pa.string())]
        if rng.random() < 0.5:  # a dictionary column as read from a file, its dictionary in another order
            dictionary = pa.array(list(rng.permutation(pool)), pa.string())
            chunks = [pa.DictionaryArray.from_arrays(pc.index_in(c, dictionary), dictionary) for c in chunks]
        return pa.chunked_array(chunks)

    cols = [column() for _ in range(int(rng.integers(1, 4)))]
    encodings = []
    for c in cols:
        if pa.types.is_dictionary(c.type):  # the file's codes, as `Facts.column` recalls them
            merged = c.unify_dictionaries()
            codes = np.concatenate([x.indices.fill_null(-1).to_numpy() for x in merged.chunks] or [np.empty(0)])
            encodings.append((codes.astype(np.int32), merged.chunk(0).dictionary.to_pylist()))
        else:
            encodings.append(encode(c))
    plain_cols = [plain(c) for c in cols]
    want_codes, want_names = encode(pc.coalesce(*plain_cols) if len(cols) > 1 else plain_cols[0])
    got_codes, got_names = coalesce_codes(encodings)
    assert got_names == want_names and got_codes.tolist() == want_codes.tolist()
