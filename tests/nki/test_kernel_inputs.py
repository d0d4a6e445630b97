"""Random inputs (`tensor[[...], dtype]` placeholders) are drawn on first use, with the values an eager draw gives."""

import numpy as np

import nprof.nki.language as nl
from nprof.nki import Kernel
from nprof.nki.kernel import RANDOM_SEED
from nprof.nki.typing import tensor


def _add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


def _eager(*placeholders):
    """The plain reference: draw every placeholder in argument order from one generator."""
    rng = np.random.default_rng(RANDOM_SEED)
    return [p.random(rng) for p in placeholders]


def test_tracing_draws_nothing_and_the_first_read_draws_the_eager_values():
    a, b = tensor[[64, 32], nl.bfloat16], tensor[[64, 32], nl.int32]
    traced = Kernel(_add).trace(a, b)
    assert not traced.inputs._drawn  # a timing-only run never pays for random inputs
    want = _eager(a, b)
    assert list(traced.inputs) == ["a", "b"]
    np.testing.assert_array_equal(traced.inputs["b"], want[1])  # read out of order: same values
    np.testing.assert_array_equal(traced.inputs["a"], want[0])
    assert traced.inputs["a"].dtype == want[0].dtype


def test_given_arrays_mix_with_placeholders_and_run_as_before():
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    y = tensor[[64, 32], nl.float32]
    out = Kernel(_add).run(x, y)
    np.testing.assert_allclose(out, x + _eager(y)[0], rtol=1e-6)
