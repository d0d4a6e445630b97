"""Tiles with block axes before the partition axis: `(B, par_dim(P), F)` allocated, filled whole, indexed per block."""

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import rand


def test_blocked_sbuf_zeros_then_per_block_load_and_accumulate():
    """nl.zeros of a whole (B, P, F) tile memsets every block; block b then holds rows b*P.. of the input."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((3, nl.par_dim(32), 16), dtype=nl.float32, buffer=nl.sbuf)
        i = nl.mgrid[0:32, 0:16]
        for b in nl.affine_range(3):
            acc[b, i.p, i.x] += nl.load(a[b * 32 + i.p, i.x])
            acc[b, i.p, i.x] += nl.load(a[b * 32 + i.p, i.x])
        for b in nl.affine_range(3):
            nl.store(out[b * 32 + i.p, i.x], value=acc[b, i.p, i.x])
        return out

    a = rand((96, 16))
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), 2 * a, rtol=1e-6)


def test_blocked_psum_matmul_accumulators():
    """One PSUM accumulator per block (one bank each), zeroed whole, accumulated by nc_matmul per block."""

    def kernel(lhs_t, rhs):
        k_tiles = lhs_t.shape[0] // 32
        out = nl.ndarray((2, 16, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((2, nl.par_dim(16), 64), dtype=nl.float32, buffer=nl.psum)
        for b in nl.affine_range(2):
            for k in nl.sequential_range(k_tiles):
                lt = nl.load(lhs_t[k * 32 : (k + 1) * 32, b * 16 : (b + 1) * 16])
                rt = nl.load(rhs[k * 32 : (k + 1) * 32, :])
                acc[b] += nisa.nc_matmul(lt, rt)
            nl.store(out[b], value=nl.copy(acc[b]))
        return out

    lhs_t, rhs = rand((64, 32), 1), rand((64, 64), 2)
    got = nki.simulate_kernel(kernel, lhs_t, rhs)
    want = (lhs_t.T @ rhs).reshape(2, 16, 64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_two_block_axes_elementwise_on_whole_tiles():
    """A copy and an in-place add on whole (B1, B2, P, F) tiles pair the same elements of every operand."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray((2, 2, nl.par_dim(8), 4), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(2):
            for j in nl.affine_range(2):
                x[i, j] = nl.load(a[i, j])
        y = nl.ndarray((2, 2, nl.par_dim(8), 4), dtype=nl.float32, buffer=nl.sbuf)
        y[...] = x
        y[...] += x
        for i in nl.affine_range(2):
            for j in nl.affine_range(2):
                nl.store(out[i, j], value=y[i, j])
        return out

    a = rand((2, 2, 8, 4), 3)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), 2 * a, rtol=1e-6)


def test_mixed_partition_positions_refused():
    """A blocked operand paired with a tile whose first axis is its partition axis is refused, not misread."""

    def kernel(a):
        x = nl.zeros((4, nl.par_dim(8), 4), dtype=nl.float32, buffer=nl.sbuf)
        y = nl.zeros((4, 8, 4), dtype=nl.float32, buffer=nl.sbuf)
        z = nl.add(x, y)
        out = nl.ndarray((8, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=z[0])
        return out

    with pytest.raises(KernelError, match="partition axis at different positions"):
        nki.simulate_kernel(kernel, rand((8, 4)))


def test_small_psum_blocks_pack_into_banks():
    """(4, 4, par_dim(32), 128) fp32 in PSUM: 16 blocks of 512 B pack four to a 2 KiB bank (8 KiB, not 16 banks)."""

    def kernel(a, b):
        out = nl.ndarray((4, 4, 32, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 4, nl.par_dim(32), 128), dtype=nl.float32, buffer=nl.psum)
        extra = nl.zeros((2, nl.par_dim(32), 512), dtype=nl.float32, buffer=nl.psum)  # two more whole banks
        bt = nl.load(b)
        for i in nl.affine_range(4):
            for j in nl.affine_range(4):
                acc[i, j] = nisa.nc_matmul(nl.load(a[i, j]), bt)
                nl.store(out[i, j], value=nl.add(acc[i, j], extra[1, :, 0:128]))
        return out

    a, b = rand((4, 4, 16, 32), 7), rand((16, 128), 8)
    want = np.einsum("ijkm,kn->ijmn", a, b)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-4, atol=1e-4)
