"""1-D convolutions (Whisper's audio front end, Mamba's causal depthwise mixer) compile as unit-height 2-D ones
(`nprof.compiler.conv1d`): outputs and gradients equal eager's; the rewrite itself equals torch's 1-D kernels
in fp64."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS, conv1d  # noqa: E402
from tests.compiler.conftest import check_module  # noqa: E402

# (in channels, out channels, groups, kernel, stride, padding, dilation, bias, length)
GEOMETRIES = [
    (8, 16, 1, 3, 1, 1, 1, True, 12),  # Whisper's first conv (kernel 3, padding 1)
    (16, 16, 1, 3, 2, 1, 1, True, 12),  # Whisper's second conv: stride 2 halves the frames
    (6, 6, 6, 4, 1, 3, 1, True, 9),  # Mamba's causal depthwise conv (padding K-1, the tail cut by the model)
    (4, 6, 2, 3, 2, 2, 2, False, 11),  # two groups, strided and dilated
]
IDS = [str(g[:7]) for g in GEOMETRIES]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_conv1d_matches_eager(geometry: tuple) -> None:
    cin, cout, groups, k, s, p, d, bias, length = geometry
    x = torch.randn(2, cin, length, generator=torch.Generator().manual_seed(5)).requires_grad_(True)
    STATS.reset()
    check_module(lambda: torch.nn.Conv1d(cin, cout, k, s, p, d, groups=groups, bias=bias), x)
    assert STATS.fallbacks == 0 and len(STATS.device_ns) >= 2  # forward and backward ran on the device


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
def test_rewrite_equals_torch_1d_kernels_in_fp64(geometry: tuple) -> None:
    """The slow reference: torch's own 1-D convolution and convolution_backward, all three gradients."""
    cin, cout, groups, k, s, p, d, _, length = geometry
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, cin, length, generator=gen, dtype=torch.float64)
    w = torch.randn(cout, cin // groups, k, generator=gen, dtype=torch.float64)
    b = torch.randn(cout, generator=gen, dtype=torch.float64)
    args = ([s], [p], [d], False, [0], groups)
    aten = torch.ops.aten
    want = aten.convolution(x, w, b, *args)
    torch.testing.assert_close(conv1d.convolution(x, w, b, *args), want)
    g = torch.randn(want.shape, generator=gen, dtype=torch.float64)
    mask = [True, True, True]
    got = conv1d.convolution_backward(g, x, w, [cout], *args, mask)
    for part, ref in zip(got, aten.convolution_backward(g, x, w, [cout], *args, mask), strict=True):
        torch.testing.assert_close(part, ref)


def test_other_convolutions_are_left_to_the_grouped_decomposition_and_the_lowering() -> None:
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3)
    assert conv1d.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1) is NotImplemented
    x1, wt = torch.randn(1, 4, 5), torch.randn(4, 2, 3)  # transposed 1-D: the lowering refuses it in one line
    assert conv1d.convolution(x1, wt, None, [1], [1], [1], True, [0], 1) is NotImplemented
