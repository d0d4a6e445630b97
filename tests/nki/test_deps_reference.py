"""`DepTracker` (bucketed, inlined) gives exactly the dependencies of a plain reference on random accesses.

The reference keeps every entry of a memory in one flat list and checks each with the region rules spelt
out plainly (overlap, containment), so only the tracker's indexing and fast paths are under test.
"""

import dataclasses
import functools
import random

from nprof.arch.isa import ITEMSIZE, Access, Space
from nprof.nki.deps import DepTracker

SHAPES = {"a": (64, 48), "b": (4, 8, 16), "c": (300,)}


def _region(acc: Access) -> tuple[str, tuple | None, tuple[int, int]]:
    """(memory key, box or None, span) exactly as the module doc defines regions."""
    lo = sum(min(0, s * (n - 1)) for s, n in acc.free)
    hi = sum(max(0, s * (n - 1)) for s, n in acc.free)
    if acc.space is not Space.HBM:
        item = ITEMSIZE[acc.dtype]
        b0, b1 = acc.offset + lo * item, acc.offset + (hi + 1) * item
        return acc.space.value, ((acc.partition_start, acc.partition_start + acc.partitions), (b0, b1)), (b0, b1)
    pext = acc.partition_stride * (acc.partitions - 1)
    span = (acc.offset + lo + min(0, pext), acc.offset + hi + max(0, pext) + 1)
    shape = SHAPES[acc.tensor]
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    coords, rem = [], acc.offset
    for st in strides:
        coords.append(rem // st)
        rem %= st
    ext, used = [1] * len(shape), set()
    for stride, size in ((acc.partition_stride, acc.partitions), *acc.free):
        if size == 1:
            continue
        dims = [d for d in range(len(shape)) if d not in used and strides[d] == stride and shape[d] > 1]
        if not dims:
            return "hbm:" + acc.tensor, None, span
        used.add(dims[0])
        ext[dims[0]] = size
    if coords[0] >= shape[0] or any(c + e > s for c, e, s in zip(coords, ext, shape, strict=True)):
        return "hbm:" + acc.tensor, None, span
    return "hbm:" + acc.tensor, tuple((c, c + e) for c, e in zip(coords, ext, strict=True)), span


def _meets(a: tuple, b: tuple) -> bool:
    (_, ba, sa), (_, bb, sb) = a, b
    if ba is not None and bb is not None:
        return all(x0 < y1 and y0 < x1 for (x0, x1), (y0, y1) in zip(ba, bb, strict=True))
    return sa[0] < sb[1] and sb[0] < sa[1]


def _within(inner: tuple, outer: tuple, need_box: bool = False) -> bool:
    """Is region `inner` inside `outer`? (`need_box`: spans count only when `outer` has no box.)"""
    (_, bi, si), (_, bo, so) = inner, outer
    if bi is not None and bo is not None:
        return all(o0 <= i0 and i1 <= o1 for (i0, i1), (o0, o1) in zip(bi, bo, strict=True))
    if need_box and bo is not None:
        return False
    return so[0] <= si[0] and si[1] <= so[1]


class Reference:
    """Same rules as DepTracker, one flat list of [region, writer, readers] per memory, no buckets."""

    def __init__(self) -> None:
        self.entries: dict[str, list[list]] = {}
        self.written: set[str] = set()

    def record(self, index: int, reads: list[Access], writes: list[Access]) -> tuple[int, ...]:
        deps: set[int] = set()
        for acc in reads:
            reg = _region(acc)
            entries = self.entries.setdefault(reg[0], [])
            if reg[0] not in self.written:
                same = [e for e in entries if e[0] == reg and e[1] is None]
                if not same:
                    entries.append([reg, None, []])
                    same = entries[-1:]
                if not same[0][2] or same[0][2][-1] != index:
                    same[0][2].append(index)
                continue
            hit = False
            for e in entries:
                if _meets(e[0], reg):
                    deps |= {e[1]} - {None}
                    if _within(e[0], reg) and index not in e[2]:
                        e[2].append(index)
                    hit = hit or e[0][1:] == reg[1:]
            if not hit:
                entries.append([reg, None, [index]])
        for acc in writes:
            reg = _region(acc)
            entries = self.entries.setdefault(reg[0], [])
            self.written.add(reg[0])
            for e in list(entries):
                if _meets(e[0], reg):
                    deps |= ({e[1]} - {None}) | set(e[2])
                    covered = _within(e[0], reg) if (reg[1] is not None and e[0][1] is not None) else (
                        reg[1] is None and _within(e[0], reg))  # fmt: skip
                    if covered:
                        entries.remove(e)
            entries.append([reg, index, []])
        deps.discard(index)
        return tuple(sorted(deps))


def _random_access(rng: random.Random) -> Access:
    kind = rng.choice(["sbuf", "sbuf", "psum", "hbm"])
    if kind == "hbm":
        name = rng.choice(list(SHAPES))
        shape = SHAPES[name]
        if len(shape) == 2:
            r, c = rng.randrange(shape[0]), rng.randrange(shape[1])
            parts, n = rng.randint(1, shape[0] - r), rng.randint(1, shape[1] - c)
            if rng.random() < 0.25:  # transposed: partitions along the columns
                return Access(Space.HBM, name, "bfloat16", r * shape[1] + c, min(n, 8), ((shape[1], parts),), 0, 1)
            return Access(Space.HBM, name, "bfloat16", r * shape[1] + c, parts, ((1, n),), 0, shape[1])
        if len(shape) == 3:
            b = rng.randrange(shape[0])
            return Access(Space.HBM, name, "bfloat16", b * 128 + rng.randrange(8) * 16, rng.randint(1, 8 - 0) % 8 or 1,
                          ((1, rng.choice([4, 16])),), 0, 16)  # fmt: skip
        return Access(Space.HBM, name, "bfloat16", rng.randrange(280), 1, ((rng.choice([1, 2]), rng.randint(1, 10)),))
    space = Space.SBUF if kind == "sbuf" else Space.PSUM
    dtype = rng.choice(["bfloat16", "float32"])
    p0 = rng.choice([0, 0, 32, 64])
    parts = rng.choice([1, 32, 64])
    offset = rng.randrange(0, 6000 if kind == "sbuf" else 4000, 64)
    free = rng.choice([((1, rng.randint(1, 600)),), ((rng.randint(1, 300), 2), (1, 64)), ((-1, 8),)])
    if free[0][0] < 0:
        offset += 64
    return Access(space, "t", dtype, offset, parts, free, p0, 1)


def _reused_or_new(rng: random.Random, made: list[Access]) -> Access:
    """One of the recent accesses again (the same object) or a new random one."""
    if made and rng.random() < 0.3:
        return rng.choice(made[-24:])
    made.append(_random_access(rng))
    return made[-1]


def test_tracker_matches_the_flat_reference_on_random_programs():
    _compare(range(8), steps=250, capacity=1024)


def test_tracker_grows_its_arrays_without_changing_anything():
    """From one entry row of room: every array (entries, list nodes, the deferred-read table) is regrown many
    times mid-program; dependencies stay the reference's."""
    _compare(range(8, 11), steps=600, capacity=1)


def test_tensors_of_more_axes_than_a_box_holds_are_refused_by_name():
    import pytest

    from nprof.errors import NprofError

    tracker = DepTracker({"big": (2,) * 9})
    with pytest.raises(NprofError, match="at most 8 axes"):
        tracker.record(0, (Access(Space.HBM, "big", "float32", 0, 2, ((1, 2),), 0, 2),), ())


def test_coarser_buckets_and_far_addresses_match_the_reference():
    """On-chip regions spread over megabytes (past the last bucket, as in a lifetime probe's unbounded memory),
    with the default buckets and with buckets 64 times coarser (`DepTracker.coarsen`): the reference's
    dependencies."""
    _compare(range(11, 15), steps=300, capacity=1024, far=True)
    _compare(range(11, 15), steps=300, capacity=1024, far=True, coarsen=64)
    _compare(range(15, 17), steps=300, capacity=1024, coarsen=64)


def test_coarser_buckets_scan_fewer_entries_far_out():
    """Tiles placed over 8 MiB of unbounded SBUF: with the default buckets every region lies past the last bucket
    and each access scans all of them; coarsened buckets keep the scan short (the probe's speed-up can fail)."""
    scans = []
    for factor in (1, 64):
        tracker = DepTracker()
        if factor > 1:
            tracker.coarsen(factor)
        for i in range(1500):
            acc = Access(Space.SBUF, f"t{i}", "float32", 300_000 + i * 4096, 128, ((1, 512),), 0, 1)
            tracker.record(2 * i, (), (acc,))
            tracker.record(2 * i + 1, (acc,), ())
        scans.append(tracker.scanned)
    assert scans[1] * 20 < scans[0], scans


def _far(rng: random.Random, made: list[Access]) -> Access:
    """`_reused_or_new`, new on-chip accesses moved by a random multiple of 256 KiB (up to 5 MiB)."""
    n = len(made)
    acc = _reused_or_new(rng, made)
    if len(made) > n and acc.space is not Space.HBM:
        acc = made[-1] = dataclasses.replace(acc, offset=acc.offset + rng.randrange(21) * 256 * 1024)
    return acc


def _compare(seeds: range, steps: int, capacity: int, far: bool = False, coarsen: int = 1) -> None:
    for seed in seeds:
        rng = random.Random(seed)
        fast, ref = DepTracker(dict(SHAPES), capacity=capacity), Reference()
        if coarsen > 1:
            fast.coarsen(coarsen)
        made: list[Access] = []  # the same operand objects come back (the tracker remembers recent regions)
        access = functools.partial(_far if far else _reused_or_new, rng, made)
        for i in range(steps):
            reads = [access() for _ in range(rng.randint(0, 2))]
            writes = [access() for _ in range(rng.randint(0, 1))]
            assert fast.record(i, tuple(reads), tuple(writes)) == ref.record(i, reads, writes), (seed, i)
            probe = access()
            writers = [e[1] for e in ref.entries.get(_region(probe)[0], [])
                       if e[1] is not None and _meets(e[0], _region(probe))]  # fmt: skip
            assert fast.last_writer(probe) == (max(writers) if writers else None), (seed, i)
