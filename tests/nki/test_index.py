"""Affine index expressions and masks (pure, no device)."""

import pytest

import nprof.nki.language as nl
from nprof.nki.index import IndexExpr


def test_arange_broadcast_positions():
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    assert i_p.shape == (128, 1)
    assert i_f.shape == (1, 512)
    e = 3 * i_p + i_f + 7
    assert e.shape == (128, 512)
    assert e.const == 7
    assert e.bounds() == (7, 7 + 3 * 127 + 511)


def test_arange_start_stop_step():
    e = nl.arange(2, 10, 3)
    assert e.shape == (3,)
    assert e.bounds() == (2, 8)


def test_mgrid_unpacks_and_aliases():
    grid = nl.mgrid[0:128, 0:64]
    i_p, i_f = grid
    assert i_p.shape == (128, 1) and i_f.shape == (1, 64)
    assert grid.p is i_p and grid.x is i_f


def test_mask_box_partial_tile():
    i_p = 128 + nl.arange(128)[:, None]
    box = (i_p < 250).box((128, 512))
    assert box == [(0, 122), (0, 512)]


@pytest.mark.parametrize(
    ("pred", "box"),
    [
        (lambda i: i < 5, (0, 5)),
        (lambda i: i <= 5, (0, 6)),
        (lambda i: i > 5, (6, 10)),
        (lambda i: i >= 5, (5, 10)),
        (lambda i: i == 3, (3, 4)),
        (lambda i: 2 * i < 7, (0, 4)),
        (lambda i: -i + 4 >= 0, (0, 5)),
        (lambda i: (i >= 2) & (i < 4), (2, 4)),
    ],
)
def test_mask_box_comparisons(pred, box):
    i = nl.arange(10)[:, None]
    assert pred(i).box((10, 1))[0] == box


def test_mask_coupling_two_axes_has_no_box():
    i_p, i_f = nl.mgrid[0:8, 0:8]
    assert (i_p >= i_f).box((8, 8)) is None


def test_non_affine_operations_rejected():
    i = nl.arange(8)
    with pytest.raises(TypeError):
        _ = i * i
    with pytest.raises(TypeError):
        _ = i // 2
    with pytest.raises(TypeError):
        bool(i < 3)


def test_index_expr_is_frozen_value():
    assert isinstance(nl.arange(4) + 1, IndexExpr)


def test_mask_combined_with_a_loop_condition_and_mgrid_aliases():
    i_p = nl.arange(8)[:, None]
    assert ((i_p < 4) & True).box((8, 1)) == [(0, 4), (0, 1)]
    assert (True & (i_p < 4)).box((8, 1)) == [(0, 4), (0, 1)]
    assert ((i_p < 4) & False).box((8, 1)) == [(0, 0), (0, 0)]
    grid = nl.mgrid[0:2, 0:3, 0:4, 0:5]
    assert (grid.p, grid.x, grid.y, grid.z) == tuple(grid)
