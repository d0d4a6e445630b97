"""Extents of HBM access patterns: what the fusion cache (`nprof.compiler.fusion`) asks about them.

Contract: plain functions of `nprof.arch.isa.Access` patterns: `span` (least and greatest element offset),
`distinct` (at most how many distinct elements), `meet` (do two patterns share an element: exact up to
`EXACT_MEET_MAX` elements, else True; `Footprint`: the same question of one pattern against many),
`exact_cover` (do patterns address every element of a flat tensor exactly once), `numel_of` (elements of a
shape). Conservative where not exact: a wrong "no" would let the cache serve a stale tile.
"""

from __future__ import annotations

import functools

import numpy as np

from nprof.arch.isa import Access


def span(a: Access) -> tuple[int, int]:
    """The least and greatest element offsets `a` addresses (an interval holding all of them)."""
    lo = hi = a.offset
    for stride, size in ((a.partition_stride, a.partitions), *a.free):
        reach = stride * (size - 1)
        lo, hi = lo + min(0, reach), hi + max(0, reach)
    return lo, hi


def distinct(a: Access) -> int:
    """At most how many distinct elements `a` addresses (its elements without the repeats of zero strides)."""
    n = a.partitions if a.partition_stride else 1
    for stride, size in a.free:
        n *= size if stride else 1
    return n


EXACT_MEET_MAX = 1 << 16  # elements up to which two meeting spans are checked element by element
MASK_MAX = 1 << 22  # span (elements) up to which a `Footprint` marks its elements in a mask, else sorts them


def meet(a: Access, b: Access) -> bool:
    """Do the patterns `a` and `b` (whose spans meet) address a common element? Exact for patterns of at most
    `EXACT_MEET_MAX` elements each (interleaved writes: the pieces of a concatenation), else True."""
    return Footprint(b).meets(a)


class Footprint:
    """The elements one pattern addresses, asked of many patterns whether they share one (`meets`, the same
    answers as `meet`): its addresses are computed once, on the first question that needs them, as a mask
    over its span (or sorted, when the span exceeds `MASK_MAX`), and each question then costs one pass over
    the other pattern's addresses (was: both sorted and intersected per question, ~25 ms for two patterns of
    64 Ki elements; a 224x224 resnet18's im2col stores asked 17 thousand of them)."""

    def __init__(self, a: Access) -> None:
        self.access = a
        self.lo, self.hi = span(a)
        self._mask: np.ndarray | None = None
        self._sorted: np.ndarray | None = None

    def meets(self, b: Access) -> bool:
        """Does `b` address an element this footprint's pattern does? (True when either pattern exceeds
        `EXACT_MEET_MAX` elements.)"""
        if self.access.elements > EXACT_MEET_MAX or b.elements > EXACT_MEET_MAX:
            return True
        b_lo, b_hi = span(b)
        if b_hi < self.lo or self.hi < b_lo:
            return False
        shifted = translate_meet(self.access, b)
        if shifted is not None:
            return shifted
        from nprof.compiler.subtile import addresses

        idx = addresses(b).ravel()
        idx = idx[(idx >= self.lo) & (idx <= self.hi)]
        if self.hi - self.lo < MASK_MAX:
            if self._mask is None:
                self._mask = np.zeros(self.hi - self.lo + 1, dtype=bool)
                self._mask[addresses(self.access).ravel() - self.lo] = True
            return bool(self._mask[idx - self.lo].any())
        if self._sorted is None:
            self._sorted = np.unique(addresses(self.access).ravel())
        pos = np.minimum(np.searchsorted(self._sorted, idx), self._sorted.size - 1)
        return bool((self._sorted[pos] == idx).any())


SEARCH_MAX = 256  # steps `translate_meet` may take before leaving the answer to the addresses


@functools.lru_cache(maxsize=1024)
def _digits(partitions: int, partition_stride: int, free: tuple[tuple[int, int], ...]) -> tuple[list, list]:
    """(|stride|, size) of a pattern's dims, largest stride first (sizes > 1, strides non-zero), and reach[k]:
    the most the dims k.. can add up to (shared by every pattern of these dims: the row blocks of a tensor)."""
    dims = sorted(((abs(s), n) for s, n in ((partition_stride, partitions), *free) if n > 1 and s), reverse=True)
    reach = [0] * (len(dims) + 1)
    for k in range(len(dims) - 1, -1, -1):
        reach[k] = reach[k + 1] + (dims[k][1] - 1) * dims[k][0]
    return dims, reach


def translate_meet(a: Access, b: Access) -> bool | None:
    """`shifted_meet` of `a` and `b` when their dims are the same, else None (the answer depends only on the dims
    and the offset difference, so it is memoised: a strided input gradient's accumulations into one tensor ask
    the same question of each kept row block, ~136 thousand times on a 224x224 resnet18 backward)."""
    if (a.partitions, a.partition_stride, a.free) != (b.partitions, b.partition_stride, b.free):
        return None
    return _shifted_meet_memo(a.partitions, a.partition_stride, a.free, a.offset - b.offset)


@functools.lru_cache(maxsize=1 << 16)
def _shifted_meet_memo(partitions: int, partition_stride: int, free: tuple[tuple[int, int], ...],
                       diff: int) -> bool | None:  # fmt: skip
    return shifted_meet(partitions, partition_stride, free, diff)


def shifted_meet(partitions: int, partition_stride: int, free: tuple[tuple[int, int], ...], diff: int) -> bool | None:
    """For two patterns of the same dims (partitions, free sizes and strides) at different offsets, e.g. two
    row blocks of one tensor: do they share an element? Exact: whether the offset difference is a sum of
    ``d * stride`` over the dims with ``|d| < size``, found by a search over the digits from the largest
    stride down, each digit bounded by what the smaller strides can still reach. None when the dims differ
    or the search would exceed `SEARCH_MAX` steps. The patterns are given by their shared dims and `diff`, the
    first's offset minus the second's."""
    dims, reach = _digits(partitions, partition_stride, free)
    stack, steps = [(0, diff)], 0
    while stack:
        k, rest = stack.pop()
        steps += 1
        if steps > SEARCH_MAX:
            return None
        if k == len(dims):
            if rest == 0:
                return True
            continue
        stride, size = dims[k]
        low = max(-(size - 1), -((reach[k + 1] - rest) // stride))  # ceil((rest - reach) / stride)
        high = min(size - 1, (rest + reach[k + 1]) // stride)
        if high - low >= SEARCH_MAX:
            return None
        stack.extend((k + 1, rest - d * stride) for d in range(low, high + 1))
    return False


def numel_of(shape: tuple[int, ...]) -> int:
    """Elements of a tensor of `shape`."""
    n = 1
    for s in shape:
        n *= s
    return n


def exact_cover(accesses: list[Access], n: int) -> bool:
    """Do the patterns address every element of a flat tensor of `n` elements exactly once?"""
    if sum(a.elements for a in accesses) != n:
        return False
    if not accesses:
        return n == 0
    parts = []
    for a in accesses:
        idx = np.array([a.offset], np.int64)
        for stride, size in ((a.partition_stride, a.partitions), *a.free):
            idx = (idx[:, None] + stride * np.arange(size, dtype=np.int64)[None, :]).ravel()
        if idx.min() < 0 or idx.max() >= n:
            return False
        parts.append(idx)
    counts = np.bincount(np.concatenate(parts), minlength=n)  # one pass (np.add.at per access was ~10x slower)
    return bool((counts == 1).all())
