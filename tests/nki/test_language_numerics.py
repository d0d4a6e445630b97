"""Numerics of the `nl` language through the virtual device, against numpy."""

import math

import ml_dtypes
import numpy as np
import pytest

import nprof.nki.language as nl
from nprof import nki
from tests.nki.helpers import rand, run_tiles

UNARY = {
    "exp": (nl.exp, np.exp),
    "log": (nl.log, np.log),
    "tanh": (nl.tanh, np.tanh),
    "sigmoid": (nl.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "relu": (nl.relu, lambda x: np.maximum(x, 0)),
    "silu": (nl.silu, lambda x: x / (1 + np.exp(-x))),
    "sqrt": (nl.sqrt, np.sqrt),
    "rsqrt": (nl.rsqrt, lambda x: 1 / np.sqrt(x)),
    "reciprocal": (nl.reciprocal, lambda x: 1 / x),
    "negative": (nl.negative, np.negative),
    "abs": (nl.abs, np.abs),
    "square": (nl.square, np.square),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_activations(name):
    op, ref = UNARY[name]
    positive = name in ("log", "sqrt", "rsqrt", "reciprocal")
    x = rand((128, 64), seed=1, lo=0.5 if positive else -3.0, hi=3.0)
    np.testing.assert_allclose(run_tiles(op, x), ref(x), rtol=1e-5, atol=1e-6)


def test_gelu_close_to_reference():
    x = rand((64, 32), seed=2)
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(run_tiles(nl.gelu, x), ref, atol=2e-3)


BINARY = {
    "add": (nl.add, np.add),
    "subtract": (nl.subtract, np.subtract),
    "multiply": (nl.multiply, np.multiply),
    "divide": (nl.divide, np.divide),
    "maximum": (nl.maximum, np.maximum),
    "minimum": (nl.minimum, np.minimum),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tile_tile(name):
    op, ref = BINARY[name]
    a, b = rand((128, 96), 3), rand((128, 96), 4, lo=0.5)
    np.testing.assert_allclose(run_tiles(op, a, b), ref(a, b), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_scalar_both_sides(name):
    op, ref = BINARY[name]
    a = rand((32, 16), 5, lo=0.5)
    np.testing.assert_allclose(run_tiles(lambda t: op(t, 1.5), a), ref(a, np.float32(1.5)), rtol=1e-6)
    np.testing.assert_allclose(run_tiles(lambda t: op(1.5, t), a), ref(np.float32(1.5), a), rtol=1e-6)


def test_power_and_python_operators():
    a, b = rand((16, 8), 6, lo=0.5), rand((16, 8), 7, lo=0.5)
    out = run_tiles(lambda x, y: (x + y) * 2.0 - y / x + (-x) + x**2.0, a, b)
    np.testing.assert_allclose(out, (a + b) * 2 - b / a - a + a**2, rtol=1e-5)
    np.testing.assert_allclose(run_tiles(lambda x, y: nl.power(x, y), a, b), a**b, rtol=1e-5)
    np.testing.assert_allclose(run_tiles(lambda x: 3.0 - x, a), 3 - a, rtol=1e-6)


def test_broadcast_column_and_row():
    a, col, row = rand((64, 40), 8), rand((64, 1), 9), rand((1, 40), 10)
    np.testing.assert_allclose(run_tiles(lambda x, c: x - c, a, col), a - col, rtol=1e-6)
    np.testing.assert_allclose(run_tiles(lambda x, c: c - x, a, col), col - a, rtol=1e-6)
    np.testing.assert_allclose(run_tiles(lambda x, c: nl.divide(c, x), a, col), col / a, rtol=1e-5)
    np.testing.assert_allclose(run_tiles(lambda x, r: x * r, a, row), a * row, rtol=1e-6)
    np.testing.assert_allclose(run_tiles(lambda x, r: r - x, a, row), row - a, rtol=1e-6)


def test_comparisons_give_zero_one():
    a, b = rand((16, 8), 11), rand((16, 8), 12)
    np.testing.assert_array_equal(run_tiles(nl.greater, a, b), (a > b).astype(np.float32))
    np.testing.assert_array_equal(run_tiles(lambda x: x <= 0.0, a), (a <= 0).astype(np.float32))


@pytest.mark.parametrize(
    ("fn", "ref"),
    [
        (lambda t: nl.sum(t, axis=1), lambda x: x.sum(axis=1)),
        (lambda t: nl.sum(t, axis=1, keepdims=True), lambda x: x.sum(axis=1, keepdims=True)),
        (lambda t: nl.max(t, axis=1, keepdims=True), lambda x: x.max(axis=1, keepdims=True)),
        (lambda t: nl.min(t, axis=-1, keepdims=True), lambda x: x.min(axis=1, keepdims=True)),
        (lambda t: nl.mean(t, axis=1, keepdims=True), lambda x: x.mean(axis=1, keepdims=True)),
    ],
)
def test_reductions_over_free_axis(fn, ref):
    x = rand((100, 70), 13)
    np.testing.assert_allclose(run_tiles(fn, x), ref(x), rtol=1e-5, atol=1e-5)


def test_reduction_over_inner_axis_of_3d_tile():
    def kernel(t):
        tile = nl.load(t)
        s = nl.sum(tile, axis=2)
        out = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=s)
        return out

    x = rand((32, 4, 8), 14)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), x.sum(axis=2), rtol=1e-5)


def test_softmax_copy_transpose_where():
    x = rand((128, 100), 15, lo=-5, hi=5)
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(
        run_tiles(lambda t: nl.softmax(t, axis=1), x), ref / ref.sum(1, keepdims=True), atol=1e-6
    )
    np.testing.assert_array_equal(run_tiles(nl.copy, x), x)
    y = rand((96, 64), 16)
    np.testing.assert_array_equal(run_tiles(nl.transpose, y), y.T)
    c = (rand((96, 64), 17) > 0).astype(np.float32)
    np.testing.assert_array_equal(run_tiles(lambda cc, v: nl.where(cc, v, -1.0), c, y), np.where(c != 0, y, -1))


def test_matmul_with_and_without_transpose():
    a, b = rand((64, 128), 18), rand((128, 256), 19)

    def plain(x, y):
        return nl.copy(nl.matmul(x, y))

    np.testing.assert_allclose(run_tiles(plain, a, b), a @ b, rtol=1e-4, atol=1e-4)
    at = np.ascontiguousarray(a.T)
    np.testing.assert_allclose(
        run_tiles(lambda x, y: nl.matmul(x, y, transpose_x=True), at, b), a @ b, rtol=1e-4, atol=1e-4
    )


def test_psum_accumulation_over_sequential_k_loop():
    def kernel(lhsT, rhs):
        k_total, m = lhsT.shape
        _, n = rhs.shape
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((m, n), nl.float32, buffer=nl.psum)
        for k in nl.sequential_range(k_total // 128):
            st = nl.load(lhsT[k * 128 : (k + 1) * 128, :])
            mv = nl.load(rhs[k * 128 : (k + 1) * 128, :])
            acc[...] += nl.matmul(st, mv, transpose_x=True)
        nl.store(out, value=acc)
        return out

    lhsT, rhs = rand((512, 96), 20), rand((512, 200), 21)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_partial_tiles_with_masks_250_rows():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows, cols = x.shape
        i_f = nl.arange(cols)[None, :]
        for p in nl.affine_range(math.ceil(rows / 128)):
            i_p = p * 128 + nl.arange(128)[:, None]
            t = nl.load(x[i_p, i_f], mask=(i_p < rows))
            nl.store(out[i_p, i_f], value=nl.tanh(t, mask=(i_p < rows)) * 2.0, mask=(i_p < rows))
        return out

    x = rand((250, 33), 22)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), np.tanh(x) * 2, rtol=1e-5)


