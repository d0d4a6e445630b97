"""The dst-first ("beta 2") call style: outputs passed as the first argument or dst=, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from nprof.nki.calls import NkiCompatWarning
from tests.nki.helpers import rand, run_tiles


def _tiled_matmul(lhs_t, rhs, positional: bool):
    """[K, M].T @ [K, N] in 128 x 128 x 512 tiles, PSUM accumulated by nc_matmul(dst, ...) over K."""
    k_dim, m_dim = lhs_t.shape
    _, n_dim = rhs.shape
    out = nl.ndarray((m_dim, n_dim), dtype=lhs_t.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_dim // 128):
        for n in nl.affine_range(n_dim // 512):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_dim // 128):
                a = nl.ndarray((128, 128), dtype=lhs_t.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhs_t[k * 128 : (k + 1) * 128, m * 128 : (m + 1) * 128])
                nisa.dma_copy(b, rhs[k * 128 : (k + 1) * 128, n * 512 : (n + 1) * 512])
                if positional:
                    nisa.nc_matmul(acc, a, b)
                else:
                    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((128, 512), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * 128 : (m + 1) * 128, n * 512 : (n + 1) * 512], src=res)
    return out


@pytest.mark.parametrize("positional", [True, False])
def test_tiled_matmul_accumulates_over_k_and_restarts_per_tile(positional: bool) -> None:
    lhs_t, rhs = rand((384, 256), 1), rand((384, 1024), 2)
    out = nki.simulate_kernel(lambda a, b: _tiled_matmul(a, b, positional), lhs_t, rhs)
    np.testing.assert_allclose(out, lhs_t.T @ rhs, rtol=1e-4, atol=1e-3)


def test_psum_reused_after_read_starts_a_new_sum() -> None:
    """One PSUM tile serves two output tiles: the copy out ends the first sum, the next matmul overwrites."""
    x = rand((128, 64), 3)

    def kernel(a):
        out = nl.ndarray((2, 64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        for i in range(2):
            nisa.nc_matmul(acc, t, t)
            nisa.nc_matmul(acc, t, t)  # accumulates: 2 * a.T @ a
            res = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nl.store(out[i], res)
        return out

    out = nki.simulate_kernel(kernel, x)
    np.testing.assert_allclose(out, np.stack([2 * x.T @ x] * 2), rtol=1e-4, atol=1e-3)


def test_explicit_accumulate_flag_overrides_inference() -> None:
    x = rand((128, 32), 4)

    def fn(t):
        acc = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.psum)
        for k in range(3):
            nisa.nc_matmul(acc, t, t, accumulate=k > 1)  # k=0, 1 overwrite; k=2 accumulates
        return acc

    np.testing.assert_allclose(run_tiles(fn, x), 2 * x.T @ x, rtol=1e-4, atol=1e-3)


def test_elementwise_instructions_write_dst() -> None:
    x, y = rand((64, 48), 5), rand((64, 48), 6)
    col = rand((64, 1), 7)

    def fn(a, b, c):
        out = nl.ndarray((64, 48), dtype=nl.float32)
        tmp = nl.ndarray((64, 48), dtype=nl.float32)
        nisa.tensor_tensor(tmp, a, b, nl.multiply)  # a * b
        nisa.tensor_scalar(dst=out, data=tmp, op0=nl.add, operand0=c)  # + c
        nisa.activation(tmp, nl.exp, out, scale=0.5)  # exp(0.5 * (a * b + c))
        nisa.reciprocal(dst=out, data=tmp)
        return out

    np.testing.assert_allclose(run_tiles(fn, x, y, col), 1 / np.exp(0.5 * (x * y + col)), rtol=1e-5)


def test_reduce_into_a_column_view_and_memset_dst() -> None:
    x = rand((32, 40), 8)

    def fn(t):
        out = nl.ndarray((32, 3), dtype=nl.float32)
        nisa.memset(dst=out, value=7.0)
        nisa.tensor_reduce(out[:, 0:1], nl.max, t, axis=1)
        nisa.tensor_reduce(dst=out[:, 1:2], op=nl.add, data=t, axis=1)
        return out

    expect = np.stack([x.max(1), x.sum(1), np.full(32, 7.0)], 1)
    np.testing.assert_allclose(run_tiles(fn, x), expect, rtol=1e-5)


def test_transpose_and_bn_stats_into_dst() -> None:
    x = rand((64, 96), 9)

    def fn(t):
        tp = nl.ndarray((96, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(tp, t)
        stats = nl.ndarray((64, 6), dtype=nl.float32)
        nisa.bn_stats(stats, t)
        mv = nl.ndarray((64, 2), dtype=nl.float32)
        nisa.bn_aggr(dst=mv, data=stats)
        out = nl.ndarray((96, 64), dtype=nl.float32)
        nisa.tensor_copy(dst=out, src=tp)
        return out, mv

    def kernel(a):
        tp, mv = fn(nl.load(a))
        o1 = nl.ndarray(tp.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray(mv.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(o1, tp)
        nl.store(o2, mv)
        return o1, o2

    tp, mv = nki.simulate_kernel(kernel, x)
    np.testing.assert_array_equal(tp, x.T)
    np.testing.assert_allclose(mv, np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4, atol=1e-6)


def test_dst_dtype_wins_over_a_different_dtype_and_warns() -> None:
    """The engine writes in dst's format: `dtype=` naming another one warns by name and dst's dtype is used
    (AWS's beta-2 matmul tutorial copies PSUM into an fp32 tile with dtype=bfloat16)."""
    x = rand((16, 16), 10)

    def fn(t):
        out = nl.ndarray((16, 16), dtype=nl.float32)
        nisa.tensor_copy(dst=out, src=t, dtype=nl.bfloat16)
        return out

    with pytest.warns(NkiCompatWarning, match=r"tensor_copy\(dtype=\).*dst is float32"):
        got = run_tiles(fn, x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x)  # no bfloat16 rounding


def test_matmul_dst_must_be_psum() -> None:
    x = rand((128, 16), 11)

    def fn(t):
        out = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(out, t, t)
        return out

    with pytest.raises(KernelError, match="PSUM"):
        run_tiles(fn, x)


def test_iota_and_affine_select_with_access_patterns() -> None:
    x = rand((16, 16), 12)

    def fn(t):
        idx = nl.ndarray((16, 16), dtype=nl.float32)
        nisa.iota(idx, [[1, 16]], offset=3, channel_multiplier=100)  # 3 + 100 p + i
        causal = nl.ndarray((16, 16), dtype=nl.float32)
        nisa.affine_select(causal, [[-1, 16]], 1, t, -1e4, cmp_op=nl.greater_equal)  # keep where p - i >= 0
        out = nl.ndarray((16, 32), dtype=nl.float32)
        out[:, 0:16] = idx
        out[:, 16:32] = causal
        return out

    out = run_tiles(fn, x)
    p, i = np.mgrid[0:16, 0:16]
    np.testing.assert_array_equal(out[:, :16], 3 + 100 * p + i)
    np.testing.assert_array_equal(out[:, 16:], np.where(p >= i, x, np.float32(-1e4)))


def test_matmul_of_a_psum_operand_copies_it_to_sbuf_first() -> None:
    x = rand((64, 64), 13)

    def fn(t):
        tp = nisa.nc_transpose(t)  # PSUM [64, 64]
        return nisa.nc_matmul(tp, t)  # tp.T @ t = t @ t

    np.testing.assert_allclose(run_tiles(fn, x), x @ x, rtol=1e-4, atol=1e-4)
