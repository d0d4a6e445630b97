"""Dependency tracking: which earlier instructions an instruction must wait for.

`DepTracker.record(index, reads, writes)` returns the sorted indices of earlier
instructions with a read-after-write, write-after-read or write-after-write
conflict on an overlapping region. Regions are exact enough that independent
tiles never depend on each other:

* SBUF/PSUM: partition range x byte range (span of the strided view within a
  partition) of the same memory, whatever allocation name it had (so reusing a
  freed region orders correctly after its previous users);
* HBM: a box in the tensor's logical coordinates when the access maps onto its
  axes (row/column tiles of a matrix), else the flat element span.

Entries are bucketed (by byte offset on chip, by row in HBM) so lookups stay
cheap for long programs; a write that fully covers an entry replaces it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nprof.arch.isa import ITEMSIZE, Access, Space

Region = tuple[tuple[int, int], ...]  # half-open ranges; on chip: (partitions, bytes); HBM box: one per axis


@dataclass(eq=False)
class _Entry:
    box: Region | None  # exact box (on chip: partitions x bytes; HBM: per axis) or None
    span: tuple[int, int]  # HBM flat element span [lo, hi) (on chip: the byte range)
    writer: int | None
    readers: list[int] = field(default_factory=list)
    buckets: tuple[int, ...] = ()


def _overlap(a: Region, b: Region) -> bool:
    if len(a) == 2:  # on-chip regions (partitions x bytes): the hot path
        (a0, a1), (a2, a3) = a
        (b0, b1), (b2, b3) = b
        return a0 < b1 and b0 < a1 and a2 < b3 and b2 < a3
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def _inside(e: _Entry, box: Region | None, span: tuple[int, int]) -> bool:
    """Is entry `e`'s region inside the region (box, span)?"""
    if e.box is not None and box is not None:
        return _covers(box, e.box)
    return span[0] <= e.span[0] and e.span[1] <= span[1]


