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

from nprof.arch.isa import ITEMSIZE, Access, Space

_ONCHIP_KEY = {Space.SBUF: "sbuf", Space.PSUM: "psum"}  # memory key of on-chip accesses (str() of the enum is slow)
_GRANULE = {Space.SBUF: 1024, Space.PSUM: 512}  # bucket width in bytes
_RECENT = 16  # accesses whose regions are remembered (an instruction's operands are looked up 2-3 times)
Region = tuple[tuple[int, int], ...]  # half-open ranges; on chip: (partitions, bytes); HBM box: one per axis
_NO_BOX = ((0, 0), (0, 0))  # placeholder bounds when a region is not a 2-D box (never compared with one)


class _Entry:
    """A region and its last writer and readers since (compared by identity; a plain slots class: one is made
    per write and per newly read region, a dataclass __init__ costs twice as much)."""

    __slots__ = ("box", "buckets", "readers", "span", "writer")

    def __init__(self, box: Region | None, span: tuple[int, int], writer: int | None, readers: list[int],
                 buckets: tuple[int, ...]) -> None:  # fmt: skip
        self.box = box  # exact box (on chip: partitions x bytes; HBM: per axis) or None
        self.span = span  # HBM flat element span [lo, hi) (on chip: the byte range)
        self.writer = writer
        self.readers = readers
        self.buckets = buckets


