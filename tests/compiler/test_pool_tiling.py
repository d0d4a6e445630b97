"""Max pooling over planes larger than one SBUF tile (`nprof.compiler.ops_pool.plan` cuts them into pieces
with their halos): the plan against a brute-force account of which outputs read which inputs, and the
lowered pooling, forward (values and indices) and backward, against eager on planes of more than 2048
outputs (resnet18's 56x56 stem pool at 224x224 among them), with few channels so it stays fast."""

from __future__ import annotations

import itertools
import random

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from nprof.compiler.ops_pool import Axis, plan  # noqa: E402
from nprof.compiler.views import FREE_MAX  # noqa: E402
from tests.compiler.conftest import check_fn  # noqa: E402


def _reads(ax: Axis, o: int) -> list[int]:
    """The padded input positions output `o` reads along `ax` (the definition, tap by tap)."""
    return [o * ax.s + t * ax.d for t in range(ax.k)]


def _check_axis(ax: Axis, pieces: list, backward: bool) -> None:
    """Along one axis: the pieces' outputs (forward) or owned bands (backward) partition the axis; each
    piece's tile holds every position its outputs read; a backward piece reads every output whose window
    reaches into its band."""
    if not backward:
        assert [o for p in pieces for o in range(p.o0, p.o1)] == list(range(ax.out))
    else:
        assert [q for p in pieces for q in range(p.q0, p.q1)] == list(range(ax.padded))
    for p in pieces:
        for o in range(p.o0, p.o1):
            assert all(p.t0 <= q < p.t1 for q in _reads(ax, o)), (ax, p, o)
        if backward:
            assert p.t0 <= p.q0 <= p.q1 <= p.t1
            reaching = {o for o in range(ax.out) if any(p.q0 <= q < p.q1 for q in _reads(ax, o))}
            assert reaching <= set(range(p.o0, p.o1)), (ax, p)


def _random_axis(rng: random.Random) -> Axis:
    k, d = rng.randint(1, 4), rng.randint(1, 3)
    pad = rng.randint(0, (k - 1) * d // 2)
    return Axis(rng.randint((k - 1) * d + 1, 300), pad, k, rng.randint(1, 4), d)


@pytest.mark.parametrize("backward", [False, True])
def test_plan_covers_the_plane_with_its_halos_in_small_tiles(backward: bool) -> None:
    rng = random.Random(5)
    axes = [_random_axis(rng) for _ in range(60)] + [Axis(112, 1, 3, 2, 1), Axis(4000, 1, 3, 1, 1)]
    cut = 0
    for rows, cols in itertools.product(axes[::3], axes[1::3]):
        pieces = plan(rows, cols, backward)
        assert pieces is not None
        cut += len(pieces) > 1
        for py, px in pieces:
            assert (py.o1 - py.o0) * (px.o1 - px.o0) <= FREE_MAX
            assert (py.t1 - py.t0) * (px.t1 - px.t0) <= FREE_MAX
        by_row = {py: None for py, _ in pieces}
        by_col = {px: None for _, px in pieces}
        assert len(pieces) == len(by_row) * len(by_col)  # a grid: rows cut times columns cut
        _check_axis(rows, list(by_row), backward)
        _check_axis(cols, list(by_col), backward)
    assert cut > 50  # most of these planes need more than one piece


def test_plan_keeps_a_small_plane_whole_and_refuses_a_window_too_large() -> None:
    assert len(plan(Axis(32, 1, 3, 2, 1), Axis(32, 1, 3, 2, 1), False) or []) == 1
    assert plan(Axis(60, 0, 50, 1, 1), Axis(60, 0, 50, 1, 1), True) is None


CASES = {
    "resnet18_stem_56x56": ((1, 2, 112, 112), {"kernel_size": 3, "stride": 2, "padding": 1}),
    "no_padding_50x50": ((1, 1, 100, 100), {"kernel_size": 2}),
    "columns_cut_3x4000": ((1, 1, 3, 4000), {"kernel_size": 3, "stride": 1, "padding": 1}),
    "dilated_stride1_66x66": ((1, 1, 70, 70), {"kernel_size": 3, "dilation": 2, "padding": 1}),
    "stride_over_kernel_50x50": ((1, 1, 150, 151), {"kernel_size": 2, "stride": 3}),
    "three_d_input_50x50": ((1, 100, 100), {"kernel_size": 2}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_max_pool2d_large_plane_matches_eager(name: str) -> None:
    """Values, gradient (through relu: the input an SBUF tile an earlier kernel keeps; integer values: ties,
    the first maximum wins, overlapping windows add into one input element) and indices equal eager's."""
    shape, kw = CASES[name]
    x = (torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 2.0).round().requires_grad_(True)
    check_fn(lambda t: F.max_pool2d(F.relu(t), **kw) * 2.0, x)
    check_fn(lambda t: F.max_pool2d_with_indices(t, **kw)[1].float(), x.detach(), grad=False)