def _covers(a: Region, b: Region) -> bool:
    return all(alo <= blo and bhi <= ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


class DepTracker:
    """Conflict detection over all memories of one Program (see module doc)."""

    def __init__(self, hbm_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        self._shapes = hbm_shapes if hbm_shapes is not None else {}
        self._buckets: dict[tuple[str, int], list[_Entry]] = {}
        self._written: set[str] = set()  # memories/tensors written so far (reads of others cannot conflict)
        self._reads: dict[tuple[str, tuple[int, ...], Region | None, tuple[int, int]], _Entry] = {}

    def _key_region(self, acc: Access) -> tuple[str, Region | None, tuple[int, int], tuple[int, ...]]:
        lo = hi = 0
        for stride, size in acc.free:
            ext = stride * (size - 1)
            lo += min(0, ext)
            hi += max(0, ext)
        if acc.space is not Space.HBM:
            item = ITEMSIZE[acc.dtype]
            b0, b1 = acc.offset + lo * item, acc.offset + (hi + 1) * item
            box = ((acc.partition_start, acc.partition_start + acc.partitions), (b0, b1))
            gran = 1024 if acc.space is Space.SBUF else 512
            return str(acc.space), box, (b0, b1), tuple(range(b0 // gran, (b1 - 1) // gran + 1))
        pext = acc.partition_stride * (acc.partitions - 1)
        flo, fhi = acc.offset + lo + min(0, pext), acc.offset + hi + max(0, pext) + 1
        shape = self._shapes.get(acc.tensor)
        box = _hbm_box(acc, shape) if shape else None
        row = math.prod(shape[1:]) if shape and len(shape) > 1 else 1
        rows = shape[0] if shape else 1
        gran = max(1, rows // 32)
        first, last = flo // row // gran, (fhi - 1) // row // gran
        buckets = tuple(range(first, last + 1)) if last - first <= 64 else (-1,)
        return "hbm:" + acc.tensor, box, (flo, fhi), buckets

    def _candidates(self, space: str, buckets: tuple[int, ...]) -> list[_Entry]:
        seen: dict[int, _Entry] = {}
        for b in (*buckets, -1) if buckets != (-1,) else (-1,):
            for entry in self._buckets.get((space, b), ()):
                seen[id(entry)] = entry
        if buckets == (-1,):  # a huge span: check every bucket of this space
            for (sp, _), entries in self._buckets.items():
                if sp == space:
                    for entry in entries:
                        seen[id(entry)] = entry
        return list(seen.values())

    @staticmethod
    def _conflict(e: _Entry, box: Region | None, span: tuple[int, int]) -> bool:
        if e.box is not None and box is not None:
            return _overlap(e.box, box)
        return e.span[0] < span[1] and span[0] < e.span[1]

    def record(self, index: int, reads: tuple[Access, ...], writes: tuple[Access, ...]) -> tuple[int, ...]:
        """Register instruction `index` reading `reads` and writing `writes`; return its dependencies."""
        deps: set[int] = set()
        for acc in reads:
            space, box, span, buckets = self._key_region(acc)
            if space not in self._written:  # e.g. an input or weight: remember the reader for a later write
                key = (space, buckets, box, span)
                entry = self._reads.get(key)
                if entry is None:
                    entry = self._reads[key] = _Entry(box, span, None, [], buckets)
                    self._add(space, entry)
                if not entry.readers or entry.readers[-1] != index:
                    entry.readers.append(index)
                continue
            hit = False
            for e in self._candidates(space, buckets):
                if self._conflict(e, box, span):
                    if e.writer is not None:
                        deps.add(e.writer)
                    # a reader joins an entry only when it reads all of it; otherwise a later write to the
                    # part of the entry it did not read would wait for it (a false dependency)
                    if _inside(e, box, span) and index not in e.readers:
                        e.readers.append(index)
                    hit = hit or (e.box == box and e.span == span)
            if not hit:
                self._add(space, _Entry(box, span, None, [index], buckets))
        for acc in writes:
            space, box, span, buckets = self._key_region(acc)
            if space not in self._written:
                self._written.add(space)
                self._reads = {k: v for k, v in self._reads.items() if k[0] != space}
            for e in self._candidates(space, buckets):
                if self._conflict(e, box, span):
                    if e.writer is not None:
                        deps.add(e.writer)
                    deps.update(e.readers)
                    exact = box is not None and e.box is not None
                    if (
                        _covers(box, e.box)
                        if exact
                        else (box is None and span[0] <= e.span[0] and e.span[1] <= span[1])
                    ):
                        self._remove(space, e)
            self._add(space, _Entry(box, span, index, [], buckets))
        deps.discard(index)
        return tuple(sorted(deps))

    def last_writer(self, acc: Access) -> int | None:
        """The latest instruction that wrote any part of `acc` (None if none)."""
        space, box, span, buckets = self._key_region(acc)
        writers = [
            e.writer for e in self._candidates(space, buckets) if e.writer is not None and self._conflict(e, box, span)
        ]
        return max(writers) if writers else None

    def _add(self, space: str, entry: _Entry) -> None:
        for b in entry.buckets:
            self._buckets.setdefault((space, b), []).append(entry)

    def _remove(self, space: str, entry: _Entry) -> None:
        for b in entry.buckets:
            lst = self._buckets.get((space, b))
            if lst is not None and entry in lst:
                lst.remove(entry)


def _hbm_box(acc: Access, shape: tuple[int, ...]) -> Region | None:
    """The access as a box in the tensor's coordinates, or None if it does not map onto its axes."""
    n = len(shape)
    strides = [1] * n
    for d in range(n - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    coords = []
    rem = acc.offset
    for d in range(n):
        coords.append(rem // strides[d])
        rem %= strides[d]
    if n == 0 or coords[0] >= shape[0]:
        return None
    ext = [1] * n
    used: set[int] = set()
    for stride, size in ((acc.partition_stride, acc.partitions), *acc.free):
        if size == 1:
            continue
        for d in range(n):
            if d not in used and strides[d] == stride and shape[d] > 1:
                used.add(d)
                ext[d] = size
                break
        else:
            return None
    if any(c + e > s for c, e, s in zip(coords, ext, shape, strict=True)):
        return None
    return tuple((c, c + e) for c, e in zip(coords, ext, strict=True))
