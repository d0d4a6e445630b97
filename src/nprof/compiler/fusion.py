"""Fusion of consecutive lowerings: tiles stay in SBUF across kernels instead of round-tripping HBM.

Contract: `FusingBuilder` is the compiler's `ProgramBuilder`. Each graph node is lowered by its own kernel,
which DMAs its operands from HBM (`kernels.hbm.load`) and its result back (`kernels.hbm.store`). The builder
keeps a bounded cache of on-chip tiles keyed by the exact HBM access pattern they hold:

* `remember_store(access, tile)`: after a kernel stores an fp32 SBUF tile to an fp32 HBM region, the tile
  is kept (not freed when its kernel returns) under that region's pattern;
* `remember_load(access, tile)`: a tile loaded from HBM is kept the same way;
* `lookup(access)`: a later load of exactly that pattern returns the kept tile: no DMA, no fixed DMA
  latency, the consumer depends on the producer's compute instruction directly (an elementwise chain, a
  matmul epilogue followed by its activation, a weight tile reused by the next image all stay in SBUF).
  A load of a pattern that is a window of one kept tile (a slice, a half, consecutive partitions of it, the
  same region seen with other size-1 strides) returns that window of the tile (`nprof.compiler.subtile`:
  exact by construction), when it is contiguous within each partition.

The cache is exact by construction: an entry is dropped as soon as any instruction writes its HBM tensor
where the spans (least to greatest element offset) of the two patterns meet, so partial overlaps are
covered, or writes into its SBUF tile (a consumer updating the tile
in place). The tile holds the very bits the HBM region holds (same fp32 values), so numerics are
unchanged. Kept tiles use at most `budget_fraction` of SBUF per partition, least recently used first out;
when a kernel's own allocation does not fit, the whole cache is dropped and the allocation retried.
A tile handed to the running kernel is freed with that kernel's tiles, never under it.

Around it: `nprof.compiler.tilechoice` picks the tiling a kernel follows so that its operands' kept tiles
serve it, and `nprof.compiler.deadstores` removes the stores nothing reads any more once it is built.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

from nprof.arch.isa import Access, Opcode, Space
from nprof.compiler import balance, packing
from nprof.compiler.balance import EngineClock
from nprof.compiler.blockstage import BlockStage
from nprof.compiler.extents import Footprint, distinct, exact_cover, numel_of, span
from nprof.compiler.packing import OutputStage, Pack, in_pack, load_member
from nprof.compiler.regather_check import CONV_CHECK_NAME, NONFINITE_CHECK_NAME, ONEHOT_CHECK_NAME, RegatherCheck
from nprof.compiler.rowpack import RowPack, load_rows
from nprof.compiler.subtile import KeptPattern
from nprof.errors import KernelError
from nprof.nki.tensor import NkiTensor, OnChip
from nprof.nki.trace import ProgramBuilder

ENABLED = True  # module switch for tests comparing fused with unfused lowering


class FusingBuilder(ProgramBuilder):
    """A `ProgramBuilder` with the SBUF tile cache described in the module doc."""

    budget_fraction = 0.5

    def __init__(self, name: str, preset: str = "trn1", enabled: bool | None = None) -> None:
        super().__init__(name, preset)
        self.fusing = ENABLED if enabled is None else enabled
        self._cache: OrderedDict[Access, NkiTensor] = OrderedDict()
        # HBM tensor or SBUF allocation name -> its keys, each with its element span (computed once)
        self._by_tensor: dict[str, dict[Access, tuple[int, int]]] = {}
        self._kept: dict[int, list[Any]] = {}  # id(base) -> [base, number of entries]
        self._kept_bytes = 0
        self._handed: list[set[int]] = []  # per running call: ids of the bases it allocated or was handed
        self._budget = int(self.preset.sbuf_partition_bytes * self.budget_fraction)
        self._tiling: dict[str, tuple[Any, list[Access]]] = {}  # HBM tensor -> (writing scope, its stores)
        self._loads: dict[str, tuple[Any, list[Access]]] = {}  # HBM tensor -> (last loading scope, its loads)
        self._covered: dict[tuple[str, int, str], bool] = {}
        self._dma_counts = [0, 0]  # DMAs given a queue so far: [others, loads of graph inputs]
        self._copies = 0
        self._patterns: dict[Access, KeptPattern] = {}  # kept key -> its address tables (sub-tile lookups)
        self.pack: Pack | None = None  # the packed small inputs (`nprof.compiler.packing`), set by the emitter
        self.rows: RowPack | None = None  # the packed inputs of at most pmax rows (`nprof.compiler.rowpack`)
        self.rows_written: set[str] = set()  # members of `rows` an instruction writes (read from their own tensor)
        # small outputs, one DMA per stage: fp32 columns, int32 scalars (`nprof.compiler.staging`)
        self.stages = ([OutputStage(self), OutputStage(self, "int32", packing.INT_OUT_PACK_NAME, 1, 1)]
                       if self.fusing and packing.ENABLED else [])  # fmt: skip
        self.nonfinite: set[str] = set()  # HBM tensors that may hold +-inf/NaN: never regathered (`regather`)
        self.input_taint: dict[str, frozenset[str]] = {}  # HBM tensor -> float graph inputs whose inf reaches it
        self.guard_inputs: set[str] = set()  # inputs whose inf a regather made would spread (`regather`)
        self.regathers = True  # False: no load is served by a regather (the program run when a check failed)
        self.check = RegatherCheck(self) if self.fusing else None  # is every regather exact? (`regather_check`)
        self.onehot_check = RegatherCheck(self, ONEHOT_CHECK_NAME)  # ... every one-hot matmul (`kernels.onehot`)
        self.conv_check = RegatherCheck(self, CONV_CHECK_NAME)  # ... every conv kernel's results (`conv_check`)
        self.nonfinite_check = RegatherCheck(self, NONFINITE_CHECK_NAME)  # `regather_check.nonfinite_checked`
        self.promotable: set[str] = set()  # internal tensors that may become graph outputs (`Lowerer._outputs`)
        self.blocks = BlockStage(self) if self.stages else None  # outputs stored as row blocks: one DMA
        self.clock = EngineClock(self.preset) if self.fusing and balance.ENABLED else None  # `compiler.balance`

    # ----- the cache --------------------------------------------------------------------------------------------
    def packed_load(self, access: Access) -> NkiTensor | None:
        """A load of `access` served from the group tile of a packed input (`nprof.compiler.packing`), or
        None (not a member, not a group pattern, or fusion off)."""
        if not self.fusing or access.space is not Space.HBM:
            return None
        if self.rows is not None and access.tensor in self.rows.members:
            return load_rows(self, self.rows, access, self.rows_written)
        if self.pack is None or not self.pack.holds(access.tensor):
            return None
        return load_member(self, self.pack, access)

    def lookup(self, access: Access, contiguous: bool = True) -> NkiTensor | None:
        """The kept tile holding exactly `access` (an HBM pattern), or a window of one (contiguous within each
        partition unless not `contiguous`: a DMA source may be strided), or None."""
        if not self.fusing:
            return None
        tile = self._cache.get(access)
        if tile is None:
            tile = self._window_of_kept(access, contiguous=contiguous)
            if tile is None:
                return None
        else:
            self._cache.move_to_end(access)
        base = cast(OnChip, tile.base)  # cached tiles are on chip
        if self._calls and self._handed and id(base) not in self._handed[-1]:
            self._handed[-1].add(id(base))
            self._calls[-1].append(weakref.ref(base))  # freed with this call's tiles unless still kept
        return tile

    max_window_candidates = 8

    def holds(self, access: Access) -> bool:
        """Would a load of `access` be served from SBUF (a kept tile or a window of one)? Changes nothing."""
        if not self.fusing:
            return False
        return access in self._cache or self._window_of_kept(access, keep=False) is not None

    def _window_of_kept(self, access: Access, keep: bool = True, contiguous: bool = True) -> NkiTensor | None:
        """A window of a kept tile holding exactly `access` (contiguous within each partition, unless not
        `contiguous`), kept under `access` too (when `keep` and contiguous); None when no kept tile of its
        tensor holds it (see `nprof.compiler.subtile`)."""
        keys = self._by_tensor.get(access.tensor)
        if not keys or access.space is not Space.HBM:
            return None
        lo, hi = span(access)
        tried = 0
        for key, (k_lo, k_hi) in reversed(list(keys.items())):
            if key.tensor != access.tensor or key.dtype != access.dtype or k_lo > lo or k_hi < hi:
                continue
            if key.elements < access.elements and (contiguous or key.elements < distinct(access)):
                continue
            tried += 1
            if tried > self.max_window_candidates:
                return None
            kept = self._patterns.get(key)
            if kept is None:
                kept = self._patterns[key] = KeptPattern(key, self._cache[key])
            view = kept.view(access)
            flat = view is not None and view.flatten_free() is not None
            if view is None or (contiguous and not flat):
                continue
            if keep and flat:
                self._cache.move_to_end(key)
                self.remember(access, view, stored=False, exact=True)
            return view
        return None

    def kept_covering(self, access: Access) -> list[tuple[Access, NkiTensor]]:
        """The kept (pattern, tile) entries of `access`'s tensor whose span holds its span, latest first (at
        most `max_window_candidates`): candidates for `nprof.compiler.regather`."""
        if not self.fusing or access.space is not Space.HBM:
            return []
        lo, hi = span(access)
        found = []
        for key, (k_lo, k_hi) in reversed(list(self._by_tensor.get(access.tensor, {}).items())):
            if key.tensor == access.tensor and key.dtype == access.dtype and k_lo <= lo and hi <= k_hi:
                found.append((key, self._cache[key]))
                if len(found) >= self.max_window_candidates:
                    break
        return found

    def remember(self, access: Access, tile: NkiTensor, stored: bool = True, exact: bool = False) -> None:
        """Keep `tile` (an SBUF tile of shape access.shape) as the content of the HBM pattern `access`
        (`stored`: the kernel just stored it there, which also records the pattern in the tensor's tiling).
        Only fp32 tiles of fp32 HBM patterns are kept, or fp32 tiles whose values every dtype holds exactly
        (`exact`: 0/1 results of comparisons stored as bool), so a reload would give the same fp32 values."""
        if not self.fusing or access.space is not Space.HBM or not isinstance(tile, NkiTensor):
            return
        if stored:
            self._tiling.setdefault(access.tensor, (self._scope_key(), []))[1].append(access)
        base = tile.base
        if not isinstance(base, OnChip) or base.space is not Space.SBUF or tile.shape != access.shape:
            return
        if tile.dtype_name != "float32" or (access.dtype != "float32" and not exact):
            return
        if base.bytes_per_partition <= 0:
            return
        self._drop(access)
        entry = self._kept.get(id(base))
        if entry is None:
            if base.bytes_per_partition > self._budget:
                return
            while self._kept_bytes + base.bytes_per_partition > self._budget and self._cache:
                self._drop(next(iter(self._cache)))
            entry = self._kept[id(base)] = [base, 0]
            self._kept_bytes += base.bytes_per_partition
        entry[1] += 1
        self._cache[access] = tile
        extent = span(access)
        self._by_tensor.setdefault(access.tensor, {})[access] = extent
        self._by_tensor.setdefault(base.name, {})[access] = extent

    def _drop(self, access: Access) -> None:
        tile = self._cache.pop(access, None)
        if tile is None:
            return
        self._patterns.pop(access, None)
        base = cast(OnChip, tile.base)
        for name in (access.tensor, base.name):
            keys = self._by_tensor.get(name)
            if keys is not None:
                keys.pop(access, None)
                if not keys:
                    del self._by_tensor[name]
        entry = self._kept[id(base)]
        entry[1] -= 1
        if entry[1] == 0:
            del self._kept[id(base)]
            self._kept_bytes -= base.bytes_per_partition
            if not any(id(base) in handed for handed in self._handed):
                super()._release(base)  # not in use by a running kernel: free it now

    def _invalidate(self, written: Access) -> None:
        """Drop the entries a write of `written` could make stale: every entry of an SBUF tile written to,
        the entries of an HBM tensor whose element span meets the written span."""
        keys = self._by_tensor.get(written.tensor, {})
        if written.space is not Space.HBM:
            for access in list(keys):
                self._drop(access)
            return
        footprint = Footprint(written)  # its addresses computed once, if some entry needs an exact answer
        lo, hi = footprint.lo, footprint.hi
        for access, (a_lo, a_hi) in list(keys.items()):
            if access.tensor != written.tensor:
                self._drop(access)  # `written` names an SBUF tile that has the HBM tensor's name (never in practice)
                continue
            if a_lo <= hi and lo <= a_hi and footprint.meets(access):
                self._drop(access)

    def drop_all(self) -> None:
        for access in list(self._cache):
            self._drop(access)

    def _scope_key(self) -> Any:
        return self._scopes[-1] if self._scopes else None

    def tiling(self, tensor: str, shape: tuple[int, ...]) -> list[Access] | None:
        """The store patterns with which the last graph node writing `tensor` (contiguous, of `shape`)
        covered it exactly, each element once; else the load patterns with which the last node loading it
        (since its last write) did so (`note_load`); None when unknown or not an exact cover."""
        if not self.fusing:
            return None
        for kind, table in (("stored", self._tiling), ("loaded", self._loads)):
            entry = table.get(tensor)
            if entry is None:
                continue
            accesses = entry[1]
            key = (tensor, len(accesses), kind)
            if key not in self._covered:
                self._covered[key] = exact_cover(accesses, numel_of(shape))
            if self._covered[key]:
                return accesses
        return None

    def note_load(self, access: Access) -> None:
        """Record a DMA load of `access` by the running node in its tensor's load tiling (`tiling`)."""
        if not self.fusing or access.space is not Space.HBM:
            return
        entry = self._loads.get(access.tensor)
        if entry is None or entry[0] != self._scope_key():
            entry = self._loads[access.tensor] = (self._scope_key(), [])
            self._covered = {k: v for k, v in self._covered.items() if k[0] != access.tensor}
        entry[1].append(access)

    # ----- builder hooks ----------------------------------------------------------------------------------------
    def _append(self, engine: Any, opcode: Opcode, outs: tuple[Access, ...], *rest: Any, **kw: Any) -> int:
        """Every write (to HBM or into an SBUF tile) drops the cache entries it could make stale."""
        if self.stages:
            reads = (*rest[0], *(rest[3] if len(rest) > 3 else kw.get("extra_reads", ())))
            for stage in self.stages:
                stage.before_append(outs, reads)
            if self.blocks is not None:
                self.blocks.before_append(outs, reads)
        if self._by_tensor:
            for out in outs:
                self._invalidate(out)
                if self.pack is not None and out.space is Space.HBM and self.pack.holds(out.tensor):
                    self._invalidate(in_pack(self.pack, out))  # the member's elements in its group tiles
        if self.fusing:
            for out in outs:
                entry = self._tiling.get(out.tensor)
                if entry is not None and entry[0] != self._scope_key():
                    del self._tiling[out.tensor]  # another node writes it: its tiling is no longer known
                self._loads.pop(out.tensor, None)
                if self.rows is not None and out.space is Space.HBM and out.tensor in self.rows.members:
                    self.rows_written.add(out.tensor)  # later reads of it come from its own tensor
        index = super()._append(engine, opcode, outs, *rest, **kw)
        if opcode is Opcode.DMA_DIRECT2D:
            # a compiled graph's DMAs all carry the user's line of their node: spread them round-robin over
            # the queues (as the seed's compiler does), not one queue per source line, so they overlap; loads
            # of graph inputs (ready at once) on one half, the rest (stores, reloads: ready when computed) on
            # the other, so that a prefetch never waits in a queue behind a store (a queue runs in order).
            # Measured (bench/compile.py): nanoGPT backward 43.5 -> 39.2 us (forward 26.4 -> 26.6); the
            # resnet-shaped CNN 954.6 -> 962.8 us; other rules tried were worse for one or the other (a load
            # skipping queues whose last DMA is a store: CNN backward 685 -> 832 us; 1/4 or 3/4 of the queues
            # for loads: CNN 1015 or 1005 us)
            ins = self._instructions[index]
            self._instructions[index] = dataclasses.replace(ins, queue=self._next_queue(ins))
        if self.clock is not None:
            self._rebalance(index)
        return index

    def _rebalance(self, index: int) -> None:
        """Move instruction `index` to the engine the clock says ends it first (`nprof.compiler.balance`; not
        while a loop is logged for replay) and record it on the clock."""
        assert self.clock is not None
        placed = self._instructions[index]
        if self._rec is None:
            chosen = self.clock.choose(placed)
            if chosen is not placed.engine:
                placed = dataclasses.replace(placed, engine=chosen)
                self._instructions[index] = placed
        self.clock.add(index, placed)

    def _next_queue(self, ins: Any) -> int:
        """The queue of the DMA `ins` (see `_append`): loads of graph inputs in turn over the first half of
        the queues, the other DMAs in turn over the second half."""
        n = self.preset.dma_queues
        src = ins.ins[0] if ins.ins else None
        decl = self.tensors().get(src.tensor) if src is not None and src.space is Space.HBM else None
        prefetch = decl is not None and decl.kind in ("input", "weight")
        half = max(1, n // 2)
        count = self._dma_counts[prefetch]
        self._dma_counts[prefetch] += 1
        return count % half if prefetch or n == 1 else half + count % (n - half)

    def next_copy_engine(self) -> Any:
        """The engine for the next balanced copy (`nprof.compiler.kernels.engines`): VectorE and ScalarE in
        turn."""
        from nprof.nki import isa as nisa

        if self.clock is not None:
            return nisa.vector_engine  # placed by the engine clock when appended (`nprof.compiler.balance`)
        self._copies += 1
        return nisa.vector_engine if self._copies % 2 else nisa.scalar_engine

    def stage_output(self, access: Access, tile: NkiTensor) -> bool:
        """Stage the store of `tile` to `access` (`packing.OutputStage.stage`); False: store it now."""
        return any(stage.stage(access, tile) for stage in self.stages) or (
            self.blocks is not None and self.blocks.stage(access, tile)
        )

    def _release(self, base: OnChip) -> None:
        if id(base) in self._kept or any(stage.owns(base) for stage in self.stages) or (
            self.blocks is not None and self.blocks.owns(base)
        ) or (self.check is not None and self.check.owns(base)) or self.onehot_check.owns(base) or (
            self.conv_check.owns(base) or self.nonfinite_check.owns(base)
        ):
            return  # kept for a later kernel (freed when its entries are dropped), or the output stage
        super()._release(base)

    def materialize(self, base: OnChip, source: str | None = None, where: str | None = None) -> None:
        try:
            super().materialize(base, source, where)
        except KernelError:
            if not self._cache:
                raise
            self.drop_all()
            super().materialize(base, source, where)

    def can_place(self, nbytes: int, space: Space = Space.SBUF) -> bool:
        """`ProgramBuilder.can_place`, after dropping the kept tiles when they are in the way (as `materialize`
        would before failing)."""
        if super().can_place(nbytes, space):
            return True
        if not self._cache:
            return False
        self.drop_all()
        return super().can_place(nbytes, space)

    def alloc(self, *args: Any, **kwargs: Any) -> NkiTensor:
        tile = super().alloc(*args, **kwargs)
        if self._handed:
            self._handed[-1].add(id(tile.base))  # in use by the running kernel: never freed under it
        return tile

    def call(self, kernel_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._handed.append(set())
        try:
            return super().call(kernel_fn, *args, **kwargs)
        finally:
            self._handed.pop()
