"""1-D convolutions (``conv1d``: Whisper's audio front end, Mamba's causal depthwise mixer) as 2-D ones of unit
height: AOTAutograd decompositions.

Contract: `decompositions()` maps ``aten.convolution`` and ``aten.convolution_backward`` to functions that
rewrite a non-transposed convolution of a 3-D input ``[N, C, L]`` (weight ``[OC, C/groups, K]``) as the same
convolution of ``[N, C, 1, L]`` by ``[OC, C/groups, 1, K]`` (stride, padding and dilation ``1``/``0`` along
the new axis), its results squeezed back; any group count (the 2-D call is decomposed again:
`nprof.compiler.grouped_conv` for ``groups > 1``). Every other call goes to `grouped_conv`'s functions
unchanged (which return ``NotImplemented`` for what they leave to the lowering). The rewrite moves no data
and changes no arithmetic: the same products summed in the same order as the 2-D path
(tests/compiler/test_conv1d.py compares with torch's own 1-D kernels in fp64 and eager).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nprof.compiler import grouped_conv

__all__ = ["convolution", "convolution_backward", "decompositions"]


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The decomposition table entries (for `backend.decompositions`; they include `grouped_conv`'s)."""
    import torch

    aten = torch.ops.aten
    return {aten.convolution.default: convolution, aten.convolution_backward.default: convolution_backward}


def _handled(x: Any, transposed: bool) -> bool:
    return x.dim() == 3 and not transposed


def _two_d(stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
           output_padding: Sequence[int]) -> tuple[list[int], ...]:  # fmt: skip
    """The 1-D geometry along the width of a unit-height 2-D convolution."""
    return [1, int(stride[0])], [0, int(padding[0])], [1, int(dilation[0])], [0, int(output_padding[0])]


def convolution(x: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                groups: int) -> Any:  # fmt: skip
    """aten.convolution: 1-D by the unit-height 2-D convolution (module doc); else `grouped_conv`'s."""
    import torch

    if not _handled(x, transposed):
        return grouped_conv.convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                                        groups)  # fmt: skip
    s, p, d, op = _two_d(stride, padding, dilation, output_padding)
    out = torch.ops.aten.convolution(x.unsqueeze(2), weight.unsqueeze(2), bias, s, p, d, False, op, groups)
    return out.squeeze(2)


def convolution_backward(grad: Any, x: Any, weight: Any, bias_sizes: Any, stride: Sequence[int],
                         padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                         output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]) -> Any:  # fmt: skip
    """aten.convolution_backward: 1-D by the unit-height 2-D backward (module doc); else `grouped_conv`'s."""
    import torch

    if not _handled(x, transposed):
        return grouped_conv.convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                                                 output_padding, groups, output_mask)  # fmt: skip
    s, p, d, op = _two_d(stride, padding, dilation, output_padding)
    gx, gw, gb = torch.ops.aten.convolution_backward(grad.unsqueeze(2), x.unsqueeze(2), weight.unsqueeze(2),
                                                     bias_sizes, s, p, d, False, op, groups, output_mask)  # fmt: skip
    return (None if gx is None else gx.squeeze(2), None if gw is None else gw.squeeze(2), gb)
