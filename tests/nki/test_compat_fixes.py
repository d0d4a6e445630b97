"""Constructs of public NKI kernels that nprof must run as NKI does: non-finite results, kernels named like
tests, two-sided broadcasts — each against a numpy reference."""

import inspect

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.nki.calls import NkiCompatWarning
from tests.nki.helpers import rand, run_tiles


def test_non_finite_results_are_values_not_errors():
    """exp overflow gives inf and an explicit -inf fill stays -inf, as in NKI's simulator (no execution error)."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nl.exp(x)
        y2 = nisa.memset(shape=(a.shape[0], 2), value=float("-inf"), dtype=nl.float32)
        nl.store(out, value=y)
        nl.store(out[:, 0:2], value=y2)
        return out

    a = np.full((8, 6), 100.0, dtype=np.float32)
    a[:, 5] = 1.0
    with np.errstate(over="ignore"):
        want = np.exp(a)
    want[:, 0:2] = -np.inf
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), want)


def test_kernel_object_is_not_a_function_to_pytest():
    """A `@nki.jit` kernel named test_* (as in AWS's examples) is no function to pytest's collector (which follows
    `__wrapped__`), so its parameters are not taken for fixtures; it keeps its name and signature."""

    @nki.jit
    def test_named_kernel(in_tensor):
        out = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(in_tensor), 1.0))
        return out

    assert not inspect.isfunction(test_named_kernel)
    assert not hasattr(test_named_kernel, "__wrapped__")
    assert test_named_kernel.__name__ == "test_named_kernel"
    assert list(inspect.signature(test_named_kernel).parameters) == ["in_tensor"]
    a = rand((4, 8))
    np.testing.assert_allclose(test_named_kernel(a), a + 1)


def test_column_plus_row_broadcasts_both_operands():
    """[P, 1] (op) [1, F] broadcasts both to [P, F], for either operand order and a non-commutative op."""
    col, row = rand((16, 1), 1), rand((1, 24), 2)
    np.testing.assert_allclose(run_tiles(nl.add, col, row), col + row, rtol=1e-6)
    np.testing.assert_allclose(run_tiles(nl.subtract, row, col), row - col, rtol=1e-6)
    np.testing.assert_allclose(run_tiles(nl.subtract, col, row), col - row, rtol=1e-6)


def test_numpy_reductions_as_reduce_op_and_rank1_broadcast_to():
    """`reduce_op=np.sum` reduces with add; a rank-1 [P] result `.broadcast_to((P, F))` repeats it per row;
    a [P] view indexed with two indices reads as [P, 1]."""

    def fn(t):
        s = nisa.tensor_reduce(np.sum, data=t, axis=(1,))
        wide = (1.0 / s).broadcast_to((t.shape[0], 8))
        return nl.add(wide, s[:, 0])

    x = rand((16, 24), 7, lo=0.5, hi=1.5)
    s = x.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(run_tiles(fn, x), np.repeat(1.0 / s + s, 8, axis=1), rtol=1e-5)


def test_python_and_between_masks_is_their_conjunction():
    """`mask=(i_p < a and i_f < b)` (AWS's nc_match_replace8 example) masks both axes; `if mask:` still raises."""
    from nprof.nki.index import arange

    i_p, i_f = arange(8)[:, None], arange(16)[None, :]
    two = i_p < 4 and i_f < 10  # outside `assert`: pytest rewrites `and` inside assert statements
    three = i_p < 4 and i_f < 10 and i_f >= 2
    one = i_f < 5  # nothing left over from the expressions above
    assert two.box((8, 16)) == [(0, 4), (0, 10)]
    assert three.box((8, 16)) == [(0, 4), (2, 10)]
    assert one.box((8, 16)) == [(0, 8), (0, 5)]
    with pytest.raises(TypeError, match="no truth value"):
        if i_p < 4:
            pass

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:8, 0:16]
        buf = nl.zeros(a.shape, dtype=a.dtype)
        buf[...] = nl.add(nl.load(a), 1.0, mask=(ix < 4 and iy < 10))
        nl.store(out, value=buf)
        return out

    a = rand((8, 16))
    want = np.zeros_like(a)
    want[:4, :10] = a[:4, :10] + 1
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), want, rtol=1e-6)


def test_dropout_zeroes_with_the_given_probability_and_keeps_the_rest():
    """nisa.dropout(prob=[P, 1] or scalar) and nl.dropout(rate): each element is 0 with that probability and
    otherwise unchanged (no rescaling); prob 0 keeps all, prob 1 drops all."""
    x = rand((128, 512), 11, lo=1.0, hi=2.0)
    p = np.linspace(0.0, 1.0, 128, dtype=np.float32).reshape(128, 1)
    y = run_tiles(lambda a, b: nisa.dropout(a, prob=b), x, p)
    kept = y != 0
    np.testing.assert_array_equal(y[kept], x[kept])
    assert kept[0].all() and not kept[-1].any()
    np.testing.assert_allclose(kept.mean(axis=1), 1 - p[:, 0], atol=0.08)  # 512 draws per row
    z = run_tiles(lambda a: nl.dropout(a, rate=0.25), x)
    assert abs((z != 0).mean() - 0.75) < 0.01
    np.testing.assert_array_equal(z[z != 0], x[z != 0])


def test_hbm_view_reinterprets_bytes_and_double_row_matmul_contracts_the_row_pair():
    """`t.view(dtype)` reads an HBM tensor's bytes as another dtype of the same size; a double-row nc_matmul
    (stationary [K, 2, M], moving [K, 2, N]) sums over K and the row pair."""
    import ml_dtypes

    def kernel(a_bits, b):
        out = nl.ndarray((a_bits.shape[2], b.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.load(a_bits.view(nl.bfloat16))
        res = nisa.nc_matmul(a, nl.load(b), perf_mode="double_row_gen3")
        nl.store(out, value=res)
        return out

    a = rand((32, 2, 16), 12).astype(ml_dtypes.bfloat16)
    b = rand((32, 2, 64), 13).astype(ml_dtypes.bfloat16)
    want = np.einsum("kri,krj->ij", a.astype(np.float64), b.astype(np.float64))
    with pytest.warns(NkiCompatWarning, match="perf_mode"):  # the double-row speed-up is not modelled
        got = nki.simulate_kernel(kernel, a.view(np.uint16), b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _bounds_reference(ids: np.ndarray) -> np.ndarray:
    """Plain loops: each run of equal non-zero ids spans [start, end); zeros are padding (n, -1)."""
    n = len(ids)
    out = np.zeros((2, n))
    for i in range(n):
        if ids[i] == 0:
            out[:, i] = (n, -1)
            continue
        lo, hi = i, i + 1
        while lo > 0 and ids[lo - 1] == ids[i]:
            lo -= 1
        while hi < n and ids[hi] == ids[i]:
            hi += 1
        out[:, i] = (lo, hi)
    return out


def test_sequence_bounds_gives_each_elements_segment_start_and_end():
    rng = np.random.default_rng(3)
    ids = np.sort(rng.integers(0, 9, 64)).astype(np.float32)
    ids[40:44] = 0  # padding in the middle too

    def kernel(seg):
        out = nl.ndarray((1, 2, seg.shape[1]), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.sequence_bounds(segment_ids=nl.load(seg), dtype=nl.int32))
        return out

    got = nki.simulate_kernel(kernel, ids.reshape(1, -1))
    np.testing.assert_array_equal(got[0], _bounds_reference(ids))
