"""NKI semantics of masks (loop-index conditions, masked assignment, coupled axes), wide row broadcasts, and
rank-1 reduction results stored into [P, 1] views — each against a numpy reference."""

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from nprof.nki.index import arange
from tests.nki.helpers import rand


def test_loop_condition_mask_skips_matmuls():
    """`mask=i >= j` on loop indices (a Python bool once unrolled) keeps or drops whole matmuls (block-causal)."""

    def kernel(a, b):
        out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((32, 32), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(2):
            for j in nl.affine_range(2):
                acc[...] += nisa.nc_matmul(nl.load(a[i * 16 : (i + 1) * 16, :]), nl.load(b[j * 16 : (j + 1) * 16, :]),
                                           mask=(i >= j))  # fmt: skip
        nl.store(out, value=nl.copy(acc))
        return out

    a, b = rand((32, 32), 1), rand((32, 32), 2)
    want = a[:16].T @ b[:16] + a[16:].T @ b[:16] + a[16:].T @ b[16:]
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), want, rtol=1e-4, atol=1e-4)


def test_masked_result_assigned_keeps_elements_outside_the_mask():
    """`dst[...] = op(..., mask=m)` writes dst only inside m (and not at all when m is False)."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        buf = nl.zeros(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        x = nl.load(a)
        i_p = nl.arange(a.shape[0])[:, None]
        for step in nl.affine_range(2):
            buf[...] = nl.add(x, 1.0, mask=(step == 1))
        buf[...] = nl.multiply(buf, 2.0, mask=(i_p < 8))
        nl.store(out, value=buf)
        return out

    a = rand((32, 16), 3)
    want = a + 1
    want[:8] *= 2
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), want, rtol=1e-6)


def test_coupled_mask_that_holds_everywhere_is_a_box():
    """A condition on a flattened offset (p * F + f < n) is accepted when it is all-true or all-false per tile."""
    i_p, i_f = arange(4)[:, None], arange(8)[None, :]
    assert (i_p * 8 + i_f < 32).box((4, 8)) == [(0, 4), (0, 8)]
    assert (i_p * 8 + i_f < 0).box((4, 8)) == [(0, 0), (0, 0)]
    assert (i_p >= i_f).box((4, 8)) is None


def test_triangular_mask_refused_with_the_fix():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:16, 0:16]
        nl.store(out, value=nl.exp(nl.load(a), mask=(i_p >= i_f)))
        return out

    with pytest.raises(KernelError, match=r"test_masks_broadcast\.py:\d+: .*couples two axes.*affine_select"):
        nki.simulate_kernel(kernel, rand((16, 16)))


@pytest.mark.parametrize("width", [512, 1300])
def test_row_broadcast_across_partitions(width):
    """A [1, F] row times a [P, F] tile, F beyond one TensorE pass (512) included (layernorm's gamma)."""

    def kernel(x, g):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        g_row = nl.load(g.reshape((1, g.shape[0])))
        g_all = g_row.broadcast_to((x.shape[0], g.shape[0]))
        nl.store(out, value=nl.multiply(nl.load(x), g_all))
        return out

    x, g = rand((64, width), 4), rand((width,), 5)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x, g), x * g, rtol=1e-5)


def test_rank1_reduction_stored_into_column_views():
    def kernel(a):
        out = nl.ndarray((a.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        buf = nl.ndarray((a.shape[0], 2), dtype=nl.float32)
        buf[:, 0:1] = nl.sum(x, axis=1)
        buf[:, 1] = nl.max(x, axis=1)
        col = nl.ndarray((a.shape[0], 1), dtype=nl.float32)
        col[...] = nl.min(x, axis=1)
        buf[:, 1] = nl.maximum(buf[:, 1:2], col)  # a [P, 1] result into a rank-1 [P] view
        nl.store(out, value=buf)
        return out

    a = rand((32, 24), 6)
    want = np.stack([a.sum(axis=1), a.max(axis=1)], axis=1)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), want, rtol=1e-5)


def test_slice_past_the_end_with_a_mask():
    """`x[128:256]` of a 200-row tensor is valid NKI when mask= keeps the rows that exist (a ragged last tile)."""

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        for t in nl.affine_range(2):
            rows = t * 128 + i_p < x.shape[0]
            tile = nl.load(x[t * 128 : (t + 1) * 128, :], mask=rows)
            nl.store(out[t * 128 : (t + 1) * 128, :], value=nl.exp(tile, mask=rows), mask=rows)
        return out

    x = rand((200, 16), 9)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), np.exp(x), rtol=1e-5)