def test_free_axis_mask_and_slices():
    def kernel(x):
        out = nl.ndarray((64, 48), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:64, 0:64]
        t = nl.load(x[i_p, i_f], mask=(i_f < 48))
        nl.store(out[0:64, 0:48], value=t[:, 0:48])
        return out

    x = rand((64, 48), 23)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x)


def test_bfloat16_tiles_and_dtype_conversion():
    x = rand((128, 64), 24).astype(ml_dtypes.bfloat16)

    def kernel(t):
        tile = nl.load(t)
        y = nl.exp(tile, dtype=nl.float32)
        z = nl.add(tile, tile)  # stays bf16
        out1 = nl.ndarray(y.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray(z.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out1, value=y)
        nl.store(out2, value=z)
        return out1, out2

    y, z = nki.simulate_kernel(kernel, x)
    assert z.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y, np.exp(x.astype(np.float32)), rtol=1e-5)
    np.testing.assert_array_equal(z.astype(np.float32), (x.astype(np.float32) * 2))


def test_block_tiles_with_par_dim():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((2, nl.par_dim(128), 16), dtype=x.dtype, buffer=nl.sbuf)
        for b in nl.affine_range(2):
            buf[b] = nl.load(x[b * 128 : (b + 1) * 128, :])
        for b in nl.affine_range(2):
            nl.store(out[b * 128 : (b + 1) * 128, :], value=nl.exp(buf[b]))
        return out

    x = rand((256, 16), 25)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), np.exp(x), rtol=1e-6)


