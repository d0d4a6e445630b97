"""Per-block placement of multi-block tiles under lifetime planning.

A tile `(B..., par_dim(P), F...)` is B independent tiles to the Neuron
compiler (AWS NKI docs, "NKI programming model": the dimensions before the
partition dimension are block dimensions), each allocated for its own live
range. Attention v8a declares a PSUM tensor of `num_tile_q * 8` banks and uses
one row of blocks per q-tile: it fits only because each block lives from its
first to its last use. When the builder plans lifetimes (the retry after an
`OverCapacity`, see `nprof.nki.scopes`), `BlockPlacer.place` gives each block
its own SBUF/PSUM range at its first use and frees it after its last; a view
that spans several blocks places them as one contiguous group (freed when
all of them are dead).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.nki.dtypes import NUMPY
from nprof.nki.source import kernel_error

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor


@dataclass
class Blocks:
    """Where each placed block of one tile lives: block -> (group start, byte offset)."""

    stride: int  # elements between blocks in the tile's (virtual) layout
    nbytes: int  # bytes one block occupies
    allocator: Any
    align: int | None = None  # alignment of each placement (PSUM: the block stride, so none straddles a bank)
    placed: dict[int, tuple[int, int]] = field(default_factory=dict)
    born: dict[int, int] = field(default_factory=dict)  # block -> instruction count when it was placed
    group_live: dict[int, int] = field(default_factory=dict)  # group start -> blocks not yet dead

    def view_stride(self, view: NkiTensor) -> int:
        """Elements of `view`'s dtype between blocks (a view may read the tile in another dtype: `.view`)."""
        return self.nbytes // _itemsize(view)  # (a block occupies exactly its stride)

    def free_block(self, block: int) -> None:
        """Block `block` is dead; its group's range is freed with the last block of the group."""
        entry = self.placed.get(block)
        if entry is None:
            return
        group = entry[0]
        self.group_live[group] -= 1
        if self.group_live[group] == 0:
            self.allocator.free(group)
            del self.group_live[group]

    def free_all(self) -> None:
        for group in list(self.group_live):
            self.allocator.free(group)
        self.group_live.clear()


def block_span(view: NkiTensor, stride: int) -> tuple[int, int]:
    """First and last block (of `stride` elements) the view's elements fall in."""
    lo = hi = view._e0
    for _, es, size in view._dims:
        ext = es * (size - 1)
        lo += min(0, ext)
        hi += max(0, ext)
    return lo // stride, hi // stride


def placed_at(view: NkiTensor) -> int:
    """Instruction count when the memory under `view` was given to its tile (or first block): earlier writes
    there belong to other tiles."""
    base = view.base
    blocks = getattr(base, "blocks", None)
    if blocks is not None:
        span = _inclusive(block_span(view, blocks.view_stride(view)))
        return max((blocks.born.get(b, 0) for b in range(*span)), default=0)
    return getattr(base, "born", 0)


def _inclusive(span: tuple[int, int]) -> tuple[int, int]:
    return span[0], span[1] + 1


def place(view: NkiTensor, blocks: Blocks, align: int | None, now: int = 0) -> tuple[int, list[int]]:
    """Byte delta so that `delta + e0 * itemsize` addresses the view's blocks, and the blocks it touches."""
    b0, b1 = block_span(view, blocks.view_stride(view))
    span = list(range(b0, b1 + 1))
    missing = [b for b in span if b not in blocks.placed]
    if missing and len(missing) != len(span):
        raise kernel_error(
            f"this view of tile {view.name!r} spans blocks {b0}..{b1}, some already placed apart (each block is "
            "its own tile to the compiler); index one block at a time"
        )
    if missing:
        start = blocks.allocator.alloc(blocks.nbytes * len(span), align)
        blocks.group_live[start] = len(span)
        for k, b in enumerate(span):
            blocks.placed[b] = (start, start + k * blocks.nbytes)
            blocks.born[b] = now
    groups = {blocks.placed[b][0] for b in span}
    offsets = [blocks.placed[b][1] - (b - b0) * blocks.nbytes for b in span]
    if len(groups) != 1 or len(set(offsets)) != 1:
        raise kernel_error(
            f"this view of tile {view.name!r} spans blocks {b0}..{b1} placed apart; index one block at a time"
        )
    return offsets[0] - b0 * blocks.nbytes, span


def _itemsize(view: NkiTensor) -> int:
    return int(np.dtype(NUMPY[view.dtype_name]).itemsize)
