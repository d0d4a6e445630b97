"""Replaying iterations of an `nl.affine_range` / `nl.sequential_range` loop without running the kernel's Python.

Tracing unrolls loops: every iteration runs the kernel's Python, the `nl`/`nisa` layer and the builder. For a
loop whose body is *pure* (`nprof.nki.replay_pure`; inner nl loops allowed), every iteration after the first few
makes the same builder requests with integer operands (HBM offsets, offsets within tiles) that are affine in the
loop index. So `Loop.__iter__` (nprof.nki.scopes) runs iterations 0..3 of such a loop plainly while a `Recorder`
logs the builder requests they make, and when the four logs have the same structure and their integers lie on
one line, it *replays* iterations 4..N-2 from the log (`replay`) and runs iteration N-1 plainly again (so the
kernel's Python names end as after a plain trace). A body whose source is affine in the loop variable
(`nprof.nki.replay_affine`: its integers are affine by construction) is logged for iterations 0..1 only.
Anything else falls back to the plain trace, unchanged.
An inner loop replays inside an outer loop's logged iterations; its requests are told to every enclosing
recorder, so the outer loop later replays whole inner loops.

Replay is exact by construction where it matters: it does not predict instructions, dependencies or addresses.
It calls the builder's own operations (`new_tile`, `materialize`, `_append`, `_emit_matmul`) in the recorded
order with the recorded operands shifted along their line, so allocation, dependency tracking, LDWEIGHTS and
accumulate decisions, DMA queues and tile frees happen exactly as in the plain trace. What it skips is the
kernel's Python, the `nl`/`nisa` argument handling and view arithmetic, which for a pure body depend only on
the loop index. Tests hold replayed Programs identical to plainly traced ones (`tests/nki/test_replay.py`).

The log of iteration k runs from just before the body starts to just before iteration k+1 starts, so it ends
with the frees of the tiles the body's names held (restored by `restore_python_values`).
"""
from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.arch.isa import Access, Space
from nprof.nki import replay_guard
from nprof.nki.replay_affine import MAX_DEGREE
from nprof.nki.replay_pure import affine_body, pure_body
from nprof.nki.source import user_location
from nprof.nki.stamp import stamp
from nprof.nki.stamp_chunk import make_access
from nprof.nki.stamp_tell import Told, flat

if TYPE_CHECKING:
    from nprof.nki.tensor import OnChip
    from nprof.nki.trace import ProgramBuilder

ENABLED = os.environ.get("NPROF_TRACE_REPLAY", "1") != "0"  # tests switch it off to compare with the plain trace
STAMP = os.environ.get("NPROF_TRACE_STAMP", "1") != "0"  # iterations made in bulk (nprof.nki.stamp) where allowed
STAMP_MIN_EVENTS = 64  # events (iterations x body events) below which iterations are replayed one by one
MIN_ITERATIONS = 8  # shorter loops are traced plainly
RECORDED = MAX_DEGREE + 1  # iterations traced plainly (and logged) before replaying the rest: a body's integers are
# polynomials of at most that degree in the loop index (nprof.nki.replay_affine), so on a line over these, on it always
RECORDED_AFFINE = 2  # the same for a body affine in the loop variable by its source (nprof.nki.replay_affine)
ON_LINES_NUMPY = 512  # integers from which `_on_lines` checks with numpy
STATS = {"loops": 0, "iterations": 0, "stamped": 0}  # loops and iterations replayed, iterations of them stamped

