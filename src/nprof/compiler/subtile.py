"""Sub-tiles: a load of an HBM pattern served by a view of an SBUF tile that holds a larger pattern.

Contract: `KeptPattern(key, tile)` describes an SBUF tile (an `NkiTensor` of shape ``key.shape``) whose every
element holds the HBM element `key` addresses at the same logical position. `KeptPattern.view(a)` returns an
`NkiTensor` view of that tile holding exactly the elements the HBM pattern `a` addresses, in `a`'s logical
order — or None when `a` is not such a view: some element of `a` is not in the tile, or `a`'s partitions are
not consecutive partitions of the tile, or `a`'s free dims are not an affine (strided) window of each tile
partition. A view is exact by construction: every element of the returned view is checked to be a tile
element holding the same HBM address (a window that merely looks plausible is refused). The fusion cache
(`nprof.compiler.fusion`) uses it so that a consumer loading a slice, a half, a shifted window or the same
region with different size-1 strides of what a producer kept in SBUF reads it on-chip instead of through a
DMA.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nprof.arch.isa import Access
from nprof.nki.tensor import NkiTensor


def addresses(a: Access) -> np.ndarray:
    """The element offsets `a` addresses, as an int64 array of shape ``(partitions, free elements)``."""
    idx = np.zeros(1, np.int64)
    for stride, size in reversed(a.free):
        idx = (stride * np.arange(size, dtype=np.int64)[:, None] + idx[None, :]).ravel()
    rows = a.offset + a.partition_stride * np.arange(a.partitions, dtype=np.int64)
    return rows[:, None] + idx[None, :]


def _free_offsets(dims: tuple[tuple[int, int, int], ...], e0: int) -> np.ndarray:
    """Element offsets within a partition of a tile view's free dims (logical order, flattened)."""
    idx = np.zeros(1, np.int64)
    for _, step, size in reversed(dims):
        idx = (step * np.arange(size, dtype=np.int64)[:, None] + idx[None, :]).ravel()
    return e0 + idx


@dataclass
class KeptPattern:
    """An SBUF tile holding the HBM pattern `key` (see module doc); address tables built on first use."""

    key: Access
    tile: NkiTensor
    _sorted: np.ndarray | None = field(default=None, repr=False)
    _order: np.ndarray | None = field(default=None, repr=False)

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        if self._sorted is None or self._order is None:
            flat = addresses(self.key).ravel()
            self._order = np.argsort(flat, kind="stable")
            self._sorted = flat[self._order]
        return self._sorted, self._order

    def view(self, a: Access) -> NkiTensor | None:
        """The view of the tile holding exactly `a`'s elements in `a`'s order, or None (see module doc)."""
        p0, e0, dims = self.tile.access_key()
        if not dims or (dims[0][0] != 1 and dims[0][2] > 1) or dims[0][1] != 0:
            return None  # the tile's first axis is not a plain partition axis
        if any(ps != 0 for ps, _, size in dims[1:] if size > 1):
            return None
        table, order = self._tables()
        want = addresses(a)
        pos = np.searchsorted(table, want)
        if (pos >= table.size).any():
            return None
        pos_clipped = np.minimum(pos, table.size - 1)
        if not np.array_equal(table[pos_clipped], want):
            return None  # some element of `a` is not in the tile
        per_partition = max(1, self.key.free_elements)
        part, free = np.divmod(order[pos_clipped], per_partition)
        first = part[:, :1]
        if not (part == first).all() or not (np.diff(first[:, 0]) == 1).all():
            return None  # a partition of `a` spans several tile partitions, or they are not consecutive
        offsets = _free_offsets(dims[1:], e0)[free]
        if not (offsets == offsets[:1]).all():
            return None  # partitions of `a` sit at different offsets within their tile partitions
        sizes = tuple(size for _, size in a.free) or (1,)
        grid = offsets[0].reshape(sizes)
        base = int(grid.flat[0])
        steps = []
        for axis, size in enumerate(sizes):
            unit = tuple(1 if k == axis and size > 1 else 0 for k in range(len(sizes)))
            steps.append(int(grid[unit]) - base if size > 1 else 0)
        rebuilt = np.full(sizes, base, np.int64)
        for axis, (step, size) in enumerate(zip(steps, sizes, strict=True)):
            shape = [1] * len(sizes)
            shape[axis] = size
            rebuilt = rebuilt + step * np.arange(size, dtype=np.int64).reshape(shape)
        if not np.array_equal(rebuilt, grid):
            return None  # not an affine window of the tile's partition
        view_dims = ((1, 0, a.partitions), *((0, step, size) for step, size in zip(steps, sizes, strict=True)))
        if not a.free:
            view_dims = view_dims[:1]
        return NkiTensor(self.tile.base, p0 + int(first[0, 0]), base, view_dims, ())
