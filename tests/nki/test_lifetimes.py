"""Tile lifetimes as the compiler allocates them (by last use), and loops a kernel leaves early."""

import numpy as np

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from tests.nki.helpers import rand


def test_dead_loop_tiles_leave_their_memory():
    """A PSUM tile made in each iteration (its name still bound after the loop) is dead: all 8 banks fit after."""

    def kernel(a):
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        for i in nl.affine_range(4):
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            t[...] = nl.multiply(x, float(i))
            nl.store(out[i], value=t)
        banks = nl.zeros((8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)  # needs every bank
        nl.store(out[0], value=banks[7])
        return out

    a = rand((128, 512))
    got = nki.simulate_kernel(kernel, a)
    np.testing.assert_allclose(got[1:], [a * i for i in range(1, 4)], rtol=1e-6)
    np.testing.assert_array_equal(got[0], 0)


def test_tiles_collected_in_one_loop_live_until_read_in_another():
    """The beta-2 tutorials keep a Python list of tiles loaded in one loop and read them in the next."""

    def kernel(a):
        out = nl.ndarray((32, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        parts = []
        for k in nl.affine_range(4):
            t = nl.ndarray((32, 8), dtype=a.dtype, buffer=nl.sbuf)
            t[...] = nl.load(a[k])
            parts.append(t)
        total = nl.zeros((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(4):
            total[...] += parts[k]
        nl.store(out, value=total)
        return out

    a = rand((4, 32, 8))
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), a.sum(axis=0), rtol=1e-5)


def test_static_range_tiles_kept_in_a_list():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        parts = [nl.load(a[i * 4 : (i + 1) * 4]) for i in nl.static_range(2)]
        nl.store(out[0:4], value=parts[0])
        nl.store(out[4:8], value=parts[1])
        return out

    a = rand((8, 8))
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)


def test_liveness_when_scopes_do_not_fit():
    """All 8 PSUM banks, then (same scope) more PSUM once they are dead: fits by last use, as compiled."""

    def kernel(q, k):
        out = nl.ndarray((128, 8 * 512 + 128), dtype=nl.float32, buffer=nl.shared_hbm)
        qs, ks = nl.load(q), nl.load(k)
        scores = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(8):
            scores[j] = nisa.nc_matmul(qs, ks[:, j * 512 : (j + 1) * 512])
        row = nl.ndarray((128, 8 * 512), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(8):
            row[:, j * 512 : (j + 1) * 512] = nl.copy(scores[j])
        tail = nisa.nc_transpose(row[:, 0:128])  # needs a bank: only free after `scores` is dead
        nl.store(out[:, 0 : 8 * 512], value=row)
        nl.store(out[:, 8 * 512 :], value=nl.copy(tail))
        return out

    q, k = rand((64, 128), 1), rand((64, 4096), 2)
    got = nki.simulate_kernel(kernel, q, k)
    full = q.T @ k
    np.testing.assert_allclose(got[:, :4096], full, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 4096:], full[:, :128].T, rtol=1e-4, atol=1e-4)


def test_blocks_of_a_tile_live_separately():
    """A (4, 4, par_dim(32), 512) fp32 PSUM tensor is 16 banks (PSUM has 8): each block is its own tile to the
    compiler, alive from its first to its last use, so one row of blocks at a time fits (attention v8a).
    Accumulating with `+=` into a never-written block starts from zero."""

    def kernel(a, b):
        out = nl.ndarray((4, 4, 32, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 4, nl.par_dim(32), 512), dtype=nl.float32, buffer=nl.psum)
        bt = [nl.load(b[k]) for k in range(2)]
        for i in nl.sequential_range(4):
            for j in nl.affine_range(4):
                for k in nl.affine_range(2):
                    acc[i, j] += nisa.nc_matmul(nl.load(a[i, j, k]), bt[k])
                nl.store(out[i, j], value=nl.copy(acc[i, j]))
        return out

    a, b = rand((4, 4, 2, 16, 32), 3), rand((2, 16, 512), 4)
    want = np.einsum("ijkpm,kpn->ijmn", a, b)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-4, atol=1e-4)