def _overlap(a: Region, b: Region) -> bool:
    if len(a) == 2:  # on-chip regions (partitions x bytes): the hot path
        (a0, a1), (a2, a3) = a
        (b0, b1), (b2, b3) = b
        return a0 < b1 and b0 < a1 and a2 < b3 and b2 < a3
    return all(alo < bhi and blo < ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def _covers(a: Region, b: Region) -> bool:
    if len(a) == 2:  # on-chip regions and 2-D HBM boxes: the hot path
        (a0, a1), (a2, a3) = a
        (b0, b1), (b2, b3) = b
        return a0 <= b0 and b1 <= a1 and a2 <= b2 and b3 <= a3
    return all(alo <= blo and bhi <= ahi for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


class DepTracker:
    """Conflict detection over all memories of one Program (see module doc)."""

    def __init__(self, hbm_shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        self._shapes = hbm_shapes if hbm_shapes is not None else {}
        self._buckets: dict[tuple[str, int], list[_Entry]] = {}
        self._written: set[str] = set()  # memories/tensors written so far (reads of others cannot conflict)
        self._unwritten: dict[str, list[tuple[int, Access]]] = {}  # reads of the others, registered at 1st write
        self._layouts: dict[str, tuple[tuple[int, ...], tuple[int, ...], int, int]] = {}  # HBM tensor -> layout
        self._recent: dict[int, tuple[Access, tuple[str, Region | None, tuple[int, int], tuple[int, ...]]]] = {}

    def _layout(self, tensor: str) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
        """(shape, row-major strides, elements per row, bucket granularity in rows) of an HBM tensor."""
        layout = self._layouts.get(tensor)
        if layout is None:
            shape = self._shapes.get(tensor) or ()
            strides = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                strides[d] = strides[d + 1] * shape[d + 1]
            row = math.prod(shape[1:]) if len(shape) > 1 else 1
            layout = (shape, tuple(strides), row, max(1, (shape[0] if shape else 1) // 32))
            if shape:  # (an undeclared name is looked up again next time)
                self._layouts[tensor] = layout
        return layout

    def _key_region(self, acc: Access) -> tuple[str, Region | None, tuple[int, int], tuple[int, ...]]:
        """(memory key, box, span, buckets) of `acc`; the last few accesses' results are remembered (by identity:
        the same operand is looked up by `last_writer` and `record` of one instruction)."""
        hit = self._recent.get(id(acc))
        if hit is not None and hit[0] is acc:
            return hit[1]
        found = self._region_of(acc)
        if found[0] != "sbuf" and found[0] != "psum" and acc.tensor not in self._layouts:
            return found  # an undeclared HBM tensor: its region may change once declared
        recent = self._recent
        if len(recent) >= _RECENT:
            recent.clear()
        recent[id(acc)] = (acc, found)
        return found

    def _region_of(self, acc: Access) -> tuple[str, Region | None, tuple[int, int], tuple[int, ...]]:
        lo = hi = 0
        for stride, size in acc.free:
            ext = stride * (size - 1)
            if ext < 0:
                lo += ext
            else:
                hi += ext
        key = _ONCHIP_KEY.get(acc.space)
        if key is not None:
            item = ITEMSIZE[acc.dtype]
            b0, b1 = acc.offset + lo * item, acc.offset + (hi + 1) * item
            p0 = acc.partition_start
            box: Region | None = ((p0, p0 + acc.partitions), (b0, b1))
            gran = _GRANULE[acc.space]
            first, last = b0 // gran, (b1 - 1) // gran
            return key, box, (b0, b1), ((first,) if first == last else tuple(range(first, last + 1)))
        pext = acc.partition_stride * (acc.partitions - 1)
        flo, fhi = acc.offset + lo + min(0, pext), acc.offset + hi + max(0, pext) + 1
        shape, strides, row, gran = self._layout(acc.tensor)
        box = _hbm_box(acc, shape, strides) if shape else None
        first, last = flo // row // gran, (fhi - 1) // row // gran
        buckets = tuple(range(first, last + 1)) if last - first <= 64 else (-1,)
        return "hbm:" + acc.tensor, box, (flo, fhi), buckets

    def _candidates(self, space: str, buckets: tuple[int, ...], copy: bool = True) -> list[_Entry]:
        """Entries that may overlap a region in `buckets` of `space` (each once; a new list unless `copy` is
        False: then possibly a bucket's own list, which the caller must not change while it iterates)."""
        get = self._buckets.get
        if len(buckets) == 1 and buckets[0] != -1:
            first, huge = get((space, buckets[0])), get((space, -1))
            if not huge:
                return (list(first) if copy else first) if first else []
            if not first:
                return list(huge)
        if buckets[0] != -1:  # a contiguous range of buckets: each entry taken from the first bucket it shares
            low = buckets[0]  # with the range (entries' buckets are contiguous ranges too, or the huge bucket -1)
            found = list(get((space, -1), ()))
            for b in buckets:
                for entry in get((space, b), ()):
                    start = entry.buckets[0]
                    if start == b or (b == low and start < low):
                        found.append(entry)
            return found
        seen: dict[int, _Entry] = {}  # a huge span: every entry of this space
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
            self._read(index, acc, deps)
        for acc in writes:
            self._write(index, acc, deps)
        deps.discard(index)
        return tuple(sorted(deps))

    def _read(self, index: int, acc: Access, deps: set[int]) -> None:
        """Register a read of `acc` by instruction `index`; add the writers it waits for to `deps`."""
        space = _ONCHIP_KEY.get(acc.space) or "hbm:" + acc.tensor
        if space not in self._written:  # e.g. an input or weight: nothing to wait for; kept for a later write
            self._unwritten.setdefault(space, []).append((index, acc))
            return
        space, box, span, buckets = self._key_region(acc)
        hit = False
        s0, s1 = span
        (x0, x1), (x2, x3) = box if box is not None and len(box) == 2 else _NO_BOX
        for e in self._candidates(space, buckets, copy=False):  # (entries are added after the loop)
            eb = e.box
            if eb is not None and box is not None:
                if len(eb) == 2:  # on-chip regions and 2-D HBM boxes (`_overlap`, `_covers` inlined: the hot path)
                    (e0, e1), (e2, e3) = eb
                    if not (e0 < x1 and x0 < e1 and e2 < x3 and x2 < e3):
                        continue
                    inside = x0 <= e0 and e1 <= x1 and x2 <= e2 and e3 <= x3
                elif not _overlap(eb, box):
                    continue
                else:
                    inside = _covers(box, eb)
            else:
                es0, es1 = e.span
                if not (es0 < s1 and s0 < es1):
                    continue
                inside = s0 <= es0 and es1 <= s1
            if e.writer is not None:
                deps.add(e.writer)
            # a reader joins an entry only when it reads all of it; otherwise a later write to the
            # part of the entry it did not read would wait for it (a false dependency)
            if inside and index not in e.readers:
                e.readers.append(index)
            hit = hit or (eb == box and e.span == span)
        if not hit:
            self._add(space, _Entry(box, span, None, [index], buckets))

    def _write(self, index: int, acc: Access, deps: set[int]) -> None:
        """Register a write of `acc` by instruction `index`; add the accesses it waits for to `deps`."""
        space, box, span, buckets = self._key_region(acc)
        if space not in self._written:
            self._written.add(space)
            self._enter_reads(self._unwritten.pop(space, []))
        s0, s1 = span
        (x0, x1), (x2, x3) = box if box is not None and len(box) == 2 else _NO_BOX
        for e in self._candidates(space, buckets):
            eb = e.box
            if eb is not None and box is not None:
                if len(eb) == 2:  # `_overlap`, `_covers` inlined (the hot path)
                    (e0, e1), (e2, e3) = eb
                    if not (e0 < x1 and x0 < e1 and e2 < x3 and x2 < e3):
                        continue
                    covered = x0 <= e0 and e1 <= x1 and x2 <= e2 and e3 <= x3
                elif not _overlap(eb, box):
                    continue
                else:
                    covered = _covers(box, eb)
            else:
                es0, es1 = e.span
                if not (es0 < s1 and s0 < es1):
                    continue
                covered = box is None and s0 <= es0 and es1 <= s1
            if e.writer is not None:
                deps.add(e.writer)
            deps.update(e.readers)
            if covered:
                self._remove(space, e)
        self._add(space, _Entry(box, span, index, [], buckets))

    def _enter_reads(self, reads: list[tuple[int, Access]]) -> None:
        """Enter the reads of a memory made before its first write, in order: one entry per distinct region,
        listing its readers (what a write must wait for)."""
        entries: dict[tuple[tuple[int, ...], Region | None, tuple[int, int]], _Entry] = {}
        for index, acc in reads:
            space, box, span, buckets = self._key_region(acc)
            entry = entries.get((buckets, box, span))
            if entry is None:
                entry = entries[(buckets, box, span)] = _Entry(box, span, None, [], buckets)
                self._add(space, entry)
            if not entry.readers or entry.readers[-1] != index:
                entry.readers.append(index)

    def wrote(self, space: str) -> bool:
        """Has any write to memory `space` ("sbuf", "psum", or "hbm:" + tensor name) been recorded?"""
        return space in self._written

    def last_writer(self, acc: Access) -> int | None:
        """The latest instruction that wrote any part of `acc` (None if none)."""
        space, box, span, buckets = self._key_region(acc)
        writers = [
            e.writer
            for e in self._candidates(space, buckets, copy=False)
            if e.writer is not None and self._conflict(e, box, span)
        ]
        return max(writers) if writers else None

    def _add(self, space: str, entry: _Entry) -> None:
        buckets = self._buckets
        for b in entry.buckets:
            lst = buckets.get((space, b))
            if lst is None:
                buckets[(space, b)] = [entry]
            else:
                lst.append(entry)

    def _remove(self, space: str, entry: _Entry) -> None:
        for b in entry.buckets:
            lst = self._buckets.get((space, b))
            if lst is not None and entry in lst:
                lst.remove(entry)


def _hbm_box(acc: Access, shape: tuple[int, ...], strides: tuple[int, ...]) -> Region | None:
    """The access as a box in the tensor's coordinates (`strides`: row-major), or None if it does not map onto
    its axes."""
    n = len(shape)
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
