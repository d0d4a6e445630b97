"""group_rows held to a plain per-code loop on random codes (narrow and wide codes, with and without -1)."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.analysis.sources import group_rows


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
