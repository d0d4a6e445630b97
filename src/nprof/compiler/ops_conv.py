"""Lowering of 2-D convolution (forward and backward) to im2col copies and TensorE matmuls.

Contract: importing registers ``aten.convolution`` and ``aten.convolution_backward`` in
`nprof.compiler.ops.LOWERINGS` for 2-D, non-transposed, ``groups=1`` convolutions (any stride, padding,
dilation), and fp32 depthwise ones (groups = channels = output channels, `kernels.conv_depthwise.supported`;
other grouped convolutions never reach here: `nprof.compiler.grouped_conv` decomposes them).
Forward: the zero-padded input's patches are copied into ``colsT [C*KH*KW, N*OH*OW]`` (an im2col
copy: strided DMA rows), then per image ``out[n] = W[OC, C*KH*KW] @ colsT[:, n]`` (+ bias) on TensorE.
Backward: ``grad_bias`` is a reduction, ``grad_weight = G[OC, N*OH*OW] @ colsT.T`` and ``grad_input`` is the
col2im of ``W.T @ G``: one read-add-write pass per kernel tap into a zero-initialised padded gradient.
Every result is checked for +-inf/NaN on the device (`nprof.compiler.conv_check`): the kernels' evictions, the
im2col results by one more pass; a failed check makes the backend run that call eagerly.
"""

from __future__ import annotations

from typing import Any

from nprof.compiler.conv_check import check_kernel
from nprof.compiler.kernels import conv as direct
from nprof.compiler.kernels import conv_depthwise as depthwise
from nprof.compiler.kernels import conv_spread
from nprof.compiler.kernels import elementwise as ew
from nprof.compiler.kernels.conv_spread_grad import conv_spread_weight_grad, weight_grad_factor
from nprof.compiler.kernels.matmul import copy_kernel, matmul_kernel
from nprof.compiler.kernels.reduce import reduce_kernel
from nprof.compiler.lower import Lowerer
from nprof.compiler.ops import LOWERINGS, as_contiguous, register, view_of
from nprof.compiler.views import View
from nprof.errors import UnsupportedOpError
from nprof.nki.alloc import OverCapacity

__all__ = ["LOWERINGS"]


def _check(lw: Lowerer, x: View, stride: Any, transposed: bool, groups: int) -> None:
    if transposed or groups != 1 or len(x.shape) != 4 or len(stride) != 2:
        raise UnsupportedOpError(
            lw.unsupported_message("a transposed or 3-D convolution (only conv1d and conv2d lower)")
        )


def _depthwise_check(lw: Lowerer, xv: View, wv: View, stride: Any, padding: Any, dilation: Any) -> None:
    """A grouped convolution reaching the lowering is one `kernels.conv_depthwise` runs (`grouped_conv` keeps
    only those out of its decomposition); anything else refuses."""
    ok = len(stride) == len(padding) == len(dilation) == 2
    if ok:
        s, p, d = _pairs(stride, padding, dilation)
        ok = depthwise.supported(tuple(xv.shape), tuple(wv.shape), s, p, d, (xv.dtype, wv.dtype))
    if not ok:
        raise UnsupportedOpError(lw.unsupported_message("a grouped convolution other than fp32 depthwise"))


def _depthwise_forward(lw: Lowerer, xv: View, wv: View, bias: Any, stride: Any, padding: Any,
                       dilation: Any) -> View:  # fmt: skip
    """A depthwise convolution (groups = channels = output channels) by `kernels.conv_depthwise`."""
    _depthwise_check(lw, xv, wv, stride, padding, dilation)
    out = lw.new_tensor()
    bias_v = view_of(lw, bias) if bias is not None else None
    lw.em.call(depthwise.depthwise_kernel, out, as_contiguous(lw, xv), as_contiguous(lw, wv), bias_v,
               *_pairs(stride, padding, dilation))  # fmt: skip
    return out


