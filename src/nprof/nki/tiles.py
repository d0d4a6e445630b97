"""On-chip tile allocation of a `ProgramBuilder`: SBUF/PSUM tiles, their placement and capacity checks.

`alloc` makes a tile view, `new_tile` its base (placed at once, lazily by
`materialize`, or by an `nki.compiler` direct-allocation buffer); tiles are
checked against the preset (partitions, PSUM bank size), recorded for the
viewer's memory view (at most `MAX_ALLOC_RECORDS`), and freed by `_release`
or when Python drops them. Multi-block tiles planned by liveness are placed
block by block (`nprof.nki.blocks`).
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any, cast

from nprof.arch.isa import ITEMSIZE, Space
from nprof.nki.alloc import OutOfMemory, OverCapacity
from nprof.nki.blocks import Blocks
from nprof.nki.direct import make_blocks
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, OnChip, block_stride_elems, psum_block_bytes

if TYPE_CHECKING:
    from nprof.nki.trace import ProgramBuilder

MAX_ALLOC_RECORDS = 20_000  # tile allocations kept in Program.meta['allocations'] (the memory view)


def _v4(preset: Any) -> bool:
    return preset.core == "NeuronCore-v4"


def psum_tile_bytes(preset: Any, blocks: int) -> int:
    """The most bytes per partition of one block of a PSUM tile of `blocks` blocks: a bank, or on NeuronCore-v4
    the whole PSUM for a tile of one block (the NKI API reference lets one `nc_matmul` / `nc_matmul_mx` write up
    to "8x PSUM banks (the entire PSUM)"; its `dst` is such a tile; `nprof.device.mx.moving_fmax`)."""
    return preset.psum_partition_bytes if _v4(preset) and blocks <= 1 else preset.psum_bank_bytes


class TileAllocation:
    """Mixin of `ProgramBuilder`: SBUF/PSUM tile allocation (see module doc)."""

    preset: Any
    allocations: list[list]
    direct: Any
    flush: Any
    source: Any
    _counter: int
    _rec: Any
    _calls: list[list[weakref.ref[OnChip]]]
    _instructions: Any
    _sbuf: Any
    _psum: Any
    _uses_total: dict[tuple[int, int], int] | None

    def alloc(
        self,
        shape: tuple[int, ...],
        dtype: str,
        space: Space,
        name: str = "",
        partition_axis: int = 0,
        *,
        lazy: bool = False,
        direct: Any = None,
    ) -> NkiTensor:
        """A new SBUF/PSUM tile; `lazy` defers reserving memory until `materialize` (a matmul result that
        may be accumulated into another tile instead never takes space); `direct`: an `nki.compiler`
        direct-allocation buffer placing its logical tiles (`nprof.nki.direct`)."""
        return NkiTensor.root(self.new_tile(shape, dtype, space, name, partition_axis, lazy=lazy, direct=direct))

    def new_tile(self, shape: tuple[int, ...], dtype: str, space: Space, name: str = "", partition_axis: int = 0, *,
                 lazy: bool = False, direct: Any = None) -> OnChip:  # fmt: skip
        """`alloc` without the view: the new tile's base."""
        self.flush()  # a pending load/matmul may hold the last reference to a tile: commit it so it can be freed
        base = OnChip(space, "", dtype, tuple(shape), partition_axis, -1, 0, cast("ProgramBuilder", self))
        self._counter += 1
        base.name = name or f"{'sbuf' if space is Space.SBUF else 'psum'}_{self._counter}"
        base.seq = self._counter
        self._check_tile(base)
        if self._rec is not None:
            self._rec.alloc(base, bool(name) or direct is not None)
        if direct is not None:
            base.blocks = make_blocks(base, direct, block_stride_elems(base), len(self._instructions))
            base.byte_offset, base.born = 0, len(self._instructions)
        elif not lazy:
            self.materialize(base)
        if self._calls:
            self._calls[-1].append(weakref.ref(base))
        return base

    def _check_tile(self, base: OnChip) -> None:
        p = self.preset
        shape, partition_axis = base.shape, base.partition_axis
        parts = shape[partition_axis] if shape else 1
        if parts > p.pmax:
            raise kernel_error(
                f"tile {shape} has {parts} partitions; at most {p.pmax} (nl.tile_size.pmax) are allowed — "
                "tile the partition axis"
            )
        if base.space is Space.PSUM:
            per_block = math.prod(shape[partition_axis + 1 :]) * ITEMSIZE[base.dtype]
            if per_block > psum_tile_bytes(p, math.prod(shape[:partition_axis])):
                whole = " (NeuronCore-v4: a tile of one block may span the whole PSUM)" if _v4(p) else ""
                raise kernel_error(
                    f"PSUM tile {shape} {base.dtype} needs {per_block} bytes per partition; a PSUM bank holds "
                    f"{p.psum_bank_bytes} ({p.psum_fmax} fp32, nl.tile_size.psum_fmax){whole}"
                )

    def materialize(self, base: OnChip, source: str | None = None, where: str | None = None) -> None:
        """Reserve memory for a (lazily allocated) tile; KernelError when the memory is full. `source`: the
        kernel line it is recorded at (default: the running one); `where`: the full `file:line` an error names
        (default: the running one; a replayed request's own, see nprof.nki.replay)."""
        if base.byte_offset >= 0:
            return
        shape, partition_axis, item = base.shape, base.partition_axis, ITEMSIZE[base.dtype]
        blocks = math.prod(shape[:partition_axis])
        nbytes, align, block_elems = self.placement(shape, base.dtype, base.space, partition_axis)
        allocator = self._sbuf if base.space is Space.SBUF else self._psum
        if self._uses_total is not None and blocks > 1:  # each block its own live range (nprof.nki.blocks)
            stride = block_stride_elems(base)
            base.blocks = Blocks(stride, stride * item, allocator, align)
            base.byte_offset, base.block_elems = 0, block_elems
            base.token = weakref.finalize(base, base.blocks.free_all)
            if self._rec is not None:
                self._rec.fail("a tile placed block by block")
            return
        try:
            offset = allocator.alloc(nbytes, align)
        except OutOfMemory as err:
            raise self.over_capacity(base, err, where) from None
        base.byte_offset, base.bytes_per_partition, base.block_elems = offset, nbytes, block_elems
        base.born = len(self._instructions)
        base.token = weakref.finalize(base, allocator.free, offset)
        record = len(self.allocations) < MAX_ALLOC_RECORDS  # for the viewer's SBUF/PSUM memory view
        if record or self._rec is not None:
            source = source if source is not None else self.source()
            if record:
                parts = shape[partition_axis] if shape else 1
                self.allocations.append([str.__str__(base.space), base.name, offset, nbytes, parts, source])
            if self._rec is not None:
                self._rec.materialize(base, source)

    def can_place(self, nbytes: int, space: Space = Space.SBUF) -> bool:
        """Could a one-block tile of `nbytes` bytes per partition in `space` be placed now, i.e. is there a free
        range that large (fragmentation included; nothing reserved)? A kernel asks before choosing an optional
        tile (a staging buffer it can do without), so that its choice is made against what the allocator can
        actually place, not against a byte budget."""
        allocator = self._sbuf if space is Space.SBUF else self._psum
        return bool(allocator.placeable(nbytes))

    def placement(self, shape: tuple[int, ...], dtype: str, space: Space, partition_axis: int
                  ) -> tuple[int, int | None, int]:  # fmt: skip
        """(bytes per partition, alignment (None: the allocator's), PSUM element stride between blocks (0: packed))
        that `materialize` reserves for a tile of this shape."""
        item = ITEMSIZE[dtype]
        blocks = math.prod(shape[:partition_axis])
        per_block = math.prod(shape[partition_axis + 1 :]) * item
        if space is Space.PSUM and blocks > 1:  # blocks packed into banks, none straddling one
            stride = psum_block_bytes(shape, partition_axis, dtype, self.preset.psum_bank_bytes)
            return blocks * stride, max(stride, 64), stride // item
        if space is Space.PSUM and blocks * per_block > self.preset.psum_bank_bytes:  # a v4 tile of whole banks
            return blocks * per_block, self.preset.psum_bank_bytes, 0
        return blocks * per_block, None, 0

    def over_capacity(self, base: OnChip, err: OutOfMemory, where: str | None = None) -> OverCapacity:
        """The error for a tile (or block) that does not fit, at the user's line (`where`: see `kernel_error`)."""
        label = "SBUF" if base.space is Space.SBUF else "PSUM"
        how = "even with each tile freed after its last use" if self._uses_total is not None else "live"
        msg = (
            f"{label} over capacity: a {base.shape} {base.dtype} tile needs {err.need} bytes per partition with "
            f"{err.live} of {err.capacity} {how}; use smaller tiles or fewer buffers"
        )
        return OverCapacity(str(kernel_error(msg, where)))

    def _release(self, base: OnChip) -> None:
        base.alive = False
        if base.token is not None:
            base.token()
            base.token = None
