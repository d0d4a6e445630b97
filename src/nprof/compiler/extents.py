"""Extents of HBM access patterns: what the fusion cache (`nprof.compiler.fusion`) asks about them.

Contract: plain functions of `nprof.arch.isa.Access` patterns: `span` (least and greatest element offset),
`distinct` (at most how many distinct elements), `meet` (do two patterns share an element: exact up to
`EXACT_MEET_MAX` elements, else True), `exact_cover` (do patterns address every element of a flat tensor
exactly once), `numel_of` (elements of a shape). Conservative where not exact: a wrong "no" would let the
cache serve a stale tile.
"""

from __future__ import annotations

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


def meet(a: Access, b: Access) -> bool:
    """Do the patterns `a` and `b` (whose spans meet) address a common element? Exact for patterns of at most
    `EXACT_MEET_MAX` elements each (interleaved writes: the pieces of a concatenation), else True."""
    if a.elements > EXACT_MEET_MAX or b.elements > EXACT_MEET_MAX:
        return True
    from nprof.compiler.subtile import addresses

    return bool(np.intersect1d(addresses(a).ravel(), addresses(b).ravel()).size)


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