def test_full_zeros_ones_and_scalar_assignment():
    def kernel(x):
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.full((16, 8), 2.5, nl.float32)
        t[0:4, :] = 0.0
        t = t + nl.ones((16, 8), nl.float32) + nl.zeros((16, 8), nl.float32)
        nl.store(out, value=t)
        return out

    ref = np.full((16, 8), 3.5, np.float32)
    ref[:4] = 1.0
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, np.zeros((1, 1), np.float32)), ref)


def test_bf16_and_fp8_matmul_accumulate_in_fp32():
    a = rand((128, 64), 26).astype(ml_dtypes.bfloat16)
    b = rand((128, 256), 27).astype(ml_dtypes.bfloat16)
    out = run_tiles(lambda x, y: nl.matmul(x, y, transpose_x=True), a, b)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)

    def fp8(x, y):
        return nl.matmul(nl.copy(x, dtype=nl.float8_e4m3), nl.copy(y, dtype=nl.float8_e4m3), transpose_x=True)

    out8 = run_tiles(fp8, a.astype(np.float32), b.astype(np.float32))
    a8 = a.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    b8 = b.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_allclose(out8, a8.T @ b8, rtol=1e-4, atol=1e-3)


def test_three_dimensional_hbm_and_tiles():
    def kernel(x):
        out = nl.ndarray((x.shape[0], 128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_a, i_b = nl.arange(128)[:, None, None], nl.arange(4)[None, :, None], nl.arange(8)[None, None, :]
        for b in nl.affine_range(x.shape[0]):
            t = nl.load(x[b, i_p, i_a * 8 + i_b])  # [128, 4, 8] view of a [128, 32] slab
            nl.store(out[b], value=nl.sum(t, axis=(1, 2)))  # a [128] vector into a [128, 1] slab
        return out

    x = rand((3, 128, 32), 28)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x)[..., 0], x.sum(axis=2), rtol=1e-5)


def test_psum_block_tiles_take_one_bank_each():
    def kernel(st, mv):
        out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        s = nl.load(st)
        for b in nl.affine_range(2):
            acc[b] = nl.matmul(s, nl.load(mv[b]), transpose_x=True)
        for b in nl.affine_range(2):
            nl.store(out[b], value=acc[b])
        return out

    st, mv = rand((128, 128), 29), rand((2, 128, 512), 30)
    np.testing.assert_allclose(
        nki.simulate_kernel(kernel, st, mv), np.stack([st.T @ m for m in mv]), rtol=1e-4, atol=1e-4
    )
    prog = nki.Kernel(kernel).trace(st, mv).program
    outs = [i.outs[0] for i in prog.instructions if i.outs and i.outs[0].space.value == "psum"]
    assert outs[1].offset - outs[0].offset == 2048 and prog.psum_bytes == 4096
