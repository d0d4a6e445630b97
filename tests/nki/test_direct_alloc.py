"""Direct allocation (`nki.compiler.sbuf/psum.alloc/mod_alloc`): tiles at the given addresses, the modulo
scheme, placement rules, lifetime conflicts refused, aliasing by design computed right — numpy references."""

import functools

import numpy as np
import pytest

import nprof.nki.compiler as ncc
import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.arch.isa import Opcode, Space
from nprof.errors import KernelError
from nprof.nki.calls import NkiCompatWarning
from nprof.nki.kernel import Kernel
from tests.nki.helpers import rand


def _offsets(kernel, *arrays, space=Space.SBUF, opcode=Opcode.DMA_DIRECT2D):
    """Byte offsets of the on-chip destinations of `opcode` instructions, in program order."""
    program = Kernel(kernel).trace(*arrays).program
    return [acc.offset for ins in program.instructions if ins.opcode is opcode for acc in ins.outs
            if acc.space is space]  # fmt: skip


def test_sbuf_mod_alloc_rotates_blocks_over_physical_tiles():
    """(4, par_dim(P), 64) fp32 with base_addr=1024, num_free_tiles=(2,): blocks at 1024, 1280, 1024, 1280."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((4, nl.par_dim(32), 64), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))  # fmt: skip
        for i in nl.affine_range(4):
            t[i] = nl.load(a[i])
            nl.store(out[i], value=t[i])
        return out

    a = rand((4, 32, 64))
    assert _offsets(kernel, a) == [1024, 1280, 1024, 1280]
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)


def test_sbuf_alloc_func_and_psum_mod_alloc_banks():
    """`sbuf.alloc(func)` gets (idx, partitions, bytes per partition); `psum.mod_alloc` rotates banks."""
    seen = []

    def place(block, idx, pdim_size, fdim_size):  # called by keyword, so a leading bound argument works
        seen.append((idx, pdim_size, fdim_size))
        return 0, block + 4096 - idx[0] * fdim_size

    def kernel(a, b):
        out = nl.ndarray((3, 16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((3, nl.par_dim(8), 16), dtype=nl.float32, buffer=ncc.sbuf.alloc(functools.partial(place, 0)))
        y = nl.ndarray((nl.par_dim(8), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        ps = nl.ndarray((3, nl.par_dim(16), 32), dtype=nl.float32,
                        buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))  # fmt: skip
        res = nl.ndarray((nl.par_dim(16), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=256))
        y[...] = nl.load(b)
        for i in nl.affine_range(3):
            x[i] = nl.load(a[i])
            ps[i] = nisa.nc_matmul(x[i], y)
            res[...] = nl.copy(ps[i])
            nl.store(out[i], value=res)
        return out

    a, b = rand((3, 8, 16), 1), rand((8, 32), 2)
    assert _offsets(kernel, a, b, space=Space.PSUM, opcode=Opcode.MATMUL) == [2 * 2048, 3 * 2048, 2 * 2048]
    assert seen[:3] == [((0,), 8, 64), ((1,), 8, 64), ((2,), 8, 64)]
    want = np.einsum("ipm,pn->imn", a, b)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-5, atol=1e-5)


def test_reading_a_tile_another_one_overwrote_is_a_lifetime_conflict():
    """Two tensors at overlapping addresses, both alive: the read of the first is refused at its line."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t0 = nl.ndarray((nl.par_dim(16), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t1 = nl.ndarray((nl.par_dim(16), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=128))
        t0[...] = nl.load(a)
        t1[...] = nl.load(a)
        nl.store(out, value=t0)  # t1 overwrote bytes 128..255 of t0
        return out

    with pytest.raises(KernelError, match=r"test_direct_alloc\.py:\d+: lifetime conflict.*num_free_tiles"):
        nki.simulate_kernel(kernel, rand((16, 64)))


def test_two_physical_tiles_for_eight_live_blocks_is_refused_like_the_guide_says():
    """AWS's guide: 8 logical tiles loaded in one loop and read in the next need 8 physical tiles, not 2."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((8, nl.par_dim(16), 32), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))  # fmt: skip
        for i in nl.affine_range(8):
            t[i] = nl.load(a[i])
        for i in nl.affine_range(8):
            nl.store(out[i], value=nl.exp(t[i]))
        return out

    with pytest.raises(KernelError, match="lifetime conflict"):
        nki.simulate_kernel(kernel, rand((8, 16, 32)))


def test_psum_tile_reused_by_design_starts_a_new_sum_per_logical_tile():
    """All q-blocks of a PSUM tensor share one bank (num_bank_tiles=(1,)); `+=` starts a fresh sum in each."""

    def kernel(a, b):
        nq = a.shape[0]
        out = nl.ndarray((nq, 16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((nq, nl.par_dim(16), 32), dtype=nl.float32,
                        buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))  # fmt: skip
        x = nl.ndarray((nl.par_dim(8), 16), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        y = nl.ndarray((nl.par_dim(8), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=64))
        res = nl.ndarray((nl.par_dim(16), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=192))
        for q in nl.affine_range(nq):
            for k in nl.affine_range(2):
                x[...] = nl.load(a[q, k])
                y[...] = nl.load(b[k])
                ps[q] += nisa.nc_matmul(x, y)
            res[...] = nl.copy(ps[q])
            nl.store(out[q], value=res)
        return out

    a, b = rand((3, 2, 8, 16), 3), rand((2, 8, 32), 4)
    want = np.einsum("qkpm,kpn->qmn", a, b)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-5, atol=1e-5)


def test_automatic_temporaries_stay_out_of_direct_ranges():
    """nprof's own intermediate tiles (an op's result before assignment) never land on a direct tile."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        keep = nl.ndarray((nl.par_dim(32), 256), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        work = nl.ndarray((nl.par_dim(32), 256), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        keep[...] = nl.load(a)
        for _ in nl.affine_range(3):
            work[...] = nl.multiply(nl.exp(keep), 2.0)  # temporaries for exp and multiply
        nl.store(out, value=nl.add(work, keep))
        return out

    a = rand((32, 256), 5)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), 2 * np.exp(a) + a, rtol=1e-5)


@pytest.mark.parametrize(
    "buffer, message",
    [
        (lambda: ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (32, 0)), "must start at 0"),
        (lambda: ncc.psum.mod_alloc(base_bank=0, base_addr=64), "byte_addr must be 0"),
        (lambda: ncc.psum.mod_alloc(base_bank=8), "PSUM has banks 0..7"),
        (lambda: ncc.sbuf.mod_alloc(base_addr=192 * 1024 - 32), "outside the 196608-byte SBUF partition"),
        (lambda: ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: 0), "must return"),
    ],
)
def test_placement_rules_are_checked_at_the_declaration(buffer, message):
    space = nl.psum if "psum" in buffer().name else nl.sbuf

    def kernel(a):
        t = nl.ndarray((nl.par_dim(128), 16), dtype=nl.float32, buffer=buffer())
        t[...] = nl.load(a) if space is nl.sbuf else 0.0
        return None

    with pytest.raises(KernelError, match=r"test_direct_alloc\.py:\d+: .*" + message):
        Kernel(kernel).trace(rand((128, 16)))


def test_a_tile_in_the_compilers_reserved_top_of_sbuf_warns_and_runs():
    """byte_addr must be below 176 KiB per AWS's reference; the memory exists, so nprof simulates and warns."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((nl.par_dim(16), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=177 * 1024))
        t[...] = nl.load(a)
        nl.store(out, value=t)
        return out

    a = rand((16, 64))
    with pytest.warns(NkiCompatWarning, match="top 16 KiB"):
        np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)
