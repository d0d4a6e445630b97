"""Replayed loop iterations (nprof.nki.replay) give exactly the Program of the plain trace.

Each kernel is traced twice, with replay on and off; the Programs must be equal instruction by instruction
(operands, attrs, deps, queues, sources), with the same allocation records and SBUF/PSUM high-water marks. The
kernels cover loops that qualify (matmul tilings, accumulators, sequential_range, tiles made in the body) and
loops that must fall back (masks, Python lists indexed by the loop variable, non-affine index arithmetic, calls
of impure helpers, nested loops), so a test also says whether replay ran (kernel helpers: test_replay_helpers.py).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof.nki import replay
from tests.nki.helpers import replayed_as_plain

T = 128
A = replay.RECORDED_AFFINE + 1  # iterations of an affine loop not replayed: those logged, and the last


def _both(kernel: Callable[..., Any], shapes: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> int:
    """Assert the replayed and the plain Programs are equal; return the iterations replayed."""
    return replayed_as_plain(kernel, shapes, monkeypatch, nl.bfloat16)


def mm_tiles(lhsT, rhs):
    """C = lhsT.T @ rhs, both operands loaded per matmul; the k loop accumulates in PSUM."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // T):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((T, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // T):
                a = nl.load(lhsT[k * T : (k + 1) * T, m * T : (m + 1) * T])
                b = nl.load(rhs[k * T : (k + 1) * T, n * 512 : (n + 1) * 512])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * T : (m + 1) * T, n * 512 : (n + 1) * 512], value=nl.copy(acc, dtype=out.dtype))
    return out


