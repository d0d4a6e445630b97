"""Interval helpers against brute force on small random intervals."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof.analysis import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=12)


def _covered(pairs: list[tuple[int, int]]) -> set[int]:
    return {t for s, d in pairs for t in range(s, s + d)}


@settings(max_examples=80, deadline=None)
@given(spans, spans)
def test_against_brute_force(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    sa = np.array([s for s, _ in a], np.int64)
    ea = sa + np.array([d for _, d in a], np.int64)
    sb = np.array([s for s, _ in b], np.int64)
    eb = sb + np.array([d for _, d in b], np.int64)
    ca, cb = _covered(a), _covered(b)
    ma, mb = iv.merge(sa, ea), iv.merge(sb, eb)
    assert iv.union_length(sa, ea) == len(ca)
    assert np.all(ma[1][:-1] < ma[0][1:])  # disjoint, sorted, not touching
    assert iv.intersection_length(ma, mb) == len(ca & cb)
    cov = iv.coverage(ma, sb, eb)
    assert cov.tolist() == [len(ca & set(range(s, s + d))) for s, d in b]
    alone = iv.within_gaps(ma, sb, eb)
    # an instant (d == 0) inside a busy interval counts as overlapped
    assert alone.tolist() == [not (ca & set(range(s, s + d))) if d else s not in ca for s, d in b]
    g0, g1 = iv.gaps(ma, 0, 80)
    assert {t for x, y in zip(g0, g1, strict=True) for t in range(x, y)} == set(range(80)) - ca


def _merge_by_start_order(start: np.ndarray, end: np.ndarray) -> tuple[list[int], list[int]]:
    """Reference merge: intervals in start order, each extends the current block or opens a new one."""
    out_s: list[int] = []
    out_e: list[int] = []
    for s, e in sorted((int(s), int(e)) for s, e in zip(start, end, strict=True) if e > s):
        if out_s and s <= out_e[-1]:
            out_e[-1] = max(out_e[-1], e)
        else:
            out_s.append(s)
            out_e.append(e)
    return out_s, out_e


def test_merge_matches_start_order_reference_on_random_intervals() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(0, 200))
        start = rng.integers(-50, 2000, n)
        if trial % 3 == 0:
            start = np.sort(start)  # the sorted path
        end = start + rng.integers(-5, 120, n)  # empty and reversed intervals included
        s, e = iv.merge(start, end)
        assert (s.tolist(), e.tolist()) == _merge_by_start_order(start, end)


def test_merge_by_end_matches_start_order_reference_on_end_sorted_intervals() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(0, 200))
        end = np.sort(rng.integers(-50, 2000, n))  # the contract: ends in order, starts anywhere before them
        start = end - rng.integers(-5, 150 if rng.random() < 0.5 else 8, n)  # empty and reversed ones dropped
        s, e = iv.merge_by_end(start, end)
        assert (s.tolist(), e.tolist()) == _merge_by_start_order(start, end)