# -- recording -------------------------------------------------------------------------------------------------
class Recorder:
    """Logs one iteration's builder requests as (skeleton, integers) events (see module doc)."""

    def __init__(self, builder: ProgramBuilder, parent: Recorder | None = None) -> None:
        self.builder = builder
        self.parent = parent  # the recorder of an enclosing loop: told every request too
        self.iteration = 0
        self.events: list[Any] = []  # event tuples, and `stamp_tell.Told`s
        self.ints: list[int] = []
        self.tiles: dict[int, tuple[int, int, weakref.ref[OnChip]]] = {}  # id(base) -> (iteration, index, base)
        self.by_name: dict[str, int] = {}  # body tile name -> id(base)
        self.at: dict[tuple[bool, int], tuple[int, int, int]] = {}  # (is SBUF, offset) -> placed body tile
        self.count = 0  # tiles allocated in this iteration
        self.in_matmul = False
        self.failed = ""
        self.guards: list[replay_guard.Guard] = []  # the nl layer's branches on the kernel's integers (replay_guard)

    def start(self, iteration: int) -> None:
        self.iteration, self.events, self.ints, self.count, self.guards = iteration, [], [], 0, []
        self.tiles = {k: v for k, v in self.tiles.items() if v[2]() is not None}  # forget dead tiles
        self.by_name = {name: k for name, k in self.by_name.items() if k in self.tiles}

    def fail(self, why: str) -> None:
        self.failed = self.failed or why
        if self.parent is not None:
            self.parent.fail(why)

    def guard(self, value: int, lo: int | None, hi: int | None) -> None:
        """The nl layer branched on `value` (nprof.nki.replay_guard); enclosing recorders are told too."""
        self.guards.append((value, lo, hi))
        if self.parent is not None:
            self.parent.guard(value, lo, hi)

    def _tile(self, base: Any) -> tuple[int, int, OnChip] | None:
        """(iteration, index, base) of a body tile (None for other tiles)."""
        hit = self.tiles.get(id(base))
        live = hit[2]() if hit is not None else None
        if hit is None or live is None or live is not base:
            return None
        return hit[0], hit[1], live

    def _named(self, name: str) -> tuple[int, int, OnChip] | None:
        key = self.by_name.get(name)
        hit = self.tiles.get(key) if key is not None else None
        base = hit[2]() if hit is not None else None
        return None if hit is None or base is None or base.name != name else (hit[0], hit[1], base)

    def alloc(self, base: OnChip, named: bool) -> None:
        if self.parent is not None:
            self.parent.alloc(base, named)
        if named:
            self.fail("a tile allocated in the body has a name")
        self.tiles[id(base)] = (self.iteration, self.count, weakref.ref(base))
        self.by_name[base.name] = id(base)
        self.count += 1
        self.events.append(("alloc", base.shape, base.dtype, base.space, base.partition_axis))

    def materialize(self, base: OnChip, source: str | None) -> None:
        if self.parent is not None:
            self.parent.materialize(base, source)
        hit = self._tile(base)
        if hit is None:
            self.fail("a tile from before the loop is placed in its body")
            return
        self.at[(base.space is Space.SBUF, base.byte_offset)] = (self.iteration - hit[0], hit[1], hit[0])
        self.events.append(("mat", (self.iteration - hit[0], hit[1]), source, user_location(full_path=True)))

    def freed(self, sbuf: bool, start: int) -> None:
        if self.parent is not None:
            self.parent.freed(sbuf, start)
        hit = self.at.pop((sbuf, start), None)
        if hit is None:
            self.fail("a tile from before the loop is freed in its body")
            return
        self.events.append(("free", (self.iteration - hit[2], hit[1])))

    def _access(self, acc: Access) -> tuple[Any, ...]:
        ints = self.ints
        if acc.space is Space.HBM:
            ints.append(acc.offset)
            ints.append(acc.partition_stride)
            return ("H", acc.tensor, acc.dtype, acc.partitions, acc.free)
        hit = self._named(acc.tensor)
        if hit is None:  # a tile from before the loop: name and offset as they are
            ints.append(acc.offset)
            ints.append(acc.partition_start)
            return ("P", acc.space, acc.tensor, acc.dtype, acc.partitions, acc.free)
        ints.append(acc.offset - hit[2].byte_offset)
        ints.append(acc.partition_start)
        return ("T", acc.space, (self.iteration - hit[0], hit[1]), acc.dtype, acc.partitions, acc.free)

    def append(self, engine: Any, opcode: Any, outs: tuple[Access, ...], ins: tuple[Access, ...], attrs: Any,
               source: str | None, extra: bool) -> None:  # fmt: skip
        if self.in_matmul:
            return
        if self.parent is not None:
            self.parent.append(engine, opcode, outs, ins, attrs, source, extra)
        if extra:
            self.fail("an instruction with runtime-addressed regions")
        outs_k = tuple(self._access(a) for a in outs)
        ins_k = tuple(self._access(a) for a in ins)
        self.events.append(("app", engine, opcode, outs_k, ins_k, attrs, source))

    def matmul(self, stat: Access, mov: Access, out: Access, requested: bool, checked: bool, out_base: Any,
               source: str | None) -> None:  # fmt: skip
        if self.parent is not None:
            self.parent.matmul(stat, mov, out, requested, checked, out_base, source)
        keys = (self._access(stat), self._access(mov), self._access(out))
        hit = self._tile(out_base)
        if hit is not None:
            placed: Any = ("T", self.iteration - hit[0], hit[1])
        else:  # the result tile is from before the loop: when its memory was placed is fixed
            placed = ("P", getattr(out_base, "born", 0))
        self.events.append(("mm", *keys, requested, checked, placed, source))


