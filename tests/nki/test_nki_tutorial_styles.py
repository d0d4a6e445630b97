"""Kernels written the way NKI's public tutorials write them (only the imports changed) run and match numpy."""

import math

import numpy as np

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from tests.nki.helpers import rand


@nki.jit
def rmsnorm_kernel(a_tensor, g_tensor):
    out_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iw = nl.arange(1)[:, None]
    iy = nl.arange(a_tensor.shape[1])[None, :]
    num_rows = a_tensor.shape[0]
    g_tile = nl.load(g_tensor.reshape((1, g_tensor.shape[0]))[iw, iy])
    for i in nl.affine_range(math.ceil(a_tensor.shape[0] / 128)):
        a_tile = nl.load(a_tensor[i * 128 + ix, iy], mask=(i * 128 + ix < num_rows))
        in_square = nl.square(a_tile)
        square_sum = nl.sum(in_square, axis=[1])
        mean = square_sum / a_tensor.shape[1]
        rms_reciprocal = nl.rsqrt(mean)
        out_tile = nl.multiply(a_tile, rms_reciprocal)
        g_bcast = g_tile.broadcast_to((128, g_tensor.shape[0]))
        out_tile[...] = nl.multiply(out_tile, g_bcast, mask=(i * 128 + ix < num_rows))
        nl.store(out_tensor[i * 128 + ix, iy], value=out_tile, mask=(i * 128 + ix < num_rows))
    return out_tensor


def test_rmsnorm_tutorial_style():
    a, g = rand((300, 64), 1), rand((64,), 2)
    ref = a / np.sqrt((a**2).mean(axis=1, keepdims=True)) * g
    np.testing.assert_allclose(rmsnorm_kernel(a, g), ref, rtol=1e-5, atol=1e-5)


@nki.jit
def tensor_add_spmd(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 512 + nl.arange(512)[None, :]
    c_tile = nl.load(a_input[ix, iy]) + nl.load(b_input[ix, iy])
    nl.store(c_output[ix, iy], value=c_tile)
    return c_output


def test_tensor_add_spmd_tutorial_style():
    a, b = rand((256, 1024), 3), rand((256, 1024), 4)
    np.testing.assert_allclose(tensor_add_spmd[2, 2](a, b), a + b, rtol=1e-6)


@nki.jit
def matmul_basic(lhsT, rhs):
    result = nl.ndarray((lhsT.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    i_lhsT_p, i_lhsT_f = nl.mgrid[0:128, 0:64]
    i_rhs_p, i_rhs_f = nl.mgrid[0:128, 0:512]
    i_out_p, i_out_f = nl.mgrid[0:64, 0:512]
    lhs_tile = nl.load(lhsT[i_lhsT_p, i_lhsT_f])
    rhs_tile = nl.load(rhs[i_rhs_p, i_rhs_f])
    result_psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
    result_sbuf = nl.copy(result_psum, dtype=result.dtype)
    nl.store(result[i_out_p, i_out_f], value=result_sbuf)
    return result


def test_matmul_basic_tutorial_style():
    lhsT, rhs = rand((128, 64), 5), rand((128, 512), 6)
    np.testing.assert_allclose(matmul_basic(lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=1e-4)


@nki.jit
def causal_attention_scores(q, k):
    """softmax(mask(q @ k.T)) for one 128-row block: nisa-level, with affine_select and a fused exp+sum."""
    out = nl.ndarray((q.shape[0], k.shape[0]), dtype=nl.float32, buffer=nl.shared_hbm)
    q_t = nl.load_transpose2d(q)  # [d, 128]
    k_t = nl.load_transpose2d(k)  # [d, 128]
    scores = nl.copy(nisa.nc_matmul(q_t, k_t))  # q @ k.T  [128, 128]
    i_p, i_f = nl.mgrid[0:128, 0:128]
    masked = nisa.affine_select(pred=(i_p - i_f >= 0), on_true_tile=scores, on_false_value=-9984.0)
    neg_max = nisa.tensor_reduce(nl.max, masked, axis=(1,), negate=True, keepdims=True)
    total = nl.ndarray((128, 1), dtype=nl.float32)
    probs = nisa.activation(op=nl.exp, data=masked, bias=neg_max, reduce_op=nl.add, reduce_res=total)
    inv = nisa.reciprocal(total)
    nl.store(out, value=nisa.tensor_scalar(probs, nl.multiply, inv))
    return out


def test_causal_attention_scores():
    q, k = rand((128, 64), 7), rand((128, 64), 8)
    s = q @ k.T
    s = np.where(np.tril(np.ones((128, 128), bool)), s, -9984.0)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(causal_attention_scores(q, k), p / p.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)