def _depthwise_backward(lw: Lowerer, g: View, xv: View, wv: View, stride: Any, padding: Any, dilation: Any,
                        output_mask: Any) -> tuple:  # fmt: skip
    """convolution_backward of a depthwise convolution by `kernels.conv_depthwise`."""
    _depthwise_check(lw, xv, wv, stride, padding, dilation)
    geometry = _pairs(stride, padding, dilation)
    g, xv, wv = as_contiguous(lw, g), as_contiguous(lw, xv), as_contiguous(lw, wv)
    results: list[Any] = [None, None, None]
    if output_mask[0]:
        results[0] = lw.new_tensor(index=0)
        lw.em.call(depthwise.depthwise_input_grad_kernel, results[0], g, wv, *geometry)
    if output_mask[1]:
        results[1] = lw.new_tensor(index=1)
        lw.em.call(depthwise.depthwise_weight_grad_kernel, results[1], g, xv, *geometry)
    if output_mask[2]:
        results[2] = lw.new_tensor(index=2)
        lw.em.call(reduce_kernel, results[2], g, [0, 2, 3], "add")
    return tuple(results)


def _on_chip(lw: Lowerer, kernel: Any, *args: Any) -> None:
    """`lw.em.call(kernel, *args)` of a convolution kernel whose tiles stay resident in SBUF: when they cannot
    be placed after all (what else is live fragments SBUF), the clear refusal of an unsupported op (the
    backend's fallback, or one line to the user), never an internal compiler error."""
    try:
        lw.em.call(kernel, *args)
    except OverCapacity as err:
        raise UnsupportedOpError(f"a convolution whose on-chip tiles do not fit SBUF here ({err})") from None


def _padded(lw: Lowerer, x: View, padding: Any) -> View:
    ph, pw = (int(p) for p in padding)
    if ph == 0 and pw == 0:
        return x
    n, c, h, w = x.shape
    buf = lw.temp_tensor((n, c, h + 2 * ph, w + 2 * pw), x.dtype)
    lw.em.call(ew.map_kernel, buf, [0.0], ew.copy_body)
    lw.em.call(copy_kernel, buf.slice(2, ph, ph + h).slice(3, pw, pw + w), x)
    return buf


