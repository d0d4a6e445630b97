"""Grouped 2-D convolutions (``groups > 1``) rewritten as ops the backend lowers: AOTAutograd decompositions.

Contract: `decompositions()` maps ``aten.convolution`` and ``aten.convolution_backward`` to functions that
handle 4-D, non-transposed convolutions with ``groups > 1`` and return ``NotImplemented`` for every other
call (``groups=1`` keeps the direct conv kernels of `ops_conv`; transposed ones stay unsupported there), and
for the depthwise convolutions `nprof.compiler.kernels.conv_depthwise` runs (`kernel_runs`: fp32, groups =
channels = output channels, rows within one PSUM bank; `ops_conv` lowers them to that kernel, forward and
backward). What stays here: channel multipliers (output channels m x C, m > 1), groups between 1 and C
(ResNeXt-style), other dtypes, and the geometries that kernel refuses (its module doc).

* Depthwise (one input channel a group, ``weight [C*m, 1, KH, KW]``; MobileNet, ConvNeXt, EfficientNet):
  a sum over the kernel taps of a strided window of the zero-padded input times that tap's per-channel
  weight (VectorE work, no matmul). Backward: the weight gradient of a tap is the sum of the output
  gradient times the same window; the input gradient is the same tap sum over the output gradient
  zero-inserted by the stride and padded by the kernel's reach, with the kernel flipped, cropped to the
  input.
* Other groups (several channels a group): one ``groups=1`` convolution (or convolution backward) per
  group on the group's channel slices, concatenated over channels.

The results equal torch's to rounding (the same products, summed in another order); the tests compare them
with eager on random inputs (tests/compiler/test_grouped_conv.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["KERNEL", "decompositions", "kernel_runs"]

KERNEL = True  # module switch: depthwise convolutions the kernel runs go to it (tests and benches compare both)


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The decomposition table entries (for `backend.decompositions`)."""
    import torch

    aten = torch.ops.aten
    return {aten.convolution.default: convolution, aten.convolution_backward.default: convolution_backward}


def kernel_runs(x: Any, weight: Any, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                groups: int) -> bool:  # fmt: skip
    """Does `kernels.conv_depthwise` run this grouped convolution (forward and backward)?"""
    from nprof.compiler.kernels.conv_depthwise import supported

    try:
        xs, ws = tuple(int(s) for s in x.shape), tuple(int(s) for s in weight.shape)
        geometry = (_pair(stride), _pair(padding), _pair(dilation))
    except (TypeError, ValueError):  # symbolic sizes: left to the decomposition
        return False
    dtypes = tuple(str(t.dtype).removeprefix("torch.") for t in (x, weight))
    return len(xs) == 4 and int(groups) == xs[1] and len(stride) == 2 and supported(xs, ws, *geometry, dtypes)


def _handled(x: Any, transposed: bool, groups: int) -> bool:
    return int(groups) > 1 and not transposed and x.dim() == 4


def _pair(v: Sequence[int]) -> tuple[int, int]:
    return (int(v[0]), int(v[-1]))


def _window(xp: Any, i: int, j: int, out_hw: tuple[int, int], stride: tuple[int, int],
            dilation: tuple[int, int]) -> Any:  # fmt: skip
    """The padded input's rows/columns that kernel tap (i, j) meets: [N, K, OH, OW] (a strided slice)."""
    (oh, ow), (sh, sw), (dh, dw) = out_hw, stride, dilation
    return xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]


def _tap_sum(xp: Any, w: Any, out_hw: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
             flip: bool = False) -> Any:  # fmt: skip
    """sum over taps (i, j) of window(i, j) * w[:, 0, i, j] per channel: xp [N, K, Hp, Wp], w [K, 1, KH, KW]
    (w[:, 0, KH-1-i, KW-1-j] when `flip`)."""
    k, _, kh, kw = w.shape
    out = None
    for i in range(kh):
        for j in range(kw):
            tap = w[:, 0, kh - 1 - i, kw - 1 - j] if flip else w[:, 0, i, j]
            term = _window(xp, i, j, out_hw, stride, dilation) * tap.reshape(1, k, 1, 1)
            out = term if out is None else out + term
    return out


def _per_output_channel(x: Any, mult: int) -> Any:
    """x [N, C, H, W] with each channel repeated `mult` times in place ([N, C*mult, H, W]), as the depthwise
    weight's output channels (c*mult .. c*mult+mult-1 read input channel c) need."""
    if mult == 1:
        return x
    n, c, h, w = x.shape
    return x.unsqueeze(2).expand(n, c, mult, h, w).reshape(n, c * mult, h, w)


def _geometry(x_shape: Sequence[int], w_shape: Sequence[int], stride: tuple[int, int], padding: tuple[int, int],
              dilation: tuple[int, int]) -> tuple[int, int]:  # fmt: skip
    (h, w), (kh, kw) = x_shape[2:], w_shape[2:]
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return oh, ow


def _pad(x: Any, ph: int, pw: int) -> Any:
    import torch

    return torch.constant_pad_nd(x, [pw, pw, ph, ph], 0.0) if ph or pw else x


