"""`chrome_tree.Context.innermost` (a step at a time over all queries) against its plain per-span loop;
`chrome_tree.pair_codes` (integer codes instead of a (pid, tid) tuple per slice) against a dict of tuples."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nprof.capture.chrome_tree import Context, pair_codes


@pytest.mark.parametrize("seed", range(30))
def test_innermost_matches_the_plain_loop(seed: int) -> None:
    """Context slices on a few tracks with nestings, ties, zero lengths and overruns (a ProfilerStep opened
    inside a short frame); query spans anywhere, some outside every context slice."""
    rng = np.random.default_rng(seed)
    n, q = int(rng.integers(0, 300)), int(rng.integers(0, 300))
    track = rng.integers(0, 3, n).astype(np.int64)
    start = rng.integers(0, 2 * n + 2, n).astype(np.int64)
    end = start + rng.choice([0, 1, 3, 20, 200, 5000], n)
    ctx = Context(["f"] * n, track, start, end)
    q_track = rng.integers(0, 4, q).astype(np.int64)
    q_start = rng.integers(0, 2 * n + 50, q).astype(np.int64)
    q_end = q_start + rng.choice([0, 1, 5, 50, 400], q)
    if n:  # half the queries end where a context slice ends (containment is `end >= query end`)
        pick = rng.integers(0, n, q)
        same = rng.random(q) < 0.5
        q_track[same], q_end[same] = track[pick[same]], end[pick[same]]
        q_start[same] = np.minimum(q_start[same], q_end[same])
    assert ctx.innermost(q_track, q_start, q_end) == ctx.python_innermost(q_track, q_start, q_end)


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
