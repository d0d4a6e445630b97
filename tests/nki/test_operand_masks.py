"""Operand masking of matmul inputs (`nisa.nc_matmul(st[mask], mv[mask])`, NKI API Masking) and `nl.abs` as a
tensor_scalar ALU operator — each against a numpy reference written here."""

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import rand, run_tiles

SENTINEL = -7.0  # what the PSUM destination holds before the masked matmul: kept outside the mask's box


def _masked_matmul_kernel(rows: int, cols: int, k_rows: int, style: str):
    """A kernel: acc (pre-filled with SENTINEL) receives st[mask].T @ mv[mask] under operand masks that keep
    the first `rows` stationary columns, `cols` moving columns and `k_rows` contraction rows."""

    def kernel(st_hbm, mv_hbm):
        k, m = st_hbm.shape
        n = mv_hbm.shape[1]
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        st, mv = nl.load(st_hbm), nl.load(mv_hbm)
        ip_s, if_s = nl.mgrid[0:k, 0:m]
        ip_m, if_m = nl.mgrid[0:k, 0:n]
        st_masked = st[ip_s, if_s][(if_s < rows) & (ip_s < k_rows)]
        mv_masked = mv[ip_m, if_m][(if_m < cols) & (ip_m < k_rows)]
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        acc[...] = SENTINEL
        if style == "assign":
            acc[...] = nisa.nc_matmul(st_masked, mv_masked)
        elif style == "dst":
            nisa.nc_matmul(acc, st_masked, mv_masked)
        else:  # nl.matmul with the stationary already transposed
            acc[...] = nl.matmul(st_masked, mv_masked, transpose_x=True)
        nl.store(out, value=nl.copy(acc))
        return out

    return kernel


@pytest.mark.parametrize("style", ["assign", "dst", "nl"])
@pytest.mark.parametrize(("rows", "cols", "k_rows"), [(20, 48, 32), (32, 64, 12), (7, 5, 3)])
def test_operand_masks_compute_the_box_and_keep_the_rest(style, rows, cols, k_rows):
    """Only the box the operand masks keep is computed (contraction narrowed too); the rest of the
    destination keeps what it held (the compiler emits a smaller matmul)."""
    st, mv = rand((32, 32), 11), rand((32, 64), 12)
    got = nki.simulate_kernel(_masked_matmul_kernel(rows, cols, k_rows, style), st, mv)
    want = np.full((32, 64), SENTINEL, dtype=np.float64)
    want[:rows, :cols] = st[:k_rows, :rows].astype(np.float64).T @ mv[:k_rows, :cols]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_operand_mask_that_keeps_everything_is_the_plain_matmul():
    """A mask true on the whole operand (a tile size that divides the dimension) changes nothing."""
    st, mv = rand((16, 8), 1), rand((16, 24), 2)
    got = nki.simulate_kernel(_masked_matmul_kernel(8, 24, 16, "assign"), st, mv)
    np.testing.assert_allclose(got, st.T.astype(np.float64) @ mv, rtol=1e-5, atol=1e-5)


def test_operand_mask_accumulates_into_its_box():
    """`psum += nc_matmul(st[mask], mv)` adds into the box and leaves the other rows as they were."""

    def kernel(st_hbm, mv_hbm):
        out = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.shared_hbm)
        st, mv = nl.load(st_hbm), nl.load(mv_hbm)
        i_p, i_f = nl.mgrid[0:8, 0:16]
        acc = nl.zeros((16, 24), dtype=nl.float32, buffer=nl.psum)
        acc += nisa.nc_matmul(st, mv)
        acc += nisa.nc_matmul(st[i_p, i_f][i_f < 10], mv)
        nl.store(out, value=nl.copy(acc))
        return out

    st, mv = rand((8, 16), 3), rand((8, 24), 4)
    want = st.T.astype(np.float64) @ mv
    want[:10] *= 2
    np.testing.assert_allclose(nki.simulate_kernel(kernel, st, mv), want, rtol=1e-5, atol=1e-5)


def test_operand_mask_outside_a_matmul_is_refused():
    """Only matmul operands take a mask of their own; elsewhere the error says to pass mask= instead."""

    def kernel(x):
        i_p, i_f = nl.mgrid[0:8, 0:16]
        return nl.exp(x[i_p, i_f][i_f < 4])

    with pytest.raises(KernelError, match="pass mask= to this instruction"):
        run_tiles(kernel, rand((8, 16), 5))

    def hbm_kernel(x_hbm):
        i_p, i_f = nl.mgrid[0:8, 0:16]
        return nl.load(x_hbm[i_p, i_f][i_f < 4])

    with pytest.raises(KernelError, match="pass mask= to nl"):
        nki.simulate_kernel(hbm_kernel, rand((8, 16), 5))


def test_abs_as_tensor_scalar_operator_is_absolute_value():
    """`tensor_scalar(op0=nl.abs, operand0=0.0)` is |x| (NKI's operator table lists Absolute as an ALU op);
    `tensor_scalar_reduce` with it gives the absolute maximum per partition."""
    x = rand((16, 32), 6)

    def reduce_kernel(t):
        red = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_reduce(data=t, op0=nl.abs, operand0=0.0, reduce_op=nl.max, reduce_res=red)
        return red

    np.testing.assert_array_equal(run_tiles(lambda t: nisa.tensor_scalar(t, op0=nl.abs, operand0=0.0), x), np.abs(x))
    np.testing.assert_array_equal(run_tiles(reduce_kernel, x), np.abs(x).max(axis=1, keepdims=True))
    with pytest.raises(KernelError, match="0 operand only"):
        run_tiles(lambda t: nisa.tensor_scalar(t, op0=nl.abs, operand0=1.0), x)


def test_nl_matmul_masked_untransposed_operand():
    """nl.matmul(x[mask], y) with x as [M, K]: a mask on M keeps output rows, one on K narrows the contraction
    (the mask follows x through the transpose nl.matmul inserts)."""

    def kernel(x_hbm, y_hbm):
        out = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(x_hbm), nl.load(y_hbm)
        i_m, i_k = nl.mgrid[0:16, 0:8]
        j_k, j_n = nl.mgrid[0:8, 0:24]
        acc = nl.zeros((16, 24), dtype=nl.float32, buffer=nl.psum)
        acc[...] = nl.matmul(x[i_m, i_k][(i_m < 9) & (i_k < 5)], y[j_k, j_n][j_k < 5])
        nl.store(out, value=nl.copy(acc))
        return out

    x, y = rand((16, 8), 7), rand((8, 24), 8)
    want = np.zeros((16, 24))
    want[:9] = x[:9, :5].astype(np.float64) @ y[:5]
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x, y), want, rtol=1e-5, atol=1e-5)