def _geometry(x: View, kh: int, kw: int, stride: Any, dilation: Any) -> tuple[int, int]:
    _, _, hp, wp = x.shape
    sh, sw = (int(s) for s in stride)
    dh, dw = (int(d) for d in dilation)
    return (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1


def _patch_view(p: View, kh: int, kw: int, oh: int, ow: int, stride: Any, dilation: Any) -> View:
    """The padded input's patches as [C, KH, KW, N, OH, OW] (a strided window, no data moved)."""
    n, c, _, _ = p.shape
    s_n, s_c, s_h, s_w = p.strides
    sh, sw = (int(s) for s in stride)
    dh, dw = (int(d) for d in dilation)
    return View(p.tensor, p.dtype, (c, kh, kw, n, oh, ow),
                (s_c, dh * s_h, dw * s_w, s_n, sh * s_h, sw * s_w), p.offset)  # fmt: skip


def _cols(lw: Lowerer, x: View, w_shape: tuple[int, ...], stride: Any, padding: Any, dilation: Any) -> tuple:
    _, _, kh, kw = w_shape
    p = _padded(lw, x, padding)
    oh, ow = _geometry(p, kh, kw, stride, dilation)
    n, c = x.shape[:2]
    cols = lw.temp_tensor((c * kh * kw, n * oh * ow), x.dtype)
    lw.em.call(copy_kernel, cols.reshape([c, kh, kw, n, oh, ow]), _patch_view(p, kh, kw, oh, ow, stride, dilation))
    return p, cols, oh, ow


def _pairs(*args: Any) -> tuple[tuple[int, int], ...]:
    return tuple((int(a[0]), int(a[1])) for a in args)


def direct_supported(xv: View, wv: View, stride: Any, padding: Any, dilation: Any,
                     parts: tuple[str, ...] = ("forward", "input", "weight")) -> bool:  # fmt: skip
    """Can `nprof.compiler.kernels.conv` run these `parts` of this convolution ("forward", "input": the input
    gradient, "weight": the weight gradient): fp32, geometry supported, and each part's resident tiles fit
    (the stacked small-channel kernels, or the padded-input ones)?"""
    if xv.dtype != "float32" or wv.dtype != "float32" or len(padding) != 2 or len(dilation) != 2:
        return False
    (sh, sw), (ph, pw), (dh, dw) = _pairs(stride, padding, dilation)
    n, c, h, w = xv.shape
    oc, _, kh, kw = wv.shape
    if ph > dh * (kh - 1) or pw > dw * (kw - 1):  # the input gradient's zero-dilated padding would be negative
        return False
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        return False
    fits = direct.fits(tuple(xv.shape), tuple(wv.shape), (oh, ow), (ph, pw))
    conv = ((sh, sw), (ph, pw), (dh, dw))
    stacked = {"forward": direct.stacked_rows((n, c, h, w), (oc, c, kh, kw), (oh, ow), conv) > 0,
               "weight": direct.stacked_rows((n, c, h, w), (oc, c, kh, kw), (oh, ow), conv, weight=True) > 0,
               "input": (sh, sw) == (1, 1) and direct.stacks(oc, kh * kw, n * h * w)}  # fmt: skip
    return all(fits or stacked[part] for part in parts)


def batch_chunk(xv: View, wv: View, stride: Any, padding: Any, dilation: Any,
                parts: tuple[str, ...] = ("forward", "input", "weight")) -> int:  # fmt: skip
    """Images per call of the direct kernels for these `parts`: the whole batch when `direct_supported` says
    so, else the most images (from one down) whose resident tiles fit; 0 when not even one image does (im2col).
    Images are independent in the forward and the input gradient; the weight gradient sums per-chunk results."""
    for nb in range(xv.shape[0], 0, -1):
        if direct_supported(xv.slice(0, 0, nb), wv, stride, padding, dilation, parts):
            return nb
    return 0


def spread_factor(xv: View, wv: View, stride: Any, padding: Any, dilation: Any) -> int:
    """`kernels.conv_spread.spread_factor` of this fp32 convolution (1: not spread)."""
    if xv.dtype != "float32" or wv.dtype != "float32" or len(padding) != 2 or len(dilation) != 2:
        return 1
    s, p, d = _pairs(stride, padding, dilation)
    return conv_spread.spread_factor(tuple(xv.shape), tuple(wv.shape), s, p, d)


def spread_backward(xv: View, wv: View, stride: Any, padding: Any, dilation: Any, parts: tuple[str, ...]) -> bool:
    """Do these `parts` of the backward ("input", "weight") run spread (`kernels.conv_spread`,
    `kernels.conv_spread_grad`)? The weight gradient when the forward spreads; the input gradient when the
    convolution of the output gradient with the flipped, transposed weights does."""
    if xv.dtype != "float32" or wv.dtype != "float32" or len(padding) != 2 or len(dilation) != 2:
        return False
    s, p, d = _pairs(stride, padding, dilation)
    n, c, h, w = xv.shape
    oc, _, kh, kw = wv.shape
    k = {"weight": weight_grad_factor((n, c, h, w), (oc, c, kh, kw), s, p, d),
         "input": conv_spread.spread_factor((n, oc, h, w), (c, oc, kh, kw), s, p, d)}  # fmt: skip
    return bool(parts) and all(k[part] > 1 for part in parts)


def _spread_backward(lw: Lowerer, g: View, xv: View, wv: View, stride: Any, padding: Any, dilation: Any,
                     output_mask: Any) -> tuple:  # fmt: skip
    """convolution_backward in the spread layout (`spread_backward` said yes for the wanted parts)."""
    s, pad, d = _pairs(stride, padding, dilation)
    g, xv, wv = as_contiguous(lw, g), as_contiguous(lw, xv), as_contiguous(lw, wv)
    c = xv.shape[1]
    results: list[Any] = [None, None, None]
    if output_mask[0]:
        results[0] = lw.new_tensor(index=0)
        _on_chip(lw, conv_spread.conv_spread_input_grad, results[0], g, wv, conv_spread.P // c, pad)
    if output_mask[1]:
        results[1] = lw.new_tensor(index=1)
        k = weight_grad_factor(tuple(xv.shape), tuple(wv.shape), s, pad, d)
        _on_chip(lw, conv_spread_weight_grad, results[1], g, xv, k, pad, s)
    if output_mask[2]:
        results[2] = lw.new_tensor(index=2)
        lw.em.call(reduce_kernel, results[2], g, [0, 2, 3], "add")
    return tuple(results)


@register("convolution.default")
def _convolution(lw: Lowerer, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
                 transposed: bool, output_padding: Any, groups: int) -> View:  # fmt: skip
    xv, wv = view_of(lw, x), view_of(lw, weight)
    if int(groups) > 1 and not transposed:
        return _depthwise_forward(lw, xv, wv, bias, stride, padding, dilation)
    _check(lw, xv, stride, transposed, groups)
    k = spread_factor(xv, wv, stride, padding, dilation)
    if k > 1:  # few channels: image rows spread over all partitions
        out = lw.new_tensor()
        bias_v = view_of(lw, bias) if bias is not None else None
        _on_chip(lw, conv_spread.conv_spread_kernel, out, as_contiguous(lw, xv), as_contiguous(lw, wv), bias_v, k,
                   _pairs(padding)[0])  # fmt: skip
        return out
    nb = batch_chunk(xv, wv, stride, padding, dilation, ("forward",))
    if nb:  # in chunks of nb images when the whole batch's tiles do not fit
        out = lw.new_tensor()
        bias_v = view_of(lw, bias) if bias is not None else None
        xc, wc = as_contiguous(lw, xv), as_contiguous(lw, wv)
        for n0 in range(0, xv.shape[0], nb):
            _on_chip(lw, direct.conv_kernel, out.slice(0, n0, n0 + nb), xc.slice(0, n0, n0 + nb), wc, bias_v,
                       *_pairs(stride, padding, dilation))  # fmt: skip
        return out
    _, cols, oh, ow = _cols(lw, xv, wv.shape, stride, padding, dilation)
    out = lw.new_tensor()
    oc = wv.shape[0]
    w2d = as_contiguous(lw, wv).reshape([oc, cols.shape[0]])
    assert w2d is not None
    bias_v = view_of(lw, bias) if bias is not None else None
    for i in range(xv.shape[0]):
        out_i = out.select(0, i).reshape([oc, oh * ow])
        assert out_i is not None
        b_i = (
            View(bias_v.tensor, bias_v.dtype, (oc, oh * ow), (bias_v.strides[0], 0), bias_v.offset) if bias_v else None
        )
        lw.em.call(matmul_kernel, out_i, w2d, cols.slice(1, i * oh * ow, (i + 1) * oh * ow), b_i)
    lw.em.call(check_kernel, out)  # its evictions are the matmuls': checked after (`compiler.conv_check`)
    return out


@register("convolution_backward.default")
def _convolution_backward(lw: Lowerer, grad: Any, x: Any, weight: Any, bias_sizes: Any, stride: Any, padding: Any,
                          dilation: Any, transposed: bool, output_padding: Any, groups: int,
                          output_mask: Any) -> tuple:  # fmt: skip
    g, xv, wv = view_of(lw, grad), view_of(lw, x), view_of(lw, weight)
    if int(groups) > 1 and not transposed:
        return _depthwise_backward(lw, g, xv, wv, stride, padding, dilation, output_mask)
    _check(lw, xv, stride, transposed, groups)
    spread = [wanted and spread_backward(xv, wv, stride, padding, dilation, (part,))
              for part, wanted in zip(("input", "weight"), output_mask[:2], strict=True)]  # fmt: skip
    if not any(spread):
        return _unspread_backward(lw, g, xv, wv, stride, padding, dilation, output_mask)
    results = list(_spread_backward(lw, g, xv, wv, stride, padding, dilation, [*spread, output_mask[2]]))
    rest = [wanted and not s for wanted, s in zip(output_mask[:2], spread, strict=True)]
    if any(rest):  # the part that does not spread (a gradient whose flipped convolution has too many channels)
        other = _unspread_backward(lw, g, xv, wv, stride, padding, dilation, [*rest, False])
        results = [r if r is not None else o for r, o in zip(results, other, strict=True)]
    return tuple(results)


def _unspread_backward(lw: Lowerer, g: View, xv: View, wv: View, stride: Any, padding: Any, dilation: Any,
                       output_mask: Any) -> tuple:  # fmt: skip
    """convolution_backward by the direct kernels (`kernels.conv`) when they fit, else im2col and col2im."""
    parts = tuple(part for part, wanted in zip(("input", "weight"), output_mask[:2], strict=True) if wanted)
    nb = batch_chunk(xv, wv, stride, padding, dilation, parts)
    if nb:
        return _direct_backward(lw, g, xv, wv, (stride, padding, dilation), output_mask, nb)
    n, c, _, _ = xv.shape
    oc, _, kh, kw = wv.shape
    _, _, oh, ow = g.shape
    npix = n * oh * ow
    g2 = lw.temp_tensor((oc, n, oh, ow), g.dtype)  # the gradient as [OC, N*OH*OW]
    lw.em.call(copy_kernel, g2, g.permute((1, 0, 2, 3)))
    g2d = g2.reshape([oc, npix])
    assert g2d is not None
    w2d = as_contiguous(lw, wv).reshape([oc, c * kh * kw])
    assert w2d is not None
    results: list[Any] = [None, None, None]
    if output_mask[1]:
        _, cols, _, _ = _cols(lw, xv, wv.shape, stride, padding, dilation)
        gw = lw.new_tensor(index=1)
        gw2d = gw.reshape([oc, c * kh * kw])
        assert gw2d is not None
        lw.em.call(matmul_kernel, gw2d, g2d, cols.permute((1, 0)))
        lw.em.call(check_kernel, gw)  # the padding products a gradient inf meets: checked (`compiler.conv_check`)
        results[1] = gw
    if output_mask[2]:
        gb = lw.new_tensor(index=2)
        lw.em.call(reduce_kernel, gb, g, [0, 2, 3], "add")
        results[2] = gb
    if output_mask[0]:
        results[0] = _col2im(lw, g2d, w2d, xv.shape, (kh, kw), oh, ow, stride, padding, dilation)
    return tuple(results)


def _col2im(lw: Lowerer, g2d: View, w2d: View, x_shape: tuple[int, ...], k: tuple[int, int], oh: int, ow: int,
            stride: Any, padding: Any, dilation: Any) -> View:  # fmt: skip
    n, c, h, w = x_shape
    kh, kw = k
    ph, pw = (int(p) for p in padding)
    sh, sw = (int(s) for s in stride)
    dh, dw = (int(d) for d in dilation)
    npix = n * oh * ow
    dcols = lw.temp_tensor((c * kh * kw, npix), "float32")  # W.T @ G
    lw.em.call(matmul_kernel, dcols, w2d.permute((1, 0)), g2d)
    hp, wp = h + 2 * ph, w + 2 * pw
    acc = lw.temp_tensor((n, c, hp, wp), "float32")
    lw.em.call(ew.map_kernel, acc, [0.0], ew.copy_body)
    for i in range(kh):
        for j in range(kw):
            dst = View(acc.tensor, acc.dtype, (n, c, oh, ow), (c * hp * wp, hp * wp, sh * wp, sw),
                       i * dh * wp + j * dw)  # fmt: skip
            src = View(dcols.tensor, dcols.dtype, (n, c, oh, ow), (oh * ow, kh * kw * npix, ow, 1),
                       (i * kw + j) * npix)  # fmt: skip
            lw.em.call(ew.map_kernel, dst, [dst, src], ew.binary_body("add"))
    out = lw.new_tensor(index=0)
    lw.em.call(copy_kernel, out, acc.slice(2, ph, ph + h).slice(3, pw, pw + w))
    lw.em.call(check_kernel, out)
    return out


def _direct_backward(lw: Lowerer, g: View, xv: View, wv: View, conv: tuple[Any, ...], output_mask: Any,
                     nb: int) -> tuple:  # fmt: skip
    """convolution_backward with `nprof.compiler.kernels.conv` (operands resident in SBUF, no im2col), in chunks
    of `nb` images (`batch_chunk`): the input gradient chunk by chunk, the weight gradient the sum of the chunks'
    (each after the first into a temporary, added on)."""
    geometry = _pairs(*conv)
    g, xv, wv = as_contiguous(lw, g), as_contiguous(lw, xv), as_contiguous(lw, wv)
    chunks = [(n0, n0 + nb) for n0 in range(0, xv.shape[0], nb)]
    results: list[Any] = [None, None, None]
    if output_mask[0]:
        results[0] = lw.new_tensor(index=0)
        for lo, hi in chunks:
            _on_chip(lw, direct.conv_input_grad_kernel, results[0].slice(0, lo, hi), g.slice(0, lo, hi), wv, *geometry)
    if output_mask[1]:
        results[1] = lw.new_tensor(index=1)
        for k, (lo, hi) in enumerate(chunks):
            part = results[1] if k == 0 else lw.temp_tensor(tuple(wv.shape), "float32")
            _on_chip(lw, direct.conv_weight_grad_kernel, part, g.slice(0, lo, hi), xv.slice(0, lo, hi), *geometry)
            if k:
                lw.em.call(ew.map_kernel, results[1], [results[1], part], ew.binary_body("add"))
    if output_mask[2]:
        results[2] = lw.new_tensor(index=2)
        lw.em.call(reduce_kernel, results[2], g, [0, 2, 3], "add")
    return tuple(results)