def convolution(x: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                groups: int) -> Any:  # fmt: skip
    """aten.convolution for grouped 2-D convolutions (module doc); NotImplemented otherwise."""
    import torch

    if not _handled(x, transposed, groups) or (KERNEL and kernel_runs(x, weight, stride, padding, dilation, groups)):
        return NotImplemented
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    if weight.shape[1] > 1:  # several channels a group: one ordinary convolution per group
        cg, og = x.shape[1] // groups, weight.shape[0] // groups
        parts = [torch.ops.aten.convolution(x[:, g * cg : (g + 1) * cg], weight[g * og : (g + 1) * og],
                                            None if bias is None else bias[g * og : (g + 1) * og],
                                            stride, padding, dilation, False, output_padding, 1)
                 for g in range(groups)]  # fmt: skip
        return torch.cat(parts, dim=1)
    mult = weight.shape[0] // x.shape[1]
    xp = _per_output_channel(_pad(x, *p), mult)
    out = _tap_sum(xp, weight, _geometry(x.shape, weight.shape, s, p, d), s, d)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def _zero_insert(g: Any, stride: tuple[int, int]) -> Any:
    """g [N, K, OH, OW] with stride-1 zeros between its rows and columns ([N, K, sh*(OH-1)+1, sw*(OW-1)+1])."""
    import torch

    for dim, step in ((2, stride[0]), (3, stride[1])):
        if step > 1:
            shape = list(g.shape)
            shape[dim] = step * (shape[dim] - 1) + 1
            g = torch.slice_scatter(g.new_zeros(shape), g, dim, 0, None, step)
    return g


def _depthwise_input_grad(g: Any, x_shape: Sequence[int], weight: Any, stride: tuple[int, int],
                          padding: tuple[int, int], dilation: tuple[int, int]) -> Any:  # fmt: skip
    """The depthwise convolution's input gradient (module doc): [N, C, H, W]."""
    import torch

    n, c, h, w = x_shape
    kh, kw = weight.shape[2:]
    (dh, dw), (ph, pw) = dilation, padding
    gp = _pad(_zero_insert(g, stride), dh * (kh - 1), dw * (kw - 1))
    full_hw = (gp.shape[2] - dh * (kh - 1), gp.shape[3] - dw * (kw - 1))  # rows of the padded input reached
    full = _tap_sum(gp, weight, full_hw, (1, 1), dilation, flip=True)
    mult = weight.shape[0] // c
    if mult > 1:
        full = full.reshape(n, c, mult, *full_hw).sum(2)
    hp, wp = h + 2 * ph, w + 2 * pw  # rows past the last window's reach get no gradient
    full = torch.constant_pad_nd(full, [0, wp - full_hw[1], 0, hp - full_hw[0]], 0.0)
    return full[:, :, ph : ph + h, pw : pw + w]


def _depthwise_weight_grad(g: Any, x: Any, weight: Any, stride: tuple[int, int], padding: tuple[int, int],
                           dilation: tuple[int, int]) -> Any:  # fmt: skip
    """The depthwise convolution's weight gradient: [C*m, 1, KH, KW], one reduction a tap."""
    import torch

    k, _, kh, kw = weight.shape
    xp = _per_output_channel(_pad(x, *padding), k // x.shape[1])
    out_hw = (g.shape[2], g.shape[3])
    taps = [(g * _window(xp, i, j, out_hw, stride, dilation)).sum([0, 2, 3]) for i in range(kh) for j in range(kw)]
    return torch.stack(taps, dim=1).reshape(k, 1, kh, kw)


def convolution_backward(grad: Any, x: Any, weight: Any, bias_sizes: Any, stride: Sequence[int],
                         padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                         output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]) -> Any:  # fmt: skip
    """aten.convolution_backward for grouped 2-D convolutions (module doc); NotImplemented otherwise."""
    if not _handled(x, transposed, groups) or (KERNEL and kernel_runs(x, weight, stride, padding, dilation, groups)):
        return NotImplemented
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    if weight.shape[1] > 1:
        return _per_group_backward(grad, x, weight, stride, padding, dilation, output_padding, groups, output_mask)
    gx = _depthwise_input_grad(grad, x.shape, weight, s, p, d) if output_mask[0] else None
    gw = _depthwise_weight_grad(grad, x, weight, s, p, d) if output_mask[1] else None
    gb = grad.sum([0, 2, 3]) if output_mask[2] else None
    return gx, gw, gb


def _per_group_backward(grad: Any, x: Any, weight: Any, stride: Sequence[int], padding: Sequence[int],
                        dilation: Sequence[int], output_padding: Sequence[int], groups: int,
                        output_mask: Sequence[bool]) -> Any:  # fmt: skip
    """convolution_backward of a grouped convolution as one groups=1 backward per group, concatenated."""
    import torch

    cg, og = x.shape[1] // groups, weight.shape[0] // groups
    parts = [torch.ops.aten.convolution_backward(grad[:, g * og : (g + 1) * og], x[:, g * cg : (g + 1) * cg],
                                                 weight[g * og : (g + 1) * og], None, stride, padding, dilation,
                                                 False, output_padding, 1, [output_mask[0], output_mask[1], False])
             for g in range(groups)]  # fmt: skip
    gx = torch.cat([q[0] for q in parts], dim=1) if output_mask[0] else None
    gw = torch.cat([q[1] for q in parts], dim=0) if output_mask[1] else None
    gb = grad.sum([0, 2, 3]) if output_mask[2] else None
    return gx, gw, gb
