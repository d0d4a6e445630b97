"""Lazily committed instructions of a `ProgramBuilder`: matmuls and loads whose destination may change.

`psum_tile += nisa.nc_matmul(a, b)` must become one MATMUL that accumulates
into `psum_tile`, and `tile[...] = nl.load(x)` one DMA into `tile`; but Python
evaluates the right-hand side first. So `nc_matmul` and `nl.load` record a
`_Pending` instead of an instruction; the in-place operator or item assignment
retargets it, and anything else (the next instruction, an allocation, using
the result, the kernel returning) commits it into its own tile. LDWEIGHTS is
emitted before a MATMUL only when the stationary operand (or its content)
changed since the last one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nprof.arch.isa import Access, Engine, Opcode, Space, attrs
from nprof.nki.blocks import placed_at
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, OnChip


@dataclass
class _Pending:
    """A MATMUL or load not yet committed, so `psum += nc_matmul(...)` accumulates in place and
    `tile[...] = nl.load(...)` DMAs straight into `tile`. Committed before any other instruction."""

    kind: str  # "matmul" (a = stationary, b = moving) or "load" (a = source view, already masked)
    a: NkiTensor
    b: NkiTensor | None
    result: NkiTensor
    source: str | None
    box: list[tuple[int, int]] | None = None  # load: the mask's box over the result tile
    skip: bool = False  # matmul: masked off (mask=False), so committing emits nothing
    more: tuple[tuple[NkiTensor, NkiTensor], ...] = ()  # matmul: further (stationary, moving) pairs accumulated
    tile: str | None = None  # matmul in TensorE tiling mode: "start_row,start_column,rows,columns"


class PendingOps:
    """Mixin of `ProgramBuilder` holding at most one pending MATMUL or load (see module doc)."""

    _pending: _Pending | None
    _stationary: Any
    _rec: Any
    _deps: Any
    source: Any
    _append: Any
    materialize: Any
    direct: Any

    def set_pending(self, stationary: NkiTensor, moving: NkiTensor, result: NkiTensor, skip: bool = False,
                    more: tuple[tuple[NkiTensor, NkiTensor], ...] = (), tile: str | None = None) -> None:  # fmt: skip
        """Record a MATMUL of `stationary`.T @ `moving` into `result`, committed lazily (see `_Pending`);
        `skip`: a masked-off matmul (`mask=False`), which commits to nothing; `more`: (stationary, moving) pairs
        accumulated after it into the same result (a double-row matmul); `tile`: its PE tile in tiling mode."""
        self.flush()
        self._pending = _Pending("matmul", stationary, moving, result, self.source(), skip=skip, more=more,
                                 tile=tile)  # fmt: skip

    def set_pending_load(self, src: NkiTensor, result: NkiTensor, box: list[tuple[int, int]] | None) -> None:
        """Record a DMA of `src` into `result` (narrowed to `box`), committed lazily (see `_Pending`)."""
        self.flush()
        self._pending = _Pending("load", src, None, result, self.source(), box)

    def is_pending(self, tile: Any, kind: str | None = None) -> bool:
        pend = self._pending
        if pend is None or not isinstance(tile, NkiTensor) or tile.base is not pend.result.base:
            return False
        return kind is None or pend.kind == kind

    def commit_load(self, target: NkiTensor | None = None) -> None:
        """Emit the pending load's DMA into `target` (same shape and dtype) or its own tile."""
        pend = self._pending
        assert pend is not None and pend.kind == "load"
        self._pending = None
        dst = target if target is not None else pend.result
        if pend.box is not None:
            dst = dst.restrict(pend.box)
        if dst.empty or pend.a.empty:
            return
        out, inp = dst.access(), pend.a.access()
        if out.elements != inp.elements:
            raise kernel_error(f"DMA shapes differ: destination {dst.shape} vs source {pend.a.shape}")
        self._append(Engine.DMA, Opcode.DMA_DIRECT2D, (out,), (inp,), (), pend.source)

    def commit_matmul(self, target: NkiTensor | None = None, accumulate: bool = False) -> None:
        """Emit the pending MATMUL (LDWEIGHTS first if the stationary changed) into `target` or its own tile."""
        pend = self._pending
        assert pend is not None and pend.kind == "matmul" and pend.b is not None
        self._pending = None
        out_view = target if target is not None else pend.result
        if target is None and isinstance(pend.result.base, OnChip):
            self.materialize(pend.result.base)
        if out_view.empty or pend.skip:
            return
        stat, mov, out = pend.a.access(), pend.b.access(), out_view.access()
        rshape = pend.result.shape
        if out.partitions != rshape[0] or out.elements != math.prod(rshape):
            raise kernel_error(f"matmul result {pend.result.shape} does not match its destination {out_view.shape}")
        if out.space is not Space.PSUM:
            raise kernel_error("matmul results accumulate in PSUM; the destination must be a PSUM tile")
        requested = accumulate
        if accumulate and self._fresh(out_view, out):
            accumulate = False  # `psum += matmul` into a region this tile never wrote starts a new sum
        self._emit_matmul(stat, mov, out, accumulate, pend.source, (requested, True, out_view.base), pend.tile)
        for a, b in pend.more:
            more = (True, False, out_view.base)
            self._emit_matmul(a.access(), b.access(), out_view.access(), True, pend.source, more, pend.tile)

    def _emit_matmul(self, stat: Access, mov: Access, out: Access, accumulate: bool, source: str | None,
                     logged: tuple[bool, bool, Any] | None = None, tile: str | None = None) -> None:  # fmt: skip
        """LDWEIGHTS (when the stationary operand or its content changed) then MATMUL. `logged`: (accumulate as
        asked, whether a fresh region turned it off, the result tile) for a loop being logged (nprof.nki.replay).
        `tile`: tiling mode (`_emit_tiled`)."""
        rec = self._rec
        if tile is not None:
            self._emit_tiled(stat, mov, out, accumulate, source, tile)
            return
        if rec is not None and logged is not None:
            rec.matmul(stat, mov, out, *logged, source)
            rec.in_matmul = True
        try:
            # the loaded weights are reused when the operand is the same and nothing wrote it since they were
            # loaded (writers only grow: a last writer after the LDWEIGHTS is one that changed it)
            loaded = self._stationary
            if loaded is None or loaded[0] != stat or _later(self._deps.last_writer(stat), loaded[1]):
                self._stationary = (stat, self._append(Engine.TENSOR, Opcode.LDWEIGHTS, (), (stat,), (), source))
            self._append(Engine.TENSOR, Opcode.MATMUL, (out,), (stat, mov), attrs(accumulate=accumulate), source)
        finally:
            if rec is not None:
                rec.in_matmul = False

    def _emit_tiled(self, stat: Access, mov: Access, out: Access, accumulate: bool, source: str | None,
                    tile: str) -> None:  # fmt: skip
        """A matmul in TensorE tiling mode: LDWEIGHTS and MATMUL tagged `pe_tile=tile` (`nprof.device.pe_tiles`
        times matmuls on disjoint tiles as overlapping). Its weights sit in its tile only, so it always loads
        them and leaves no weights for the next matmul to reuse (a stated choice: a load is a few cycles and
        overlaps the matmul before it). A loop holding it is traced plainly (no replay of its iterations)."""
        if self._rec is not None:
            self._rec.fail("a matmul in TensorE tiling mode (tile_position)")
        self._append(Engine.TENSOR, Opcode.LDWEIGHTS, (), (stat,), attrs(pe_tile=tile), source)
        self._append(Engine.TENSOR, Opcode.MATMUL, (out,), (stat, mov), attrs(accumulate=accumulate, pe_tile=tile),
                     source)  # fmt: skip
        self._stationary = None

    def _fresh(self, view: NkiTensor, out: Access) -> bool:
        """True when no instruction wrote `out`'s region since its tile (block) was placed there: the compiler
        starts an accumulation group (AWS's attention v8a accumulates into nl.ndarray PSUM with `+=`)."""
        writer = self._deps.last_writer(out)
        if writer is None or writer < placed_at(view):
            return True
        direct = self.direct  # direct allocation: another logical tile at the same address wrote it last
        return bool(direct.tiles) and out.tensor in direct.tiles and not direct.wrote(writer, out)

    def flush(self) -> None:
        """Commit the pending MATMUL or load, if any."""
        if self._pending is None:
            return
        if self._pending.kind == "matmul":
            self.commit_matmul()
        else:
            self.commit_load()


def _later(writer: int | None, index: int) -> bool:
    """Did instruction `writer` (None: no writer) come after instruction `index`?"""
    return writer is not None and writer > index
