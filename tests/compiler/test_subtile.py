"""Sub-tile lookups (`nprof.compiler.subtile`) against a brute-force map of which HBM element each tile
element holds: every view returned holds exactly the requested elements in order, every box slice of the kept
pattern is found, and patterns reaching outside the tile are refused."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nprof.arch.isa import ITEMSIZE, Access, Space
from nprof.compiler.fusion import FusingBuilder
from nprof.compiler.subtile import KeptPattern, addresses
from nprof.nki import language as nl


def _random_key(rng: random.Random) -> Access:
    """A pattern [P, F1, F2] on a tensor, rows `pstride` apart (row-major free dims, maybe padded)."""
    p, f1, f2 = rng.randint(1, 12), rng.randint(1, 5), rng.randint(1, 9)
    pad = rng.choice([0, 0, 3])
    pstride = f1 * f2 + pad
    return Access(Space.HBM, "t", "float32", rng.randint(0, 5), p, ((f2, f1), (1, f2)), 0, pstride)


def _box(rng: random.Random, key: Access) -> Access:
    """A random box slice of `key`'s logical index space (consecutive partitions, strided free ranges)."""
    p0 = rng.randrange(key.partitions)
    parts = rng.randint(1, key.partitions - p0)
    offset = key.offset + p0 * key.partition_stride
    free = []
    for stride, size in key.free:
        start = rng.randrange(size)
        step = rng.choice([1, 1, 2])
        count = rng.randint(1, max(1, (size - start + step - 1) // step))
        offset += start * stride
        free.append((stride * step, count))
    return Access(Space.HBM, "t", "float32", offset, parts, tuple(free), 0, key.partition_stride)


def _held(view_access: Access, tile_access: Access, key: Access) -> np.ndarray:
    """The HBM address each element of an SBUF view holds, through the tile's layout (brute force)."""
    held = {}
    item = ITEMSIZE["float32"]
    for p, row in enumerate(addresses(key)):
        for f, addr in enumerate(row):
            held[(tile_access.partition_start + p, tile_access.offset // item + f)] = int(addr)
    local = addresses(Access(Space.HBM, "x", "float32", view_access.offset // item, view_access.partitions,
                             view_access.free, 0, 0))  # fmt: skip
    out = np.empty(local.shape, np.int64)
    for p in range(local.shape[0]):
        for f in range(local.shape[1]):
            out[p, f] = held[(view_access.partition_start + p, int(local[p, f]))]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_windows_of_a_kept_tile_hold_exactly_the_requested_elements(seed: int) -> None:
    rng = random.Random(seed)
    key = _random_key(rng)
    builder = FusingBuilder("subtile_test")
    builder.hbm_tensor("t", (key.offset + key.partitions * key.partition_stride + 64,), "float32", "internal")

    def kernel() -> None:
        tile = nl.zeros(key.shape, nl.float32, buffer=nl.sbuf)
        kept = KeptPattern(key, tile)
        tile_access = tile.access()
        box = _box(rng, key)
        view = kept.view(box)
        assert view is not None, (key, box)  # every box slice is a window of the tile
        assert view.shape == box.shape
        np.testing.assert_array_equal(_held(view.access(), tile_access, key), addresses(box))
        other = Access(Space.HBM, "t", "float32", rng.randint(0, 40), rng.randint(1, 6),
                       ((rng.choice([1, 2, 5]), rng.randint(1, 6)),), 0, rng.randint(1, 13))  # fmt: skip
        found = kept.view(other)
        inside = set(addresses(other).ravel()) <= set(addresses(key).ravel())
        if not inside:
            assert found is None  # an element outside the tile: refused
        if found is not None:
            np.testing.assert_array_equal(_held(found.access(), tile_access, key), addresses(other))

    builder.call(kernel)
