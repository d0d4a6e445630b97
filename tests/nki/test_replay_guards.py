"""Branches the nl layer takes on the kernel's integers, held fixed over replayed iterations (nprof.nki.replay_guard).

A pure body's integers are polynomials in the loop index (nprof.nki.replay_affine), but the nl layer maps some of
them piecewise: a negative index or slice bound counts from the end, a stepped slice or `nl.arange` has
ceil((stop - start) / step) elements, a slice past the end is kept for a mask and checked at use. Each kernel
below stays in one branch over the logged iterations and changes branch in an iteration that would be replayed:
the replayed trace must equal the plain one (here: by falling back), or raise where the plain one raises. Other
ways a body could differ between iterations (`%`, `//`, `min`/`max`, conditions on the index, Python state a
helper changes) must fall back too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import nprof.nki.language as nl
from nprof.errors import KernelError
from nprof.nki.kernel import Kernel
from nprof.nki.typing import tensor
from tests.nki.helpers import replayed_as_plain

T = 128
N = 10


def wrapped_index_kernel(x):
    """`r - 5`: columns 11..14 (counted from the end) over the logged iterations, column 0 at r = 5 (not 16)."""
    out = nl.ndarray((8, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, r], value=nl.load(x[1:9, r - 5]))
    return out


def wrapped_slice_kernel(x):
    """Slice bounds negative (from the end) for r <= 4, not from r = 5: 4:12, not 132:140."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, 0:8], value=nl.load(x[1:9, r * 16 - 76 : r * 16 - 68]))
    return out


def stepped_slice_kernel(x):
    """ceil((121 + r) / 8) partitions: 16 for r <= 7, 17 at r = 8."""
    out = nl.ndarray((T + 8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0 : 121 + r : 8, 0:8], value=nl.load(x[0 : 121 + r : 8, 0:8]))
    return out


def arange_kernel(x):
    """`nl.arange(0, 57 + r, 8)`: 8 elements for r <= 7, 9 at r = 8."""
    out = nl.ndarray((T, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(T)[:, None]
    for r in nl.affine_range(N):
        a = nl.arange(0, 57 + r, 8)
        i_f = a[None, :]
        nl.store(out[i_p, i_f], value=nl.load(x[i_p, i_f]))
    return out


def mgrid_kernel(x):
    """`nl.mgrid` with a stepped range that grows with r, as `arange_kernel`."""
    out = nl.ndarray((T, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        g = nl.mgrid[0:T, 0 : 57 + r : 8]
        nl.store(out[g.p, g.x], value=nl.load(x[g.p, g.x]))
    return out


def corner_kernel(x):
    """Columns from the end while r + j <= 12 (every logged iteration of either loop: r <= 3 or j <= 3), not at
    r = j = 8, an iteration replayed by both loops (the outer loop sees it at j = 9, the inner loop's last)."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        for j in nl.affine_range(N):
            o = 16 * (r + j) - 208
            nl.store(out[0:8, 0:8], value=nl.load(x[1:9, o : o + 8]))
    return out


@pytest.mark.parametrize("kernel, shape", [
    (wrapped_index_kernel, (T, 16)),
    (wrapped_slice_kernel, (T, 128)),
    (stepped_slice_kernel, (T + 8, 8)),
    (arange_kernel, (T, 128)),
    (mgrid_kernel, (T, 128)),
])  # fmt: skip
def test_a_branch_of_the_nl_layer_changing_after_the_logged_iterations(
    kernel: Callable[..., Any], shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert replayed_as_plain(kernel, [shape], monkeypatch) == 0


def test_an_inner_loop_tells_its_guards_to_the_outer_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner loops replay (at r <= 3, and at r = 9: affine, two logged iterations), the outer loop must not."""
    from nprof.nki import replay

    assert replayed_as_plain(corner_kernel, [(T, 256)], monkeypatch) == 5 * (N - 1 - replay.RECORDED_AFFINE)


def raising_kernel(x):
    """The slice 52:0 at r = 6 (start from the end, stop 0) is an error; r = 0..5 and 7..9 are valid."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, 0:8], value=nl.load(x[1:9, 40 - r * 8 : 48 - r * 8]))
    return out


def past_the_end_kernel(x):
    """Columns 40 + 4r .. 48 + 4r: past the end of 60 columns from r = 4 (an error without mask=), yet in the
    tensor (rows 1..8 of 128)."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, 0:8], value=nl.load(x[1:9, 40 + 4 * r : 48 + 4 * r]))
    return out


@pytest.mark.parametrize("kernel, shape", [(raising_kernel, (T, 60)), (past_the_end_kernel, (T, 60))])
def test_an_iteration_the_plain_trace_refuses_is_refused_with_replay(
    kernel: Callable[..., Any], shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof.nki import replay

    for enabled in (False, True):
        monkeypatch.setattr(replay, "ENABLED", enabled)
        with pytest.raises(KernelError) as err:
            Kernel(kernel).trace(tensor[list(shape), nl.float32])
        assert "out of bounds" in str(err.value) or "out-of-bounds" in str(err.value)


# -- other ways an iteration could differ: each falls back ------------------------------------------------------
SEEN: list[int] = []
COUNTER = 0


def counted(src):
    """A helper changing a global: not a kernel helper (`global`), so the loop is traced plainly."""
    global COUNTER
    COUNTER += 1
    return nl.load(src[(COUNTER % 2) * T : (COUNTER % 2) * T + T, 0:8])


def global_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:T, 0:8], value=nl.add(counted(x), nl.load(x[r * T : r * T + T, 0:8])))
    return out


def appended_kernel(x):
    SEEN.clear()
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        SEEN.append(r)
        o = len(SEEN) % 3
        nl.store(out[0:T, 0:8], value=nl.load(x[o * T : o * T + T, 0:8]))
    return out


def mod_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = (r % 5) * T  # 0, T, 2T, 3T over the logged iterations: a line, then 4T, 0, ...
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def min_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = min(r, 5) * T + max(r - 7, 0)
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def condition_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = r * T
        if o > 5 * T:
            o = 0
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


@pytest.mark.parametrize("kernel", [global_kernel, appended_kernel, mod_kernel, min_kernel, condition_kernel])
def test_python_that_differs_between_iterations_falls_back(kernel: Callable[..., Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    global COUNTER
    COUNTER = 0
    SEEN.clear()
    assert replayed_as_plain(kernel, [(T * N, 8)], monkeypatch) == 0
