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


@SETTINGS
@given(st.integers(1, 16), st.integers(1, 24), st.data())
def test_masked_compute_touches_only_the_box(parts, cols, data):
    p_lim = data.draw(st.integers(0, parts))
    f_lo = data.draw(st.integers(0, cols - 1))
    f_hi = data.draw(st.integers(f_lo, cols))
    x = np.linspace(-2, 2, parts * cols, dtype=np.float32).reshape(parts, cols)

    def kernel(t):
        i_p, i_f = nl.mgrid[0:parts, 0:cols]
        tile = nl.load(t)
        res = nl.full((parts, cols), -7.0, nl.float32)
        res[...] = nl.add(tile, 1.0)
        mask = (i_p < p_lim) & (i_f >= f_lo) & (i_f < f_hi)
        scaled = nl.multiply(tile, 3.0, mask=mask)  # fresh tile: only the box is defined
        out = nl.ndarray((2, parts, cols), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=res)
        nl.store(out[1], value=scaled, mask=mask)
        return out

    got = nki.simulate_kernel(kernel, x)
    np.testing.assert_allclose(got[0], x + 1, rtol=1e-6)
    box = (slice(0, p_lim), slice(f_lo, f_hi))
    np.testing.assert_allclose(got[1][box], 3 * x[box], rtol=1e-6)
    outside = np.ones((parts, cols), bool)
    outside[box] = False
    assert np.all(got[1][outside] == 0)  # never written: the output tensor's initial zeros
