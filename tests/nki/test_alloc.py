"""The next-fit allocator against a plain reference (every candidate gap collected and sorted per call)."""

from __future__ import annotations

import bisect
import random

import pytest

from nprof.nki.alloc import Allocator, OutOfMemory


class ReferenceAllocator:
    """Next-fit written the obvious way: try the cursor and the end of every live range (sorted, at/after
    the cursor first, then from 0), aligned and bank-legal, first free gap wins."""

    def __init__(self, capacity: int, bank: int | None = None, align: int = 64) -> None:
        self.capacity, self.bank, self.align = capacity, bank, align
        self.live: dict[int, int] = {}  # start -> end
        self.cursor = 0

    def _fits(self, start: int, size: int, align: int) -> int | None:
        s = -(-start // align) * align
        if self.bank is not None and size <= self.bank and s // self.bank != (s + size - 1) // self.bank:
            s = (s // self.bank + 1) * self.bank
        if s + size > self.capacity:
            return None
        if any(a < s + size and s < b for a, b in self.live.items()):
            return None
        return s

    def alloc(self, size: int, align: int | None = None) -> int:
        size, align = max(size, 1), align or self.align
        candidates = [self.cursor, *self.live.values(), 0]
        ordered = sorted(c for c in candidates if c >= self.cursor) + sorted(c for c in candidates if c < self.cursor)
        for c in ordered:
            s = self._fits(c, size, align)
            if s is not None:
                self.live[s] = s + size
                self.cursor = s + size
                return s
        raise OutOfMemory(size, 0, self.capacity)

    def free(self, start: int) -> None:
        self.live.pop(start, None)


@pytest.mark.parametrize("seed", range(6))
def test_allocator_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    bank = 2048 if seed % 2 else None
    fast, ref = Allocator(16384, bank=bank), ReferenceAllocator(16384, bank=bank)
    live: list[int] = []
    for _ in range(1500):
        if live and rng.random() < 0.45:
            start = live.pop(rng.randrange(len(live)))
            fast.free(start)
            ref.free(start)
            continue
        size, align = rng.choice([1, 64, 100, 512, 700, 2048, 3000]), rng.choice([None, 64, 512])
        try:
            want = ref.alloc(size, align)
        except OutOfMemory:
            with pytest.raises(OutOfMemory):
                fast.alloc(size, align)
            continue
        assert fast.alloc(size, align) == want
        bisect.insort(live, want)
    assert fast.used == sum(b - a for a, b in ref.live.items())
