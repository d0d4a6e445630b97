"""Invalid kernels fail at trace time with the user's file:line and a clear message."""

import re

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError, NprofError


def _fails(kernel, *arrays, match: str) -> KernelError:
    with pytest.raises(KernelError, match=match) as err:
        nki.simulate_kernel(kernel, *arrays)
    assert re.match(r"^\S*test_errors\.py:\d+: \S", str(err.value)), str(err.value)
    assert "\n" not in str(err.value)
    return err.value


def _line_of(fn, needle: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if needle in text)


def test_too_many_partitions():
    def kernel(x):
        return nl.load(x)  # BAD

    err = _fails(kernel, np.zeros((256, 4), np.float32), match="256 partitions")
    assert f"test_errors.py:{_line_of(kernel, '# BAD')}:" in str(err)


def test_out_of_bounds_hbm_access_without_mask():
    def kernel(x):
        i_p = 128 + nl.arange(128)[:, None]
        i_f = nl.arange(4)[None, :]
        nl.load(x[i_p, i_f])  # BAD

    err = _fails(kernel, np.zeros((250, 4), np.float32), match="out-of-bounds.*axis 0")
    assert f"test_errors.py:{_line_of(kernel, '# BAD')}:" in str(err)


def test_out_of_bounds_slice():
    def kernel(x):
        nl.load(x[128:256, :])

    _fails(kernel, np.zeros((250, 4), np.float32), match="out-of-bounds access: indices 128..255.*mask=")


def test_matmul_tile_limits():
    def stationary_too_wide(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))

    _fails(
        stationary_too_wide,
        np.zeros((128, 256), np.float32),
        np.zeros((128, 64), np.float32),
        match="stationary free size 256",
    )

    def moving_too_wide(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))

    _fails(
        moving_too_wide,
        np.zeros((128, 64), np.float32),
        np.zeros((128, 1024), np.float32),
        match="moving free size 1024",
    )

    def k_mismatch(a, b):
        nisa.nc_matmul(nl.load(a), nl.load(b))

    _fails(k_mismatch, np.zeros((64, 64), np.float32), np.zeros((32, 64), np.float32), match="contraction mismatch")


def test_sbuf_over_capacity():
    def kernel(x):
        tiles = []
        for _ in range(8):
            tiles.append(nl.load(x))  # all used below, so all live at once: 8 x 32 KiB > 192 KiB
        total = tiles[0]
        for t in tiles[1:]:
            total = nl.add(total, t)
        return total

    _fails(kernel, np.zeros((128, 8192), np.float32), match="SBUF over capacity")


def test_psum_tile_over_a_bank_and_psum_capacity():
    def too_big(x):
        nl.zeros((128, 1024), nl.float32, buffer=nl.psum)

    _fails(too_big, np.zeros((1, 1), np.float32), match="PSUM bank")

    def too_many(x):
        banks = [nl.zeros((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]  # all read below
        for b in banks[1:]:
            banks[0][...] += b

    _fails(too_many, np.zeros((1, 1), np.float32), match="PSUM over capacity")


def test_unsupported_dtype():
    def kernel(x):
        nl.ndarray((4, 4), dtype=np.complex64)

    _fails(kernel, np.zeros((1, 1), np.float32), match="unsupported dtype")


def test_compute_on_hbm_tensor_and_partition_reduce():
    def compute_hbm(x):
        nl.exp(x)

    _fails(compute_hbm, np.zeros((4, 4), np.float32), match="nl.load it")

    def reduce_partitions(x):
        nl.sum(nl.load(x), axis=0)

    _fails(reduce_partitions, np.zeros((4, 4), np.float32), match="partition axis")


def test_shape_mismatch_and_bad_mask():
    def bad_store(x):
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))

    _fails(bad_store, np.zeros((4, 4), np.float32), match="does not match")

    def coupled_mask(x):
        i_p, i_f = nl.mgrid[0:4, 0:4]
        nl.load(x[i_p, i_f], mask=(i_p >= i_f))

    _fails(coupled_mask, np.zeros((4, 4), np.float32), match="couples two axes")


def test_bad_kernel_arguments_are_nprof_errors():
    def kernel(x):
        return x

    with pytest.raises(NprofError, match="returns its input"):
        nki.simulate_kernel(kernel, np.zeros((2, 2), np.float32))
    with pytest.raises(NprofError, match="missing a required argument"):
        nki.simulate_kernel(kernel)
