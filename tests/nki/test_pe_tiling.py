"""Tensor Engine tiling mode (`tile_position` / `tile_size`) as AWS's NKI API reference defines it: a stationary
tile placed in a row/column tile of the 128x128 array gives the product of the whole array; illegal tiles are
refused with the kernel's line; matmuls on disjoint tiles run at the same time in the timing model
(`nprof.device.pe_tiles`), matmuls sharing PEs one after another."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from nprof import nki
from nprof.device import simulate
from nprof.errors import KernelError
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.calls import NkiCompatWarning
from nprof.nki.pe_tiling import check_tiling
from tests.nki.helpers import dst_matmul


@pytest.mark.parametrize(("position", "size"), [((64, 0), (64, 128)), ((32, 96), (32, 32)), ((0, 64), (64, 64))])
def test_a_tiled_matmul_computes_the_same_product(position, size) -> None:
    rng = np.random.default_rng(size[0] + size[1])
    a = rng.standard_normal((size[0], size[1])).astype(np.float32)  # the stationary fills its tile
    b = rng.standard_normal((size[0], 40)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NkiCompatWarning)  # tiling mode is modelled: nothing to warn about
        got = nki.jit(dst_matmul(position, size), platform_target="trn2")(a, b)
    np.testing.assert_allclose(got, a.T @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("position", "size", "k", "m", "core", "message"),
    [
        ((0, 0), None, 32, 32, "NeuronCore-v3", "tile_position is set but tile_size is not"),
        ((0, 0), (48, 128), 32, 32, "NeuronCore-v3", "row_size 48"),
        ((0, 0), (32, 128), 32, 32, "NeuronCore-v2", "row_size 32 must be one of"),  # 32-row tiles from v3
        ((32, 0), (64, 128), 32, 32, "NeuronCore-v3", "start_row 32 must be a multiple of 64"),
        ((96, 0), (64, 128), 32, 32, "NeuronCore-v3", "start_row 96"),  # would leave the array
        ((0, 0), (64, 64), 128, 32, "NeuronCore-v3", r"stationary tile \[128, 32\] does not fit"),
        ((0, 0), (64, 64), 64, 128, "NeuronCore-v3", r"stationary tile \[64, 128\] does not fit"),
    ],
)
def test_illegal_tiles_are_refused(position, size, k, m, core, message) -> None:
    with pytest.raises(KernelError, match=message):
        check_tiling("nisa.nc_matmul", position, size, k, m, core)


def test_mx_tiles_rows_only_and_double_row_refuses_column_tiles() -> None:
    with pytest.raises(KernelError, match="row tiling only"):
        check_tiling("nisa.nc_matmul_mx", (0, 0), (64, 64), 32, 32, "NeuronCore-v4", rows_only=True)
    with pytest.raises(KernelError, match="double_row cannot be combined"):
        check_tiling("nisa.nc_matmul", (0, 0), (128, 64), 32, 32, "NeuronCore-v3", double_row=True)
    assert check_tiling("nisa.nc_matmul", (), (), 128, 128, "NeuronCore-v3") is None  # unset: the whole array
    assert check_tiling("nisa.nc_matmul_mx", None, None, 128, 128, "NeuronCore-v4", rows_only=True) is None


def _tiled_kernel(plan: list[tuple[tuple[int, int], tuple[int, int], int]]):
    """Matmuls back to back, operands loaded beforehand by two DMAs: matmul j multiplies columns [32j, 32j + 32)
    of a (K rows, at most the row size of its tile) by its own n_j columns of b, in tile `plan[j]` = (position,
    size, n_j); each result to out[j, :, :n_j]."""

    def kernel(a, b):
        k = a.shape[0]
        out = nl.ndarray((len(plan), 32, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=sa, src=a)
        nisa.dma_copy(dst=sb, src=b)
        acc = nl.ndarray((len(plan), nl.par_dim(32), 512), dtype=nl.float32, buffer=nl.psum)
        for j, (position, size, n) in enumerate(plan):
            nisa.nc_matmul(acc[j, :, :n], sa[:k, 32 * j : 32 * j + 32], sb[:k, 512 * j : 512 * j + n],
                           tile_position=position, tile_size=size)  # fmt: skip
        for j in range(len(plan)):
            res = nl.ndarray((32, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc[j])
            nisa.dma_copy(dst=out[j], src=res)
        return out

    return kernel


def _matmul_times(plan, k: int = 32) -> list[tuple[int, int]]:
    """(start, end) in ns of each MATMUL of `_tiled_kernel(plan)` on trn2, after checking its numerics."""
    rng = np.random.default_rng(len(plan))
    a = rng.standard_normal((k, 32 * len(plan))).astype(np.float32)
    b = rng.standard_normal((k, 512 * len(plan))).astype(np.float32)
    kernel = nki.jit(_tiled_kernel(plan), platform_target="trn2")
    got = kernel(a, b)
    for j, (_, _, n) in enumerate(plan):
        np.testing.assert_allclose(got[j, :, :n], a[:, 32 * j : 32 * j + 32].T @ b[:, 512 * j : 512 * j + n],
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
    rows = simulate(kernel.trace(a, b).program, numerics=False).profile.instructions.to_pylist()
    return [(r["ts"], r["ts"] + r["duration"]) for r in rows if r["opcode"] == "MATMUL"]


def test_matmuls_on_disjoint_row_tiles_run_at_the_same_time() -> None:
    rows = [((32 * j, 0), (32, 128), 512) for j in range(4)]
    together = _matmul_times(rows)
    assert max(s for s, _ in together) < min(e for _, e in together)  # all four overlap
    one = together[0][1] - together[0][0]
    assert max(e for _, e in together) - together[0][0] < 1.2 * one
    cols = [((0, 32 * j), (32, 32), 512) for j in range(4)]  # column tiles too
    assert max(s for s, _ in _matmul_times(cols)) < min(e for _, e in _matmul_times(cols))
    same = _matmul_times([((0, 0), (32, 128), 512)] * 4)  # one tile: one after another
    assert all(b[0] >= a[1] for a, b in itertools.pairwise(same))
    assert max(e for _, e in same) - same[0][0] >= 4 * one - 4


def test_a_matmul_waits_for_every_earlier_user_of_its_pes() -> None:
    # a long matmul on rows 0-31, a short one on rows 32-63, then one on rows 0-63: it needs both tiles free,
    # so it starts after the long one ends, not only after the short one (the latest before it)
    long_, short, wide = _matmul_times([((0, 0), (32, 128), 512), ((32, 0), (32, 128), 64), ((0, 0), (64, 128), 512)])
    assert short[0] < long_[1]  # the short one overlapped the long one
    assert wide[0] >= long_[1] and wide[0] >= short[1]
    *_, whole = _matmul_times([((0, 0), (32, 128), 512), ((32, 0), (32, 128), 64), ((), (), 512)])
    assert whole[0] >= long_[1] - 1  # the whole array waits for every tile
