"""On-chip memory allocation for traced kernels (per-partition byte ranges of SBUF or PSUM).

A next-fit allocator: each allocation starts searching where the previous one
ended and wraps around, so a loop body's tiles land in fresh regions for a
while before old (freed) ones are reused. That gives the hardware's
multi-buffering for free: iteration i+1's load does not wait for iteration
i's compute unless memory is actually short. PSUM allocations never straddle
a 2 KiB bank. `used` is the live byte count per partition and `high_water`
its maximum (what the Program records as sbuf_bytes/psum_bytes).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from nprof.errors import KernelError


class OutOfMemory(Exception):
    """No free range is large enough (`live` bytes are in use)."""

    def __init__(self, need: int, live: int, capacity: int) -> None:
        super().__init__(need, live, capacity)
        self.need, self.live, self.capacity = need, live, capacity


class OverCapacity(KernelError):
    """A kernel's tiles do not fit in SBUF/PSUM (message: the user's `file:line` and what to change)."""


class Allocator:
    """Next-fit allocator of per-partition byte ranges (see module doc)."""

    def __init__(self, capacity: int, bank: int | None = None, align: int = 64) -> None:
        self.capacity = capacity
        self.bank = bank
        self.align = align
        self._starts: list[int] = []  # sorted starts of live ranges
        self._end_list: list[int] = []  # their ends, same order (ranges are disjoint, so also sorted)
        self._ends: dict[int, int] = {}
        self._cursor = 0
        self.used = 0
        self.high_water = 0
        self._pinned: list[tuple[int, int]] = []  # sorted disjoint [start, end): direct allocations (never freed)
        self.pinned_bytes = 0
        self.listener: Callable[[int], None] | None = None  # told the start of each freed range (nki.replay)

    def _fits(self, start: int, size: int, align: int) -> int | None:
        """First aligned start >= `start` where [s, s+size) is free and bank-legal, before the next live range."""
        s = -(-start // align) * align
        if self.bank is not None and size <= self.bank and s // self.bank != (s + size - 1) // self.bank:
            s = (s // self.bank + 1) * self.bank
        if s + size > self.capacity:
            return None
        i = bisect.bisect_right(self._starts, s)
        if i > 0 and self._ends[self._starts[i - 1]] > s:
            return None
        if i < len(self._starts) and self._starts[i] < s + size:
            return None
        if self._pinned and self._hits_pinned(s, s + size):
            return None
        return s

    def _hits_pinned(self, lo: int, hi: int) -> bool:
        i = bisect.bisect_right(self._pinned, (lo, 1 << 62))
        if i > 0 and self._pinned[i - 1][1] > lo:
            return True
        return i < len(self._pinned) and self._pinned[i][0] < hi

    def pin(self, start: int, size: int) -> bool:
        """Reserve [start, start+size) for good (a direct allocation; other allocations avoid it). True when a
        live allocation overlaps it (the caller refuses: automatic and direct tiles would share memory)."""
        lo, hi = start, start + max(size, 1)
        i = bisect.bisect_right(self._starts, lo)
        clash = (i > 0 and self._ends[self._starts[i - 1]] > lo) or (i < len(self._starts) and self._starts[i] < hi)
        merged = [(a, b) for a, b in self._pinned if b < lo or a > hi]
        for a, b in self._pinned:
            if not (b < lo or a > hi):
                lo, hi = min(lo, a), max(hi, b)
        merged.append((lo, hi))
        self._pinned = sorted(merged)
        self.pinned_bytes = sum(b - a for a, b in self._pinned)
        self.high_water = max(self.high_water, self.used + self.pinned_bytes)
        return bool(clash)

    def _candidates(self) -> Iterator[int]:
        """Where to try a new range, in next-fit order: the cursor, the ends of live ranges at/after it, then
        (wrapping around) 0 and the ends before it. Lazy: O(log n) to the first fit, not O(n log n) per call."""
        cursor, ends = self._cursor, self._end_list
        yield cursor
        split = bisect.bisect_left(ends, cursor)
        for k in range(split, len(ends)):
            yield ends[k]
        yield 0
        for k in range(split):
            yield ends[k]
        for _, end in self._pinned:  # just after a direct allocation
            yield end

    def placeable(self, size: int, align: int | None = None) -> bool:
        """Would `alloc(size, align)` succeed now (a free range that large exists: fragmentation included)?
        Nothing is reserved."""
        size, align = max(size, 1), align or self.align
        return size <= self.capacity and any(self._fits(c, size, align) is not None for c in self._candidates())

    def alloc(self, size: int, align: int | None = None) -> int:
        """Start of a free range of `size` bytes (aligned to `align`, default the allocator's)."""
        size = max(size, 1)
        align = align or self.align
        if size > self.capacity:
            raise OutOfMemory(size, self.used, self.capacity)
        for c in self._candidates():
            s = self._fits(c, size, align)
            if s is not None:
                i = bisect.bisect_left(self._starts, s)
                self._starts.insert(i, s)
                self._end_list.insert(i, s + size)
                self._ends[s] = s + size
                self._cursor = s + size
                self.used += size
                self.high_water = max(self.high_water, self.used + self.pinned_bytes)
                return s
        raise OutOfMemory(size, self.used, self.capacity)

    def free(self, start: int) -> None:
        end = self._ends.pop(start, None)
        if end is None:
            return
        i = bisect.bisect_left(self._starts, start)
        del self._starts[i]
        del self._end_list[i]
        self.used -= end - start
        if self.listener is not None:
            self.listener(start)
