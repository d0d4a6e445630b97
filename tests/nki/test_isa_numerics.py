"""Numerics of `nisa` instructions through the virtual device, against numpy."""

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from tests.nki.helpers import rand, run_tiles


def test_nc_matmul_stationary_transposed():
    st, mv = rand((128, 100), 1), rand((128, 300), 2)
    np.testing.assert_allclose(run_tiles(nisa.nc_matmul, st, mv), st.T @ mv, rtol=1e-4, atol=1e-4)


def test_nc_transpose():
    x = rand((64, 96), 3)
    np.testing.assert_array_equal(run_tiles(nisa.nc_transpose, x), x.T)


def test_activation_scale_bias_and_reduce():
    x, bias = rand((128, 40), 4), rand((128, 1), 5)

    def fn(t, b):
        acc = nl.ndarray((128, 1), dtype=nl.float32)
        y = nisa.activation(op=nl.exp, data=t, bias=b, scale=0.5, reduce_op=nl.add, reduce_res=acc)
        return nl.add(y, acc)

    y = np.exp(x * 0.5 + bias)
    np.testing.assert_allclose(run_tiles(fn, x, bias), y + y.sum(1, keepdims=True), rtol=1e-5)


def test_activation_with_vector_scale_and_scalar_bias():
    x, scale = rand((32, 8), 6), rand((32, 1), 7)
    out = run_tiles(lambda t, s: nisa.activation(nl.tanh, t, scale=s, bias=0.25), x, scale)
    np.testing.assert_allclose(out, np.tanh(x * scale + 0.25), rtol=1e-5)


def test_activation_reduce_legacy_api():
    x = rand((16, 32), 8)

    def fn(t):
        acc = nl.ndarray((16, 1), dtype=nl.float32)
        nisa.activation_reduce(np.square, t, reduce_op=np.add, reduce_res=acc)
        return acc

    np.testing.assert_allclose(run_tiles(fn, x), (x**2).sum(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("engine", [nisa.engine.vector, nisa.engine.gpsimd])
def test_tensor_tensor_on_engines(engine):
    a, b = rand((64, 32), 9), rand((64, 32), 10)
    out = run_tiles(lambda x, y: nisa.tensor_tensor(x, y, op=np.maximum, engine=engine), a, b)
    np.testing.assert_array_equal(out, np.maximum(a, b))


def test_tensor_scalar_two_ops_reverse_and_vectors():
    x, v = rand((64, 32), 11, lo=0.5), rand((64, 1), 12, lo=0.5)
    out = run_tiles(lambda t: nisa.tensor_scalar(t, nl.subtract, 1.0, reverse0=True, op1=nl.multiply, operand1=3.0), x)
    np.testing.assert_allclose(out, (1 - x) * 3, rtol=1e-6)
    out = run_tiles(
        lambda t, s: nisa.tensor_scalar(t, np.divide, s, op1=np.add, operand1=s, engine=nisa.scalar_engine), x, v
    )
    np.testing.assert_allclose(out, x / v + v, rtol=1e-6)
    out = run_tiles(lambda t, s: nisa.tensor_scalar(t, nl.add, 2.0, op1=nl.subtract, operand1=s, reverse1=True), x, v)
    np.testing.assert_allclose(out, v - (x + 2), rtol=1e-6)


def test_scalar_tensor_tensor():
    x, y = rand((32, 16), 13), rand((32, 16), 14)
    out = run_tiles(
        lambda a, b: nisa.scalar_tensor_tensor(data=a, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=b), x, y
    )
    np.testing.assert_allclose(out, x * 2 + y, rtol=1e-6)


@pytest.mark.parametrize(("op", "ref"), [(nl.add, np.sum), (nl.max, np.max), (np.min, np.min)])
def test_tensor_reduce(op, ref):
    x = rand((48, 24), 15)
    out = run_tiles(lambda t: nisa.tensor_reduce(op, t, axis=1, keepdims=True), x)
    np.testing.assert_allclose(out, ref(x, axis=1, keepdims=True), rtol=1e-5)
    neg = run_tiles(lambda t: nisa.tensor_reduce(op, t, axis=(1,), negate=True, keepdims=True), x)
    np.testing.assert_allclose(neg, -ref(x, axis=1, keepdims=True), rtol=1e-5)


def test_tensor_copy_reciprocal_memset():
    x = rand((32, 16), 16, lo=0.5)
    np.testing.assert_array_equal(run_tiles(lambda t: nisa.tensor_copy(t, engine=nisa.scalar_engine), x), x)
    np.testing.assert_allclose(run_tiles(nisa.reciprocal, x), 1 / x, rtol=1e-6)
    out = run_tiles(lambda t: t * 0.0 + nisa.memset((32, 16), 4.0, nl.float32), x)
    np.testing.assert_array_equal(out, np.full((32, 16), 4.0, np.float32))


def test_iota():
    def kernel(x):
        out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nisa.iota(nl.arange(128)[:, None] * 64 + nl.arange(64)[None, :] + 5, dtype=nl.int32)
        nl.store(out, value=t)
        return out

    ref = np.arange(128 * 64, dtype=np.int32).reshape(128, 64) + 5
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, np.zeros((1, 1), np.float32)), ref)


def test_affine_select_causal_mask():
    x = rand((64, 64), 17)

    def fn(t):
        i_p, i_f = nl.mgrid[0:64, 0:64]
        return nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=t, on_false_value=-9984.0)

    ref = np.where(np.tril(np.ones((64, 64), bool)), x, np.float32(-9984.0))
    np.testing.assert_array_equal(run_tiles(fn, x), ref)


def test_bn_stats_bn_aggr_chunks():
    x = rand((128, 512), 18)

    def fn(t):
        stats = nl.ndarray((128, 12), dtype=nl.float32)  # two [P, 6] hardware-layout results side by side
        stats[:, 0:6] = nisa.bn_stats(t[:, 0:256])
        stats[:, 6:12] = nisa.bn_stats(t[:, 256:512])
        return nisa.bn_aggr(stats)

    out = run_tiles(fn, x)
    np.testing.assert_allclose(out[:, 0], x.mean(1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out[:, 1], x.var(1), rtol=1e-4)


def test_dma_copy_hbm_to_hbm_and_through_sbuf():
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 32), dtype=x.dtype)
        nisa.dma_copy(dst=t, src=x[0:128, :])
        nisa.dma_copy(dst=out[0:128, :], src=t)
        nisa.dma_copy(dst=out[128:200, :], src=x[128:200, :])
        return out

    x = rand((200, 32), 19)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x)
