"""The compiled next-fit allocator (nprof.nki.alloc_batch) places exactly as nprof.nki.alloc.Allocator does, on
random sequences of allocations and frees repeated over iterations (live ranges, direct allocations, PSUM banks,
alignments), and fails at the same step with the same figures."""

from __future__ import annotations

import random

import numpy as np

from nprof.nki import alloc_batch
from nprof.nki.alloc import Allocator, OutOfMemory


def _allocator(rng: random.Random) -> Allocator:
    bank = rng.choice([None, 2048])
    a = Allocator(rng.choice([8192, 16384]), bank=bank, align=rng.choice([1, 32, 64]))
    for _ in range(rng.randrange(4)):  # ranges live before the loop (some freed again: the cursor moves)
        try:
            start = a.alloc(rng.randrange(1, 3000))
        except OutOfMemory:
            break
        if rng.random() < 0.3:
            a.free(start)
    if rng.random() < 0.3:
        a.pin(rng.randrange(0, a.capacity - 600), rng.randrange(1, 500))
    return a


def _steps(rng: random.Random) -> list[tuple[int, int, int, int, int]]:
    """An iteration: tiles allocated then freed in a random order (each tile freed once, some at the end)."""
    tiles = rng.randrange(1, 6)
    order = [("m", t) for t in range(tiles)]
    for t in range(tiles):
        at = rng.randrange(order.index(("m", t)) + 1, len(order) + 1)
        order.insert(at, ("f", t))
    sizes = [rng.choice([64, 100, 256, 1024, 2048, 3000]) for _ in range(tiles)]
    aligns = [rng.choice([0, 0, 128, 512]) for _ in range(tiles)]
    return [(1 if kind == "m" else 2, t, sizes[t], aligns[t], p) for p, (kind, t) in enumerate(order)]


def _python(a: Allocator, steps: list[tuple[int, ...]], iterations: int) -> tuple[list[list[int]], tuple | None]:
    placed = []
    for j in range(iterations):
        row = [0] * (max(s[1] for s in steps) + 1)
        for r, (kind, tile, size, align, _) in enumerate(steps):
            if kind == 1:
                try:
                    row[tile] = a.alloc(size, align or None)
                except OutOfMemory as err:
                    return placed, (j, r, err.need, err.live)
            else:
                a.free(row[tile])
        placed.append(row)
    return placed, None


def test_compiled_allocator_matches_the_python_one() -> None:
    rng = random.Random(3)
    failures = 0
    for _ in range(300):
        seed = rng.randrange(1 << 30)
        steps, iterations = _steps(random.Random(seed)), rng.randrange(1, 40)
        py, fast = _allocator(random.Random(seed)), _allocator(random.Random(seed))
        expected, failed = _python(py, steps, iterations)
        state, starts, ends, pinned = alloc_batch.load(fast)
        tiles = max(s[1] for s in steps) + 1
        offsets, starts, ends = alloc_batch.run(state, starts, ends, pinned, np.asarray(steps, np.int64), iterations,
                                                tiles)  # fmt: skip
        alloc_batch.store(fast, state, starts, ends)
        if failed is not None:
            failures += 1
            got = (int(state[alloc_batch.FAIL_J]), int(state[alloc_batch.FAIL_R]), int(state[alloc_batch.FAIL]),
                   int(state[alloc_batch.LIVE]))  # fmt: skip
            assert got == failed
        else:
            assert not state[alloc_batch.FAIL]
        assert offsets[: len(expected), :tiles].tolist() == expected
        assert (fast._starts, fast._end_list, fast._ends) == (py._starts, py._end_list, py._ends)
        assert (fast._cursor, fast.used, fast.high_water) == (py._cursor, py.used, py.high_water)
    assert 0 < failures < 300  # both outcomes were exercised
