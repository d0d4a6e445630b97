"""Tile lifetimes as the Neuron compiler allocates them, and loops a kernel leaves early.

The compiler allocates SBUF/PSUM by liveness: a tile's range is free after
the last instruction that uses it, whatever names still refer to it in the
kernel's source (a tile made in each loop iteration, or one whose name stays
bound after its loop, takes no space once dead). Tracing sees the kernel in
program order, not its future, so tiles are first freed when Python drops
them; when that does not fit (`OverCapacity`), `nki.jit` traces the kernel
twice more: a probe with unbounded memory counts each tile's uses
(`use_counts`, tiles numbered in allocation order), then the real trace frees
every tile right after the instruction making its last use
(`plan_lifetimes(uses_total=...)`), block by block for multi-block tiles
(`nprof.nki.blocks`). Tiles that stay referenced (a Python list
of tiles filled in one loop and read in another) live until their last use,
as in both NKI API generations.

`Loop` (`nl.affine_range` / `nl.sequential_range`) iterates like `range` and
notices a kernel leaving the loop early (`return`/`break` in the body): NKI
traces a loop body once for all iterations, so such a kernel computes every
iteration on Neuron while unrolled tracing would silently skip the rest — a
KernelError instead (`check_loops_completed`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import math
import sys
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from nprof.errors import KernelError
from nprof.nki.alloc import OutOfMemory
from nprof.nki.replay import Plan
from nprof.nki.source import user_location

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor, OnChip


@contextlib.contextmanager
def old_generation_paused() -> Iterator[None]:
    """Defer the cyclic GC's full (oldest-generation) collections while a kernel is traced.

    A trace builds ~5 long-lived objects per instruction; each full collection rescans all of them (a quarter of
    the time of a large trace). Young collections still run exactly as before, so a tile that becomes cyclic
    garbage while young is freed as before; tiles are otherwise freed by reference counting, which the GC does
    not affect. Restores the thresholds on exit.
    """
    t0, t1, t2 = gc.get_threshold()
    gc.set_threshold(t0, t1, max(t2, 1 << 30))
    try:
        yield
    finally:
        gc.set_threshold(t0, t1, t2)


_WHOLE = [-1]  # the "block" of a single-block tile
PROBE_BUCKETS = 64  # dependency buckets this many times coarser in a lifetime probe (SBUF: 64 KiB each, 16 MiB in
# all before the list of regions past the last bucket; nprof.nki.deps.DepTracker.coarsen)


class LoopScopes:
    """Mixin of `ProgramBuilder`: lifetime planning (uses per tile) and loops left early."""

    abandoned_loops: list[str]  # loops left before their last iteration (checked when the kernel returns)
    replay_ok: bool
    use_counts: dict[tuple[int, int], int]  # (tile, block or -1) -> uses so far
    _uses_total: dict[tuple[int, int], int] | None
    _dying: list[tuple[OnChip, int]]
    over_capacity: Any
    _instructions: Any
    _sbuf: Any
    _psum: Any
    _deps: Any
    _release: Any
    direct: Any

    def plan_lifetimes(self, *, virtual: bool = False, uses_total: dict[tuple[int, int], int] | None = None) -> None:
        """`virtual`: unbounded SBUF/PSUM (a probe trace); `uses_total`: tile -> uses, each tile freed after
        its last one (from a probe of the same kernel and arguments)."""
        self.use_counts, self._uses_total, self._dying, self.abandoned_loops = {}, uses_total, [], []
        self.replay_ok = not virtual and uses_total is None  # loops replayed only in plain traces (nprof.nki.replay)
        if virtual:
            self._sbuf.capacity = self._psum.capacity = 1 << 40
            self._deps.coarsen(PROBE_BUCKETS)  # (tiles placed far past the capacity: coarser dependency buckets)

    def note_use(self, view: NkiTensor) -> int:
        """An instruction being built reads or writes `view` (of an on-chip tile): count the use of its tile, or of
        each block it touches, and place blocks in per-block mode; returns the byte offset of the view's base.
        After its last use a tile (block) dies (see module doc)."""
        base: OnChip = view._base
        delta = base.byte_offset
        if base.blocks is not None:
            from nprof.nki.blocks import place

            delta, span = self._place(view, place)
            if base.name in self.direct.tiles:
                self.direct.noted(view, delta, span)
        elif base.partition_axis > 0 and math.prod(base.shape[: base.partition_axis]) > 1:
            from nprof.nki.blocks import block_span
            from nprof.nki.tensor import block_stride_elems

            b0, b1 = block_span(view, block_stride_elems(base))
            span = list(range(b0, b1 + 1))
        else:
            span = _WHOLE
        for b in span:
            key = (base.seq, b)
            n = self.use_counts[key] = self.use_counts.get(key, 0) + 1
            if self._uses_total is not None and self._uses_total.get(key) == n:
                self._dying.append((base, b))
        return delta

    def _place(self, view: NkiTensor, place: Any) -> tuple[int, list[int]]:
        base: OnChip = view.base  # type: ignore[assignment]
        try:
            if hasattr(base.blocks, "place_view"):  # direct allocation: placed as the kernel says
                return base.blocks.place_view(view, len(self._instructions))
            return place(view, base.blocks, base.blocks.align, len(self._instructions))
        except OutOfMemory as err:
            raise self.over_capacity(base, err) from None

    def release_dead(self) -> None:
        """Free the tiles (blocks) whose last use was the instruction just appended."""
        for base, block in self._dying:
            if block < 0:
                self._release(base)
            elif base.blocks is not None:
                base.blocks.free_block(block)
        self._dying.clear()

    def check_loops_completed(self) -> None:
        """KernelError when the kernel left an nl.affine_range/sequential_range loop early (see module doc)."""
        if self.abandoned_loops:
            where = self.abandoned_loops[0]
            self.abandoned_loops.clear()
            raise KernelError(
                f"{where}: the kernel leaves this loop before its last iteration (a return or break inside the "
                "body); NKI runs a loop body for every iteration — move the return after the loop"
            )


class Loop:
    """`nl.affine_range(...)` / `nl.sequential_range(...)`: iterates like `range` (see module doc)."""

    def __init__(self, r: range) -> None:
        self.range = r
        self.where = user_location(full_path=True) or "<loop>"

    def __len__(self) -> int:
        return len(self.range)

    def __iter__(self) -> Iterator[int]:
        from nprof.nki import trace

        builder = trace._ACTIVE[-1] if trace._ACTIVE else None
        values = self.range
        last = len(values) - 1
        frame = sys._getframe(1)  # the kernel's frame running the `for` (this generator starts on its first next())
        before = python_values(frame) if builder is not None and last > 0 else None
        plan = Plan.start(builder, frame, len(values)) if before is not None else None
        n = 0
        try:
            while n <= last:
                if n and before is not None:
                    restore_python_values(frame, before)
                if plan is not None:  # iterations replayed without the kernel's Python (nprof.nki.replay)
                    n = plan.boundary(n)
                    if plan.done:
                        plan = None
                try:
                    yield values[n]
                except GeneratorExit:  # the body returned or broke out of the loop
                    if n < last and builder is not None:
                        builder.abandoned_loops.append(self.where)
                    raise
                n += 1
        finally:
            if plan is not None:
                plan.detach()


def python_values(frame: FrameType) -> dict[str, Any]:
    """The kernel's local names and their values (without nprof's own loop-return flags)."""
    return {name: value for name, value in frame.f_locals.items() if not name.startswith("_nprof_")}


def restore_python_values(frame: FrameType, before: dict[str, Any]) -> None:
    """Put the kernel's local names back as they were before the loop (NKI traces the body once).

    NKI traces an `nl.affine_range` / `nl.sequential_range` body once for all iterations (the loop stays a loop in
    the compiled kernel), so every iteration starts from the state before the loop: Python values the body changes
    (an address counter advanced per direct allocation, an offset incremented) change once, a name the body rebinds
    to a new tile refers to the tile from before the loop in every iteration, and names the body introduces are
    unbound again (tiles made by an iteration are not visible to the next one, and are freed here when nothing else
    refers to them). nprof runs the body for each iteration, so it restores this state before each iteration after
    the first. Mutated objects (a list appended to) are not undone; names the body deleted stay deleted.
    """
    now = frame.f_locals
    changed = {name: value for name, value in before.items() if now.get(name, value) is not value}
    added = set(now).difference(before)  # (a set operation: this runs once per iteration of every loop)
    if added:
        added = {name for name in added if not name.startswith("_nprof_")}
    if not changed and not added:
        return
    now.update(changed)  # Python >= 3.13: f_locals writes through to the frame
    for name in added:
        try:
            del now[name]
        except TypeError:  # Python >= 3.13 cannot unbind a local: None drops the reference all the same
            now[name] = None
    if sys.version_info < (3, 12):
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(1))  # 1: unbind the rest
    elif sys.version_info < (3, 13):  # 3.12 rebinds the names to None instead, with a RuntimeWarning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(1))