# -- the template and its replay -------------------------------------------------------------------------------
def template(logs: list[tuple[list[Any], list[int]]]) -> tuple[list[Any], list[int], list[int]] | None:
    """(events, integers of the last logged iteration, their step per iteration) when all logs have the same
    events and their integers lie on lines; None otherwise. (Its events may hold `stamp_tell.Told`s: `flat` lays
    them out.)"""
    events = logs[0][0]
    if any(e != events for e, _ in logs[1:]) or len({len(i) for _, i in logs}) != 1:
        return None
    step = [b - a for a, b in zip(logs[-2][1], logs[-1][1], strict=True)]
    if not _on_lines([i for _, i in logs], step):
        return None
    plain = [e for e in events if type(e) is not Told]  # (a Told's own tiles are placed and freed within it)
    frees = [e[1] for e in plain if e[0] == "free"]
    mats = [e[1] for e in plain if e[0] == "mat"]
    own = _own_tiles(plain) and all(e.own_tiles() for e in events if type(e) is Told)
    if sorted(frees) != sorted(mats) or len(set(mats)) != len(mats) or not own:
        return None  # every tile placed in an iteration is freed within it, and no other
    return events, list(logs[-1][1]), step


def _on_lines(ints: list[list[int]], step: list[int]) -> bool:
    """Does each list of integers (all of one length) differ from the one before by `step`? (A few hundred
    integers are checked in Python: numpy's fixed cost per call is larger there.)"""
    if len(ints) * len(step) < ON_LINES_NUMPY:
        return all(y - x == d for p, q in itertools.pairwise(ints) for x, y, d in zip(p, q, step, strict=True))
    try:
        a = np.array(ints, np.int64)
    except OverflowError:
        a = None
    if a is None or (a.size and int(np.abs(a).max()) >= 1 << 61):  # (int64 arithmetic exact below that)
        return all(y - x == d for p, q in itertools.pairwise(ints) for x, y, d in zip(p, q, step, strict=True))
    return bool((np.diff(a, axis=0) == np.array(step, np.int64)).all())


def _own_tiles(events: list[Any]) -> bool:
    """Do the events refer only to tiles allocated in the same iteration (or to tiles from before the loop)?"""
    for e in events:
        refs: list[Any] = []
        if e[0] in ("mat", "free"):
            refs.append(e[1])
        elif e[0] == "app":
            refs += [k[2] for k in (*e[3], *e[4]) if k[0] == "T"]
        elif e[0] == "mm":
            refs += [k[2] for k in e[1:4] if k[0] == "T"]
            if e[6][0] == "T":
                refs.append(e[6][1:])
        if any(r[0] != 0 for r in refs):
            return False
    return True


def replay(builder: ProgramBuilder, events: list[Any], ints: list[int]) -> None:
    """Make the builder requests of one iteration: `events` with integers `ints` (see module doc)."""
    tiles: list[OnChip | None] = []
    it: Iterator[int] = iter(ints)

    def access(key: tuple[Any, ...]) -> Access:
        a, b = next(it), next(it)
        if key[0] == "H":
            return make_access(Space.HBM, key[1], key[2], a, key[3], key[4], 0, b)
        if key[0] == "P":
            return make_access(key[1], key[2], key[3], a, key[4], key[5], b, 1)
        base = tiles[key[2][1]]
        assert base is not None
        return make_access(key[1], base.name, key[3], base.byte_offset + a, key[4], key[5], b, 1)

    for ev in events:
        kind = ev[0]
        if kind == "alloc":
            tiles.append(builder.new_tile(ev[1], ev[2], ev[3], "", ev[4], lazy=True))
        elif kind == "mat":
            builder.materialize(tiles[ev[1][1]], source=ev[2], where=ev[3])
        elif kind == "free":
            tiles[ev[1][1]] = None  # the last reference: the tile's finalizer frees its memory
        elif kind == "app":
            outs = tuple(access(k) for k in ev[3])
            ins = tuple(access(k) for k in ev[4])
            builder._append(ev[1], ev[2], outs, ins, ev[5], ev[6])
        else:  # "mm"
            stat, mov, out = access(ev[1]), access(ev[2]), access(ev[3])
            accumulate, placed = ev[4], ev[6]
            if accumulate and ev[5]:
                born = placed[1] if placed[0] == "P" else tiles[placed[2]].born
                writer = builder._deps.last_writer(out)
                accumulate = not (writer is None or writer < born)
            builder._emit_matmul(stat, mov, out, accumulate, ev[7])
    tiles.clear()


