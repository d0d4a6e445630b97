"""Tensor Engine tiling mode (`tile_position` / `tile_size`) as AWS's NKI API reference defines it: a stationary
tile placed in a row/column tile of the 128x128 array gives the product of the whole array; illegal tiles are
refused with the kernel's line; the parallel run of tiles is not timed, which warns naming the parameter."""

from __future__ import annotations

import numpy as np
import pytest

from nprof import nki
from nprof.errors import KernelError
from nprof.nki.calls import NkiCompatWarning
from nprof.nki.pe_tiling import check_tiling
from tests.nki.helpers import dst_matmul


@pytest.mark.parametrize(("position", "size"), [((64, 0), (64, 128)), ((32, 96), (32, 32)), ((0, 64), (64, 64))])
def test_a_tiled_matmul_computes_the_same_product(position, size) -> None:
    rng = np.random.default_rng(size[0] + size[1])
    a = rng.standard_normal((size[0], size[1])).astype(np.float32)  # the stationary fills its tile
    b = rng.standard_normal((size[0], 40)).astype(np.float32)
    with pytest.warns(NkiCompatWarning, match=r"nc_matmul\(tile_position=\)"):
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
