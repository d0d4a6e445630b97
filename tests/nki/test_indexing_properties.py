"""Property tests: loads through slices, integer indices, affine arange indices and masks equal numpy indexing."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nprof.nki.language as nl
from nprof import nki

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _copy_kernel(index):
    def kernel(x):
        t = nl.load(x[index])
        out = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    return kernel


@st.composite
def sliced(draw):
    rows, cols = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    r0 = draw(st.integers(0, rows - 1))
    r1 = draw(st.integers(r0 + 1, rows))
    c0 = draw(st.integers(0, cols - 1))
    c1 = draw(st.integers(c0 + 1, cols))
    rs, cs = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return (rows, cols), (slice(r0, r1, rs), slice(c0, c1, cs))


@SETTINGS
@given(sliced())
def test_slices_match_numpy(case):
    shape, index = case
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(nki.simulate_kernel(_copy_kernel(index), x), x[index])


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 30), st.data())
def test_integer_then_slice_on_3d(batches, cols, data):
    b = data.draw(st.integers(-batches, batches - 1))
    x = np.arange(batches * 16 * cols, dtype=np.float32).reshape(batches, 16, cols)
    out = nki.simulate_kernel(_copy_kernel((b, slice(None), slice(None))), x)
    np.testing.assert_array_equal(out, x[b])


@SETTINGS
@given(st.integers(1, 3), st.integers(0, 5), st.integers(1, 4), st.integers(1, 8), st.data())
def test_affine_index_with_mask(step, offset, cstep, csize, data):
    rows_tile = data.draw(st.integers(1, 16))
    rows = offset + step * (rows_tile - 1) + 1 + data.draw(st.integers(0, 3))
    cols = cstep * (csize - 1) + 1
    limit = data.draw(st.integers(offset, rows))  # mask keeps index values < limit
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)

    def kernel(t):
        i_p = offset + step * nl.arange(rows_tile)[:, None]
        i_f = cstep * nl.arange(csize)[None, :]
        tile = nl.zeros((rows_tile, csize), nl.float32)
        tile[...] = -1.0
        out = nl.ndarray((rows_tile, csize), dtype=nl.float32, buffer=nl.shared_hbm)
        loaded = nl.load(t[i_p, i_f], mask=(i_p < limit))
        nl.store(out, value=tile)
        nl.store(out[nl.arange(rows_tile)[:, None], nl.arange(csize)[None, :]], value=loaded, mask=(i_p < limit))
        return out

    expected = np.full((rows_tile, csize), -1.0, np.float32)
    ids = offset + step * np.arange(rows_tile)
    keep = ids < limit
    expected[keep] = x[ids[keep]][:, ::cstep][:, :csize]
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), expected)
