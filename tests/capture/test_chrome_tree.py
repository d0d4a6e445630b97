"""`chrome_tree.Context.innermost` (a step at a time over all queries) against its plain per-span loop;
`chrome_tree.pair_codes` (integer codes instead of a (pid, tid) tuple per slice) against a dict of tuples;
`Context.info` against its plain recursive definition."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from nprof.capture.chrome_tree import Context, pair_codes, user_frame


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


_CTX_NAMES = [
    "nn.Module: Linear_0", "nn.Module: Sequential", "nprof.module: blocks.3", "nprof.src: train.py:12",
    "train.py(40): step", "/home/u/model.py(7): forward", "torch/nn/modules/linear.py(116): forward",
    "/usr/lib/python3.11/site-packages/x.py(3): f", "ProfilerStep#4", "ProfilerStep#12", "Optimizer.step#SGD.step",
    "<built-in method addmm>",
]  # fmt: skip


def _plain_info(ctx: Context, c: int) -> tuple[str | None, str | None, int, bool]:
    """`Context.info` by its definition: the parent's info, updated by the slice's own name."""
    if c < 0:
        return None, None, 0, False
    layer, source, iteration, explicit = _plain_info(ctx, ctx.parent[c])
    name = ctx.names[c]
    if name.startswith("nn.Module: "):
        layer = f"{layer}.{name[11:]}" if layer else name[11:]
    elif name.startswith("nprof.module: "):
        layer = name[14:]
    elif name.startswith("nprof.src: "):
        source, explicit = name[11:], True
    elif not explicit and (frame := user_frame(name)):
        source = frame
    elif (step := re.match(r"^ProfilerStep#(\d+)$", name)) is not None:
        iteration = int(step.group(1))
    return layer, source, iteration, explicit


@pytest.mark.parametrize("seed", range(12))
def test_info_matches_its_plain_definition(seed: int) -> None:
    """`Context.info` (memoised up the parents, each name classified once) against the plain recursion, on
    nested context slices with module, source, frame and step names, queried in random order."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([0, 1, 30, 600]))
    track = rng.integers(0, 2, n).astype(np.int64)
    start = rng.integers(0, 4 * n + 2, n).astype(np.int64)
    end = start + rng.choice([0, 1, 5, 50, 600, 20000], n)
    names = [_CTX_NAMES[k] for k in rng.integers(0, int(rng.integers(1, len(_CTX_NAMES) + 1)), n)]
    ctx = Context(names, track, start, end)
    queries = [-1, *rng.permutation(n).tolist()]
    assert [ctx.info(c) for c in queries] == [_plain_info(ctx, c) for c in queries]
