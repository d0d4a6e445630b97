"""A `return` inside an nl.affine_range / nl.sequential_range body: NKI records the whole loop, then returns."""

import numpy as np
import pytest

import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import rand


def _tiles_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(a.shape[1])[None, :]
    for t in nl.affine_range((a.shape[0] + 7) // 8):
        i_p = t * 8 + nl.arange(8)[:, None]
        x = nl.load(a[i_p, i_f], mask=i_p < a.shape[0])
        nl.store(out[i_p, i_f], value=nl.exp(x), mask=i_p < a.shape[0])  # STORE
        return out


def test_return_inside_a_loop_body_runs_every_iteration_and_keeps_source_lines():
    a = rand((21, 16), 1)
    np.testing.assert_allclose(nki.simulate_kernel(_tiles_kernel, a), np.exp(a), rtol=1e-6)
    program = nki.jit(_tiles_kernel).trace(a).program
    with open(__file__) as f:
        store_line = next(n for n, text in enumerate(f, 1) if text.rstrip().endswith("# STORE"))
    stores = [i for i in program.instructions if i.outs and i.outs[0].tensor.startswith("out")]
    assert len(stores) == 3 and all(i.source.endswith(f"test_loop_returns.py:{store_line}") for i in stores)


def test_return_from_nested_loops_skips_what_follows_the_inner_loop():
    a = rand((4, 6), 2)

    def kernel(x):
        out = nl.ndarray((4, 6), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.zeros((4, 6), dtype=x.dtype))
        for i in nl.sequential_range(2):
            for j in nl.affine_range(3):
                nl.store(
                    out[i * 2 : i * 2 + 2, j * 2 : j * 2 + 2], value=nl.load(x[i * 2 : i * 2 + 2, j * 2 : j * 2 + 2])
                )
                return out
            nl.store(out, value=nl.zeros((4, 6), dtype=x.dtype))  # never traced by NKI: after the return
        return None

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)


def test_leaving_a_loop_through_a_python_loop_or_break_is_still_refused():
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            for _ in range(1):  # a `continue` here would not skip the rest of the NKI body: not rewritten
                nl.store(out[i * 4 : (i + 1) * 4], value=nl.load(a[i * 4 : (i + 1) * 4]))
                return out
        return out

    with pytest.raises(KernelError, match=r"test_loop_returns\.py:\d+: the kernel leaves this loop before its last"):
        nki.simulate_kernel(kernel, rand((8, 8)))
