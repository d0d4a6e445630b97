"""Grouped convolutions (depthwise and several channels a group) compiled through their decompositions
(`nprof.compiler.grouped_conv`) give eager's outputs and gradients; the decompositions themselves equal
torch's kernels in fp64."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS, grouped_conv  # noqa: E402
from tests.compiler.conftest import check_module  # noqa: E402

# (in channels, out channels, groups, kernel, stride, padding, dilation, bias, image size)
GEOMETRIES = [
    (6, 6, 6, 3, 1, 1, 1, False, 7),  # MobileNetV2's depthwise 3x3
    (4, 4, 4, 3, 2, 1, 1, True, 9),  # strided depthwise, odd size: the last input row gets no tap
    (5, 5, 5, 7, 1, 3, 1, True, 8),  # ConvNeXt's 7x7 depthwise
    (3, 6, 3, 3, 2, 0, 2, False, 11),  # channel multiplier 2, dilated, unpadded
    (8, 6, 2, 3, 1, 1, 1, True, 5),  # two groups of four channels: one ordinary convolution a group
    (6, 9, 3, 1, 2, 0, 1, False, 6),  # grouped 1x1, strided
]
IDS = [str(g[:7]) for g in GEOMETRIES]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_grouped_conv_matches_eager(geometry: tuple) -> None:
    cin, cout, groups, k, s, p, d, bias, size = geometry
    x = torch.randn(2, cin, size, size, generator=torch.Generator().manual_seed(5)).requires_grad_(True)
    STATS.reset()
    check_module(lambda: torch.nn.Conv2d(cin, cout, k, s, p, d, groups=groups, bias=bias), x)
    assert STATS.fallbacks == 0 and len(STATS.device_ns) >= 2  # forward and backward ran on the device


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_decompositions_equal_torch_kernels_in_fp64(geometry: tuple) -> None:
    """The slow reference: torch's own convolution and convolution_backward, all three gradients."""
    cin, cout, groups, k, s, p, d, _, size = geometry
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, cin, size, size, generator=gen, dtype=torch.float64)
    w = torch.randn(cout, cin // groups, k, k, generator=gen, dtype=torch.float64)
    b = torch.randn(cout, generator=gen, dtype=torch.float64)
    args = ([s, s], [p, p], [d, d], False, [0, 0], groups)
    aten = torch.ops.aten
    want = aten.convolution(x, w, b, *args)
    torch.testing.assert_close(grouped_conv.convolution(x, w, b, *args), want)
    g = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    mask = [True, True, True]
    got = grouped_conv.convolution_backward(g, x, w, [cout], *args, mask)
    for part, ref in zip(got, aten.convolution_backward(g, x, w, [cout], *args, mask), strict=True):
        torch.testing.assert_close(part, ref)


def test_ordinary_and_transposed_convolutions_are_left_to_the_conv_lowering() -> None:
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3)
    assert grouped_conv.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1) is NotImplemented
    wt = torch.randn(4, 2, 3, 3)
    assert grouped_conv.convolution(x, wt, None, [1, 1], [1, 1], [1, 1], True, [0, 0], 2) is NotImplemented
