"""`tensor.ap(..., scalar_offset= / vector_offset=, indirect_dim=)`: access patterns moved by offsets read at run
time (AWS's NkiTensor.ap and nisa.dma_copy "Indirect addressing"), held to numpy indexing of the same data."""

from __future__ import annotations

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import rand


def _sbuf(src, dtype=None):
    t = nl.ndarray(src.shape, dtype=dtype or src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


def _out(t):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_vector_offset_gathers_one_row_per_partition() -> None:
    data = rand((20, 8), 1)
    rows = np.random.default_rng(2).integers(0, 20, (16, 1)).astype(np.int32)  # repeats allowed

    def kernel(d, r):
        idx = _sbuf(r)
        got = nl.ndarray((16, 8), dtype=d.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=got, src=d.ap(pattern=[[8, 16], [1, 8]], vector_offset=idx, indirect_dim=0))
        return _out(got)

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data, rows), data[rows[:, 0]])


def test_vector_offset_scatters_rows_with_a_column_offset() -> None:
    src = rand((6, 4), 3)
    rows = np.array([[5], [0], [7], [2], [3], [1]], np.int32)

    def kernel(s, r):
        idx, t = _sbuf(r), _sbuf(s)
        out = nl.ndarray((8, 10), dtype=s.dtype, buffer=nl.shared_hbm)
        zeros = nl.zeros((8, 10), dtype=s.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=zeros)
        nisa.dma_copy(dst=out.ap(pattern=[[10, 6], [1, 4]], offset=3, vector_offset=idx, indirect_dim=0), src=t)
        return out

    expect = np.zeros((8, 10), np.float32)
    expect[rows[:, 0], 3:7] = src
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, src, rows), expect)


@pytest.mark.parametrize("where", ["hbm", "sbuf"])
def test_scalar_offset_moves_the_whole_pattern(where: str) -> None:
    data = rand((4, 32), 4)
    start = np.array([[11]], np.int32)

    def kernel(d, s):
        off = _sbuf(s)
        src = d if where == "hbm" else _sbuf(d)
        got = nl.ndarray((4, 8), dtype=d.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=got, src=src.ap(pattern=[[32, 4], [1, 8]], scalar_offset=off, indirect_dim=1))
        return _out(got)

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data, start), data[:, 11:19])


def test_a_trace_time_scalar_offset_is_a_static_shift() -> None:
    data = rand((4, 32), 5)

    def kernel(d):
        got = nl.ndarray((4, 8), dtype=d.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=got, src=d.ap(pattern=[[32, 4], [1, 8]], offset=2, scalar_offset=3, indirect_dim=1))
        return _out(got)

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data), data[:, 5:13])


def test_offsets_leaving_the_tensor_fail_when_run_or_are_skipped() -> None:
    data = rand((10, 8), 6)
    rows = np.array([[1], [9], [10], [0]], np.int32)  # row 10 is outside

    def kernel(d, r, skip):
        idx = _sbuf(r)
        got = nl.zeros((4, 8), dtype=d.dtype, buffer=nl.sbuf)
        oob = nisa.oob_mode.skip if skip else nisa.oob_mode.error
        nisa.dma_copy(dst=got, src=d.ap(pattern=[[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0), oob_mode=oob)
        return _out(got)

    with pytest.raises(IndexError, match="out of bounds"):
        nki.simulate_kernel(kernel, data, rows, False)
    got = nki.simulate_kernel(kernel, data, rows, True)
    np.testing.assert_array_equal(got[[0, 1, 3]], data[[1, 9, 0]])
    np.testing.assert_array_equal(got[2], 0)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("both", "mutually exclusive"),
        ("vector_on_chip", "HBM tensors only"),
        ("partition_dim", "partition axis"),
        ("first_pair", "the first pair must be"),
        ("not_a_tile", "SBUF tile of integers"),
        ("bad_dim", "indirect_dim 3"),
    ],
)
def test_offsets_refused_where_aws_does_not_define_them(case: str, message: str) -> None:
    def kernel(d, r):
        idx = _sbuf(r)
        t = _sbuf(d)
        if case == "both":
            d.ap(pattern=[[8, 4], [1, 8]], scalar_offset=idx, vector_offset=idx)
        elif case == "vector_on_chip":
            t.ap(pattern=[[8, 4], [1, 8]], vector_offset=idx)
        elif case == "partition_dim":
            t.ap(pattern=[[8, 1], [1, 8]], scalar_offset=idx[0:1, 0:1], indirect_dim=0)
        elif case == "first_pair":
            d.ap(pattern=[[4, 4], [1, 8]], vector_offset=idx, indirect_dim=0)
        elif case == "not_a_tile":
            d.ap(pattern=[[8, 4], [1, 8]], scalar_offset=1.5)
        else:
            d.ap(pattern=[[8, 4], [1, 8]], scalar_offset=idx[0:1, 0:1], indirect_dim=3)
        return _out(t)

    with pytest.raises(KernelError, match=message):
        nki.simulate_kernel(kernel, rand((4, 8), 7), np.zeros((4, 1), np.int32))
