"""Loops whose bodies call kernel helpers (nprof.nki.replay_pure): replayed when the helpers are pure, traced plainly
when they are not, and in both cases the Program equals the plain trace's (every instruction, dependency, queue,
allocation). Hand-written kernels cover each rule (keyword arguments, `nki.jit` helpers, nested helpers, helpers
with inner loops, returned tiles, bare-named nl functions; helpers with Python side effects, globals indexed by the
loop, control flow, `//`, a grid, a rebound name), and random kernels combine helpers of both kinds.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.nki import replay
from nprof.nki.language import par_dim
from tests.nki.helpers import replayed_as_plain

T = 128
R = replay.RECORDED_AFFINE + 1  # iterations of an affine loop calling kernel helpers that are not replayed (logged,
# and the last): the helpers' bodies are analysed for the degree too (nprof.nki.replay_affine)


def _both(kernel: Callable[..., Any], shapes: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> int:
    """Assert the replayed and the plain Programs are equal; return the iterations replayed."""
    return replayed_as_plain(kernel, shapes, monkeypatch)


# -- pure helpers ----------------------------------------------------------------------------------------------
def scaled(t, factor=2.0):
    """A tile times a constant (a constant default)."""
    return nl.multiply(t, factor)


@nki.jit(mode="trace")
def load_rows(src, dst, r, width):
    """Rows r*T.. of `src` into `dst` (a tile the caller made), two blocks by an inner loop (an nki.jit helper
    storing into its parameter)."""
    for b in nl.affine_range(2):
        dst[b] = nl.load(src[r * T : (r + 1) * T, b * width : (b + 1) * width])


def exp_then_scale(t):
    """Nested: calls another helper."""
    return scaled(nl.exp(t), 0.5)


def store_rows(out, r, value):
    nl.store(out[r * T : (r + 1) * T, 0 : value.shape[1]], value=value)


def helper_kernel(x):
    """Keyword arguments, an nki.jit helper filling a tile, nested helpers, a bare-named nl function (par_dim)."""
    rows, cols = x.shape
    w = cols // 2
    out = nl.ndarray((rows, w), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // T):
        buf = nl.ndarray((2, par_dim(T), w), dtype=x.dtype, buffer=nl.sbuf)
        load_rows(src=x, dst=buf, r=r, width=w)
        both = nl.add(buf[0], buf[1])
        store_rows(out, r, value=exp_then_scale(both))
    return out


def matmul_step(acc, a, b):
    """Accumulates one product into a PSUM tile the caller owns (a helper returning nothing)."""
    acc += nisa.nc_matmul(a, b)


def helper_matmul(lhsT, rhs):
    """An accumulating matmul through a helper, in an inner loop of the replayed one."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // T):
        acc = nl.zeros((T, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // T):
            matmul_step(acc, nl.load(lhsT[k * T : (k + 1) * T, m * T : (m + 1) * T]),
                        nl.load(rhs[k * T : (k + 1) * T, 0:N]))  # fmt: skip
        store_rows(out, m, nl.copy(acc, dtype=out.dtype))
    return out


def test_pure_helpers_are_replayed_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(helper_kernel, [(T * 10, 64)], monkeypatch) == 10 - R
    assert _both(helper_matmul, [(T * 9, T * 9), (T * 9, 256)], monkeypatch) > 0


# -- impure helpers: must fall back ----------------------------------------------------------------------------
CALLS = [0]
STARTS = [0, 1, 2, 3, 9, 5, 6, 7, 8, 4]  # not affine after the fourth: a list must not be replayed


def counted(t):
    """A Python side effect on outside state: each call counts (a subscript store into a global list)."""
    CALLS[0] = CALLS[0] + 1
    return nl.exp(t)


def listed(x, r):
    """A global list indexed by the loop variable."""
    return nl.load(x[STARTS[r] * T : STARTS[r] * T + T, 0:8])


def pick(rows, x, r):
    """Its parameter indexed: the caller passes a Python list."""
    return nl.load(x[rows[r] * T : rows[r] * T + T, 0:8])


def branchy(x, r):
    """Control flow on the loop variable."""
    if r < 5:
        return nl.load(x[r * T : (r + 1) * T, 0:8])
    return nl.load(x[0:T, 0:8])


def halved(x, r):
    """`//` of the loop variable: piecewise constant, linear over the four logged iterations."""
    return nl.load(x[(r // 4) * T : (r // 4) * T + T, 0:8])


def _loop(fetch: Callable[[Any, int], Any]) -> Callable[..., Any]:
    def kernel(x):
        out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(10):
            nl.store(out[0:T, 0:8], value=fetch(x, r))
        return out

    return kernel


def counted_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(10):
        nl.store(out[0:T, 0:8], value=counted(nl.load(x[r * T : (r + 1) * T, 0:8])))
    return out


def picked_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(10):
        nl.store(out[0:T, 0:8], value=pick(STARTS, x, r))
    return out


@nki.jit
def _gridded(x, r):
    return nl.load(x[r * T : (r + 1) * T, 0:8])


GRIDDED = _gridded[2]


def gridded_kernel(x):
    """A helper launched with a grid (an SPMD launch per call): not a kernel helper."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(10):
        GRIDDED(x, r)
    return out


@pytest.mark.parametrize("kernel", [_loop(listed), picked_kernel, _loop(branchy), _loop(halved), gridded_kernel])
def test_impure_helpers_fall_back(kernel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(kernel, [(T * 10, 8)], monkeypatch) == 0


def test_a_helper_with_python_side_effects_runs_every_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS[0] = 0
    assert _both(counted_kernel, [(T * 10, 8)], monkeypatch) == 0
    assert CALLS[0] == 20  # ten calls in each of the two traces: none skipped


def rebindable(x, r):
    return scaled(nl.load(x[r * T : (r + 1) * T, 0:8]))


def inner(x, r):
    return nl.load(x[r * T : (r + 1) * T, 0:8])


def outer(x, r):
    return scaled(inner(x, r))


def rebound_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(10):
        nl.store(out[0:T, 0:8], value=rebindable(x, r))
        nl.store(out[0:T, 0:8], value=outer(x, r))
    return out


def test_a_rebound_helper_name_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop is checked once per code position; a helper name rebound later (in the kernel's module, or in a
    helper's) to an impure function is seen when the loop starts again."""
    assert _both(rebound_kernel, [(T * 10, 8)], monkeypatch) == 10 - R
    monkeypatch.setitem(globals(), "rebindable", listed)
    assert _both(rebound_kernel, [(T * 10, 8)], monkeypatch) == 0
    monkeypatch.undo()  # (the function checked again)
    assert _both(rebound_kernel, [(T * 10, 8)], monkeypatch) == 10 - R
    monkeypatch.setitem(globals(), "inner", listed)
    assert _both(rebound_kernel, [(T * 10, 8)], monkeypatch) == 0


# -- random kernels --------------------------------------------------------------------------------------------
def _random_kernel(rng: random.Random) -> tuple[Callable[..., Any], bool]:
    """A loop of random length and offsets calling a random chain of helpers; whether it must replay."""
    fetch: Callable[..., Any] = rng.choice([plain_fetch, jit_fetch, nested_fetch])
    impure = rng.random() < 0.3
    step, length = rng.choice([1, 2]), rng.randint(6, 10)
    if impure:
        fetch, step = rng.choice([listed, branchy, halved]), 1

    def kernel(x):
        out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for r in nl.affine_range(length):
            nl.store(out[0:T, 0:8], value=scaled(fetch(x, r * step)))
        return out

    return kernel, not impure and length >= replay.MIN_ITERATIONS


def plain_fetch(x, r):
    return nl.load(x[r * T : (r + 1) * T, 0:8])


@nki.jit(mode="trace")
def jit_fetch(x, r):
    return nl.exp(nl.load(x[r * T : (r + 1) * T, 0:8]))


def nested_fetch(x, r):
    return scaled(jit_fetch(x, r), 3.0)


def test_random_kernels_with_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(27)
    for _ in range(10):
        kernel, replays = _random_kernel(rng)
        replayed = _both(kernel, [(T * 20, 8)], monkeypatch)
        assert (replayed > 0) == replays