def mm_column(lhsT, rhs):
    """The lhsT column held in one multi-block tile filled by one loop and read by another (sequential)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    col = nl.ndarray((K // T, nl.par_dim(T), M), dtype=lhsT.dtype, buffer=nl.sbuf)
    for k in nl.affine_range(K // T):
        col[k] = nl.load(lhsT[k * T : (k + 1) * T, 0:M])
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in nl.sequential_range(K // T):
        acc += nisa.nc_matmul(col[k], nl.load(rhs[k * T : (k + 1) * T, 0:N]))
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))
    return out


def row_sums(x):
    """An SBUF accumulator updated in place by every iteration, and a PSUM tile made in each one."""
    R, C = x.shape
    out = nl.ndarray((T, C), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.zeros((T, C), nl.float32, buffer=nl.sbuf)
    for r in nl.affine_range(R // T):
        t = nl.load(x[r * T : (r + 1) * T, 0:C])
        total[...] = nl.add(total, t)
        scratch = nl.exp(t)
        nl.store(out[0:T, 0:C], value=scratch)
    nl.store(out, value=total)
    return out


def masked_rows(x):
    """A mask coupling the tile to the loop index: the loop falls back (comparisons in the body)."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:T, 0:C]
    for r in nl.affine_range(R // T):
        t = nl.load(x[r * T + i_p, i_f], mask=(r * T + i_p < R - 3))
        nl.store(out[r * T + i_p, i_f], value=t, mask=(r * T + i_p < R - 3))
    return out


STARTS = [0, 1, 2, 3, 9, 5, 6, 7, 8, 4]  # not affine after the fourth: a list must not be replayed


def listed_rows(x):
    """Rows picked through a Python list indexed by the loop variable: must fall back."""
    out = nl.ndarray((T, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(len(STARTS)):
        nl.store(out[0:T, 0:8], value=nl.load(x[STARTS[r] * T : STARTS[r] * T + T, 0:8]))
    return out


def aliased_rows(x):
    """The list aliased by a name the body binds, then indexed by the loop variable: must fall back."""
    out = nl.ndarray((T, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(len(STARTS)):
        starts = STARTS
        nl.store(out[0:T, 0:8], value=nl.load(x[starts[r] * T : starts[r] * T + T, 0:8]))
    return out


def squared_rows(x):
    """Index arithmetic that is not affine (r * r): the four logged iterations show it, so it falls back."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(10):
        nl.store(out[0:T, 0:8], value=nl.load(x[0:T, r * r : r * r + 8]))
    return out


def _helper(t):
    return nl.multiply(t, 2.0)


def helper_rows(x):
    """A body calling a Python helper that builds instructions from its argument: a pure kernel helper, replayed
    (two iterations logged: the helper's body is analysed too, and it is affine)."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(10):
        nl.store(out[0:T, 0:8], value=_helper(nl.load(x[r * T : (r + 1) * T, 0:8])))
    return out


def test_matmul_tiling_is_replayed_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(mm_tiles, [(2048, 256), (2048, 1024)], monkeypatch) == 4 * (16 - A)


def test_sequential_range_and_multi_block_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(mm_column, [(2048, 128), (2048, 512)], monkeypatch) == 2 * (16 - A)


def test_accumulator_and_tiles_made_in_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(row_sums, [(128 * 12, 64)], monkeypatch) == 12 - A


def test_impure_bodies_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(masked_rows, [(128 * 10, 128)], monkeypatch) == 0


def test_a_pure_helper_call_is_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(helper_rows, [(128 * 10, 128)], monkeypatch) == 10 - A


def test_lists_indexed_by_the_loop_and_non_affine_offsets_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(listed_rows, [(128 * 10, 8)], monkeypatch) == 0
    assert _both(aliased_rows, [(128 * 10, 8)], monkeypatch) == 0
    assert _both(squared_rows, [(128, 96)], monkeypatch) == 0


def test_random_matmul_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(0)
    for _ in range(4):
        k, m, n = rng.choice([8, 9, 13]), rng.choice([1, 2]), rng.choice([1, 2])
        assert _both(mm_tiles, [(k * T, m * T), (k * T, n * 512)], monkeypatch) == m * n * (k - A)


def test_nested_loops_replay_whole_inner_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    loops = replay.STATS["loops"]
    # m, n and k loops of 8: the m loop replays iterations A-1..6 whole (their n and k loops included)
    assert _both(mm_tiles, [(8 * T, 8 * T), (8 * T, 8 * 512)], monkeypatch) == (8 - A) * (1 + A + A * A)
    assert replay.STATS["loops"] - loops == 1 + A + A * A


@pytest.mark.parametrize("numpy_from", [0, replay.ON_LINES_NUMPY])
def test_on_lines_matches_the_plain_check(numpy_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The numpy check that logged integers lie on lines equals the plain pairwise check (random lists, int64
    edges and integers beyond int64), numpy used for every size or from its threshold on."""
    monkeypatch.setattr(replay, "ON_LINES_NUMPY", numpy_from)

    def plain(ints: list[list[int]], step: list[int]) -> bool:
        return all(y - x == d for p, q in itertools.pairwise(ints) for x, y, d in zip(p, q, step, strict=True))

    rng = random.Random(14)
    for _ in range(400):
        n, width = rng.randint(2, 5), rng.choice([rng.randint(0, 4), rng.randint(100, 300)])
        big = rng.choice([10, 1 << 40, 1 << 62, 1 << 70])
        start = [rng.randint(-big, big) for _ in range(width)]
        step = [rng.randint(-big, big) for _ in range(width)]
        ints = [[s + k * d for s, d in zip(start, step, strict=True)] for k in range(n)]
        if width and rng.random() < 0.5:
            ints[rng.randrange(n)][rng.randrange(width)] += rng.choice([1, -1, 1 << 63])
        assert replay._on_lines(ints, step) == plain(ints, step), (ints, step)
    edge = 3 << 61  # (in int64, but the difference of -edge and edge is not)
    assert replay._on_lines([[-edge], [edge]], [2 * edge])
    assert not replay._on_lines([[edge], [-edge]], [2 * edge])