# -- the loop driver -------------------------------------------------------------------------------------------
def _fingerprint(builder: ProgramBuilder) -> tuple[Any, ...]:
    """Builder and kernel-language state the log does not cover; it must not change from iteration to iteration."""
    from nprof.nki import compute, language_ext, masks, range_select

    return (
        len(builder._tensors), builder.cc_next, len(builder.meta), len(builder.direct.tiles),
        len(builder.abandoned_loops), len(builder._scopes), builder._shared_next, len(builder._shared),
        builder._pending is None, *_sizes(compute.MM_WRITTEN), *_sizes(masks._MASKED), len(masks._OPERAND),
        len(range_select._REGISTER),
        len(language_ext._RNG),
    )  # fmt: skip


def _sizes(table: weakref.WeakKeyDictionary[Any, Any]) -> tuple[int, int]:
    """(entries, total length of their values) of a weak-keyed table, read from its inner dict (CPython's `.data`:
    iterating the table itself guards against concurrent removal at several times the cost; a key that died is
    removed from `.data` by its callback at once, outside an iteration of the table)."""
    data = table.data  # type: ignore[attr-defined]
    return len(data), sum(map(len, data.values()))


class Plan:
    """Records the first `RECORDED` iterations of one loop and replays the rest but the last (see module doc)."""

    def __init__(self, builder: ProgramBuilder, length: int, recorded: int = RECORDED) -> None:
        self.builder, self.length, self.recorded = builder, length, recorded
        self.outer = (builder._rec, builder._sbuf.listener, builder._psum.listener)  # an enclosing loop's
        self.rec = Recorder(builder, builder._rec)
        self.logs: list[tuple[list[Any], list[int]]] = []
        self.guards: list[list[replay_guard.Guard]] = []  # per logged iteration (replay_guard)
        self.prints: list[tuple[Any, ...]] = []
        self.done = False
        builder._rec = self.rec
        builder._sbuf.listener = lambda start: self.rec.freed(True, start)
        builder._psum.listener = lambda start: self.rec.freed(False, start)
        replay_guard.LOGGING.append(self.rec)

    @staticmethod
    def start(builder: ProgramBuilder | None, frame: FrameType, length: int) -> Plan | None:
        """A Plan for a loop of `length` iterations run by `frame`, or None when it does not qualify."""
        from nprof.nki.trace import ProgramBuilder

        if (not ENABLED or builder is None or length < MIN_ITERATIONS
                or type(builder) is not ProgramBuilder or not builder.replay_ok or builder.direct.tiles
                or not pure_body(frame)):  # fmt: skip
            return None
        return Plan(builder, length, RECORDED_AFFINE if affine_body(frame) else RECORDED)

    def detach(self) -> None:
        """Stop logging: the enclosing loop's recorder (if any) is told the builder's requests again."""
        b = self.builder
        self.done = True
        if b._rec is self.rec:
            b._rec, b._sbuf.listener, b._psum.listener = self.outer
        if self.rec in replay_guard.LOGGING:
            replay_guard.LOGGING.remove(self.rec)

    def boundary(self, n: int) -> int:
        """Iteration `n` is about to start (the Python names are restored): log, or replay up to the last
        iteration; returns the iteration to run plainly next. Returns `n` and detaches when done or failed."""
        rec = self.rec
        self.prints.append(_fingerprint(self.builder))
        if n:
            self.logs.append((rec.events, rec.ints))
            self.guards.append(rec.guards)
        if rec.failed or not self.prints[-1][8] or (n > 1 and self.prints[-1] != self.prints[1]):
            self.detach()
            return n
        if n < self.recorded:
            rec.start(n)
            return n
        self.detach()
        made = template(self.logs)
        last = self.length - 1
        if made is None or not replay_guard.holds(self.guards, n, last - 1):
            return n
        events, ints, step = made
        STATS["loops"] += 1
        STATS["iterations"] += last - n
        if STAMP and (last - n) * len(events) >= STAMP_MIN_EVENTS:  # all iterations at once (enclosing loops
            # being logged are told, nprof.nki.stamp_tell); a few small iterations replay faster one by one
            stamp(self.builder, events, ints, step, n, last)
            STATS["stamped"] += last - n
            return last
        events = flat(events)
        for k in range(n, last):
            shift = k - (n - 1)
            replay(self.builder, events, [a + shift * d for a, d in zip(ints, step, strict=True)])
        return last
