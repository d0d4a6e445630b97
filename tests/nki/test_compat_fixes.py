"""Constructs of public NKI kernels that nprof must run as NKI does: non-finite results, kernels named like
tests, two-sided broadcasts — each against a numpy reference."""

import inspect

import numpy as np

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
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
