"""SPMD launches (`kernel[grid]`), nl.ds, nl.load_transpose2d, nl.shared_identity_matrix, HBM broadcast loads."""

import numpy as np

import nprof.nki.language as nl
from nprof import nki
from nprof.arch.isa import Opcode
from tests.nki.helpers import rand


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    j = nl.program_id(1)
    rows = a.shape[0] // nl.num_programs(0)
    cols = a.shape[1] // nl.num_programs(1)
    r, c = nl.ds(i * rows, rows), nl.ds(j * cols, cols)
    nl.store(out[r, c], value=nl.load(a[r, c]) + nl.load(b[r, c]))
    return out


def test_spmd_grid_shares_the_output_and_covers_all_tiles():
    a, b = rand((256, 64), 1), rand((256, 64), 2)
    np.testing.assert_allclose(add_kernel[2, 2](a, b), a + b, rtol=1e-6)
    np.testing.assert_allclose(add_kernel[1, 1](a[:128], b[:128]), a[:128] + b[:128], rtol=1e-6)
    launch = add_kernel[2, 2]
    assert launch is add_kernel[(2, 2)]
    prog = launch.trace(a, b).program
    assert len(prog.outputs) == 1
    assert sum(1 for i in prog.instructions if i.opcode is Opcode.DMA_DIRECT2D) == 12


def test_without_grid_program_id_is_zero():
    a, b = rand((64, 8), 3), rand((64, 8), 4)
    np.testing.assert_allclose(add_kernel(a, b), a + b, rtol=1e-6)


def test_load_transpose2d_and_identity_matmul():
    def kernel(x):
        out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load_transpose2d(x)
        eye = nl.load(nl.shared_identity_matrix(t.shape[0], dtype=nl.float32))
        prod = nl.matmul(eye, t, transpose_x=True)  # I.T @ t = t
        nl.store(out, value=prod)
        return out

    x = rand((96, 64), 5)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), x.T, rtol=1e-6)


def test_hbm_broadcast_load_is_one_dma():
    def kernel(row):
        out = nl.ndarray((128, row.shape[1]), dtype=row.dtype, buffer=nl.shared_hbm)
        t = nl.load(row.broadcast_to((128, row.shape[1])))
        nl.store(out, value=t)
        return out

    row = rand((1, 32), 6)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, row), np.broadcast_to(row, (128, 32)))
    prog = nki.Kernel(kernel).trace(row).program
    load = prog.instructions[0]
    assert load.ins[0].partition_stride == 0 and load.ins[0].partitions == 128


def test_benchmark_of_an_spmd_launch(capsys):
    bench = nki.benchmark(warmup=1, iters=3)(add_kernel)
    a, b = rand((256, 64), 7), rand((256, 64), 8)
    np.testing.assert_allclose(bench[2, 1](a, b), a + b, rtol=1e-6)
    assert "NCL(50)" in capsys.readouterr().out
    assert bench[2, 1].benchmark_result is not None


def test_nc_version_follows_the_preset():
    import nprof.nki.isa as nisa

    seen = []

    def kernel(x):
        seen.append(nisa.get_nc_version())
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    x = rand((4, 4), 9)
    nki.jit(kernel)(x)
    nki.jit(kernel, preset="trn2")(x)
    assert seen == [nisa.nc_version.gen2, nisa.nc_version.gen3]


def test_star_import_exports_only_the_language():
    ns: dict = {}
    exec("from nprof.nki.language import *", ns)
    assert "exp" in ns and "affine_range" in ns and "np" not in ns and "Engine" not in ns


def test_a_zero_grid_is_refused_with_the_fix():
    import pytest

    from nprof.errors import NprofError

    a = rand((128, 8), 6)
    with pytest.raises(NprofError, match=r"launches no instance.*kernel\[1\]"):
        add_kernel[0](a, a)


@nki.jit
def _doubled(tile):
    twice = nl.ndarray(tile.shape, dtype=nl.float32, buffer=nl.sbuf)
    twice[...] = nl.multiply(tile, 2.0)
    return twice, [nl.add(tile, 1.0)]  # a tile and a list holding one: both handed to the caller


def test_tiles_returned_by_a_nested_jit_helper_live_on_in_the_caller():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        twice, (plus_one,) = _doubled(t)
        clobber = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)  # must not reuse the helper's tiles
        clobber[...] = nl.add(t, 100.0)
        nl.store(out, value=nl.add(twice, plus_one))
        return out

    a = rand((128, 8), 7)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), 2 * a + (a + 1), rtol=1e-6, atol=1e-6)
