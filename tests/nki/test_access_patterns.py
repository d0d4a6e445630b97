"""`tensor.ap(pattern, offset=, dtype=)`: explicit [[stride, count], ...] patterns over HBM and on-chip storage,
held to numpy's as_strided on the same flat storage (runtime offsets: test_access_pattern_offsets.py)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import rand


def _strided(flat: np.ndarray, pattern: list[list[int]], offset: int) -> np.ndarray:
    """numpy's reading of a pattern: element offset + sum(i_k * stride_k) of the flat storage."""
    item = flat.itemsize
    return as_strided(flat[offset:], shape=[n for _, n in pattern], strides=[s * item for s, _ in pattern])


def test_hbm_pattern_gathers_like_as_strided() -> None:
    x = rand((4, 6, 10), 1)
    pattern, offset = [[10, 6], [60, 4], [1, 5]], 3  # rows of every block side by side, 5 columns from 3

    def kernel(a):
        t = nl.ndarray((6, 4, 5), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=pattern, offset=offset))
        out = nl.ndarray((6, 4, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), _strided(x.reshape(-1), pattern, offset))


def test_on_chip_pattern_scatters_rows_into_quadrants() -> None:
    """Rows 4q..4q+3 of a [16, F] tensor land on partitions 32q..32q+3 of a [128, F] tile (the first pair steps
    one partition: F elements of the tile's row-major storage)."""
    f = 12
    x = np.random.default_rng(2).integers(1, 255, (16, f), dtype=np.uint8)

    def kernel(a):
        t = nl.ndarray((128, f), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0)
        for q in range(4):
            nisa.dma_copy(src=a.ap(pattern=[[f, 4], [1, f]], offset=4 * q * f),
                          dst=t.ap(pattern=[[f, 4], [1, f]], offset=32 * q * f))  # fmt: skip
        out = nl.ndarray((128, f), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    expect = np.zeros((128, f), np.uint8)
    for q in range(4):
        expect[32 * q : 32 * q + 4] = x[4 * q : 4 * q + 4]
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), expect)


def test_on_chip_pattern_interleaves_within_a_partition() -> None:
    x = rand((8, 3, 5), 3)  # per partition: 3 blocks of 5; read one element of each block in turn

    def kernel(a):
        t = nl.load(a)
        res = nl.ndarray((8, 5, 3), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=t.ap(pattern=[[15, 8], [1, 5], [5, 3]], offset=0))
        out = nl.ndarray((8, 5, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x.transpose(0, 2, 1))


def test_patterns_outside_the_tensor_are_refused() -> None:
    def too_far(a):
        return a.ap(pattern=[[8, 4], [1, 9]])

    def partition_skip(a):
        t = nl.load(a)
        return t.ap(pattern=[[16, 2], [1, 8]])  # steps two partitions at a time

    with pytest.raises(KernelError, match="outside"):
        nki.simulate_kernel(too_far, rand((4, 8), 4))
    with pytest.raises(KernelError, match="one partition"):
        nki.simulate_kernel(partition_skip, rand((4, 8), 5))


def test_ap_signature_and_unknown_keyword() -> None:
    def kernel(a):
        t = nl.load(a)
        assert list(inspect.signature(t.ap).parameters) == [
            "pattern", "offset", "scalar_offset", "vector_offset", "indirect_dim", "dtype",
        ]  # fmt: skip
        t.ap(pattern=[[4, 2], [1, 4]], stride=1)

    with pytest.raises(TypeError, match="stride"):
        nki.simulate_kernel(kernel, rand((2, 4), 7))


def test_tile_reshape_regroups_free_axes() -> None:
    x = rand((8, 3, 4), 8)

    def kernel(a):
        t = nl.load(a)
        flat = t.reshape((8, 12))
        out = nl.ndarray((8, 2, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=flat.reshape((8, 2, 6)))
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x.reshape(8, 2, 6))

    def across_partitions(a):
        return nl.load(a).reshape((4, 24))

    with pytest.raises(KernelError, match="partition axis first"):
        nki.simulate_kernel(across_partitions, x)
