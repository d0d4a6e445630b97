"""`chrome_rows.pair_codes` (integer codes instead of a (pid, tid) tuple per slice) against a dict of tuples."""

from __future__ import annotations

import random

import pytest

from nprof.capture.chrome_rows import pair_codes


@pytest.mark.parametrize("seed", range(20))
def test_pair_codes_tell_apart_what_a_dict_of_pairs_does(seed: int) -> None:
    """Equal values of other types (1, 1.0, True) are one pid, as in a dict; each code's first slice is the first
    slice of that pair; codes follow the pairs' order of first appearance."""
    rng = random.Random(seed)
    values = [1, 1.0, True, 2, "2", None, 0, "main", 7.5]
    n = rng.randrange(0, 200)
    pids = [rng.choice(values[: rng.randrange(1, len(values) + 1)]) for _ in range(n)]
    tids = [rng.choice(values) for _ in range(n)]
    codes, first = pair_codes(pids, tids)
    reference: dict[tuple, int] = {}
    firsts: list[int] = []
    for i, key in enumerate(zip(pids, tids, strict=True)):
        if key not in reference:
            reference[key] = len(reference)
            firsts.append(i)
    want = [reference[k] for k in zip(pids, tids, strict=True)]
    relabel = {c: want[first[c]] for c in range(len(first))}  # np.unique numbers pairs by value, not order
    assert [relabel[c] for c in codes.tolist()] == want
    assert sorted(first) == firsts
