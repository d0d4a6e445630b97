"""Direct 2-D convolution on TensorE (NKI) with its operands resident in SBUF: no im2col through HBM.

Contract (all views contiguous NCHW / OIHW fp32; stride, padding, dilation pairs; groups 1):
* `conv_kernel(out, x, w, bias, stride, padding, dilation)`: out[N, OC, OH, OW] = conv2d(x, w) + bias.
* `conv_input_grad_kernel(dx, g, w, stride, padding, dilation)`: dx[N, C, H, W], the gradient of the
  input: the stride-1 convolution of the zero-dilated, zero-padded gradient g with the flipped weights.
* `conv_weight_grad_kernel(dw, g, x, stride, padding, dilation)`: dw[OC, C, KH, KW] = sum over images and
  output pixels of g[oc, pixel] * x window[c, pixel] (pixels on partitions: TensorE transposes).
`fits(...)` says whether the resident tiles fit the SBUF share these kernels use; the lowering falls back to
im2col otherwise. Each operand crosses HBM once, in one DMA per 128 channels (NKI performance guide: few
large transfers; every DMA pays the fixed latency): the padded input [C, N, Hp, Wp] lives in SBUF, each
kernel tap's window is a strided SBUF view fed to `nc_matmul` as the moving operand, taps and channel
chunks accumulate in one PSUM bank per (output channels, rows) block, and the result [OC, N, OH*OW] is
stored by one DMA per 128 output channels (bias added on PSUM eviction).
"""

from __future__ import annotations

import itertools
from typing import Any

from nprof.arch.isa import Access, Space
from nprof.compiler.conv_check import evict
from nprof.compiler.kernels import conv_transposed as transposed
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_batched import batched_images, conv_batched_kernel
from nprof.compiler.kernels.conv_strided import strided_input_grad
from nprof.compiler.kernels.conv_taps import STAGE_MAX_BYTES, live_taps, stacked_input
from nprof.compiler.kernels.conv_taps import shaped as _shaped
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512  # fp32 per partition in one PSUM bank (the moving free size limit)
SBUF_SHARE = 96 * 1024  # bytes per partition the resident tiles may take (half of trn1's 192 KiB)


def fits(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_hw: tuple[int, int], pad: tuple[int, int]) -> bool:
    """Do the resident tiles of one convolution (forward or backward) fit `SBUF_SHARE` per partition?"""
    n, c, h, w = x_shape
    oc = w_shape[0]
    oh, ow = out_hw
    if ow > P or oc > PSUM_FREE:
        return False
    chunks = -(-max(c, oc) // P)
    padded = n * (h + 2 * pad[0] + w_shape[2]) * (w + 2 * pad[1] + w_shape[3]) * 4 * chunks
    return padded + 3 * n * max(oh * ow, h * w) * 4 + 4 * c * w_shape[2] * w_shape[3] * chunks <= SBUF_SHARE


def _nchw(v: View, c0: int, cc: int) -> Access:
    """HBM access of channels c0..c0+cc of a contiguous [N, C, H, W] view: [cc, N, H*W]."""
    n, c, h, w = v.shape
    return Access(Space.HBM, v.tensor, v.dtype, v.offset + c0 * h * w, cc, ((c * h * w, n), (1, h * w)), 0, h * w)


def _padded(v: View, c0: int, cc: int, pad: tuple[int, int], slack: int = 0) -> NkiTensor:
    """SBUF tile [cc, N, H + 2ph + slack, W + 2pw] of channels c0.. of `v`, zero around: the channels as they
    are in HBM ([cc, N, H*W]: one contiguous run per image, or the producer's tile still in SBUF: no DMA),
    copied into the padded tile on chip (a DMA straight into its rows would pay the per-chunk overhead for
    every row: 8-element rows cost 8x their bytes)."""
    n, _, h, w = v.shape
    ph, pw = pad
    dense = _shaped(load(_nchw(v, c0, cc)), (n, h, w))
    if ph == pw == slack == 0:
        return dense
    tile = nisa.memset((cc, n, h + 2 * ph + slack, w + 2 * pw), 0.0, nl.float32, engine=nisa.gpsimd_engine)
    engines.copy(dense, dst=tile[:, :, ph : ph + h, pw : pw + w])
    return tile


def _dilated(
    g: View, o0: int, oc: int, stride: tuple[int, int], lo: tuple[int, int], size: tuple[int, int], slack: int
) -> NkiTensor:
    """SBUF tile [oc, N, size[0] + slack, size[1]], zero except g[:, o0.., oh, ow] at (lo + stride * (oh, ow))."""
    n, _, oh, ow = g.shape
    dense = _shaped(load(_nchw(g, o0, oc)), (n, oh, ow))
    if stride == (1, 1) and lo == (0, 0) and size == (oh, ow) and slack == 0:
        return dense
    tile = nisa.memset((oc, n, size[0] + slack, size[1]), 0.0, nl.float32)
    (sh, sw), (lh, lw) = stride, lo
    tile[:, :, lh : lh + sh * (oh - 1) + 1 : sh, lw : lw + sw * (ow - 1) + 1 : sw] = dense
    return tile


def _window(xp: NkiTensor, img: int, r0: int, rows: int, ow: int, tap: tuple[int, int], stride: tuple[int, int],
            dil: tuple[int, int]) -> NkiTensor:  # fmt: skip
    """The strided view [cc, rows, ow] of `xp` [cc, N, Hp, Wp] that kernel tap `tap` reads for output rows r0.."""
    (i, j), (sh, sw), (dh, dw) = tap, stride, dil
    h0, w0 = i * dh + r0 * sh, j * dw
    return xp[:, img, h0 : h0 + sh * (rows - 1) + 1 : sh, w0 : w0 + sw * (ow - 1) + 1 : sw]


def _windows(xp: NkiTensor, img: int, images: int, r0: int, rows: int, ow: int, tap: tuple[int, int],
             stride: tuple[int, int], dil: tuple[int, int]) -> NkiTensor:  # fmt: skip
    """`_window` of images img.. img + images - 1: the strided view [cc, images, rows, ow]."""
    (i, j), (sh, sw), (dh, dw) = tap, stride, dil
    h0, w0 = i * dh + r0 * sh, j * dw
    return xp[:, img : img + images, h0 : h0 + sh * (rows - 1) + 1 : sh, w0 : w0 + sw * (ow - 1) + 1 : sw]


def _pixel_blocks(n: int, oh: int, ow: int) -> list[tuple[int, int, int, int]]:
    """Blocks of at most 128 output pixels as (first image, images, first row, rows): whole images together
    when an image has at most 128 pixels, else row blocks of one image."""
    if oh * ow <= P:
        per = P // (oh * ow)
        return [(img, min(per, n - img), 0, oh) for img in range(0, n, per)]
    rows = max(1, min(oh, P // ow))
    return [(img, 1, r0, min(rows, oh - r0)) for img in range(n) for r0 in range(0, oh, rows)]


def _flat_window(xp: NkiTensor, img: int, r0: int, rows: int, tap: tuple[int, int], dil: tuple[int, int],
                 images: int = 1) -> NkiTensor:  # fmt: skip
    """Stride 1: the run of the flattened `xp` [cc, N, Hp + 1, Wp] starting at tap `tap`'s first element for
    output rows r0.. of image `img`: whole padded rows (columns past OW are garbage, dropped later), through
    the same rows of the next `images` - 1 images (the rows between them garbage too): [cc, (images - 1) *
    (Hp + 1) * Wp + rows * Wp]."""
    _, n, hp, wp = xp.shape
    start = img * hp * wp + (r0 + tap[0] * dil[0]) * wp + tap[1] * dil[1]
    return _shaped(xp, (n * hp * wp,))[:, start : start + (images - 1) * hp * wp + rows * wp]


def _slack(kw: int, stride: tuple[int, int]) -> int:
    """Extra zero rows a padded tile needs for `_flat_window`: its last run overruns the image by KW-1."""
    return 1 if stride == (1, 1) and kw > 1 else 0


def _conv_core(xps: list[NkiTensor], stationary: Any, m: int, n: int, out_hw: tuple[int, ...],
               taps: list[tuple[int, tuple[int, int]]], stride: tuple[int, int], dil: tuple[int, int], bias: Any,
               emit: Any) -> None:  # fmt: skip
    """For each block of 128 output channels o0: res [mt, N, OH, OW] = sum over input chunks ci and taps (t,
    tap) of stationary(ci, t, o0, mt).T @ window(xps[ci], tap), plus bias(o0, mt) (a [mt, 1] column or None)
    on PSUM eviction; then emit(o0, mt, res). `taps` are the (index, tap) pairs that read data (`live_taps`).
    With stride 1 the windows are contiguous runs of the flattened padded tile, whole padded rows
    (`_flat_window`): TensorE reads them as they are and the eviction drops the padding columns, instead of
    a VectorE copy per window (the tiles need `_slack` extra zero rows); when a whole image fits a PSUM bank
    one run covers several images (one matmul per tap for them all, the rows between images dropped too).
    Strided windows are copied (`nc_matmul` copies a moving operand that is not contiguous), of several images
    at once when whole images fit a PSUM bank: one matmul per tap for them all, not one per image (resnet18's
    last stages at 32x32: 1x1 outputs, where a matmul per image streamed one column)."""
    oh, ow = out_hw
    flat = stride == (1, 1)
    if flat and transposed.TRANSPOSED and m <= transposed.TRANSPOSED_MAX_M and xps[0].shape[3] <= P:
        res = transposed.transposed_core(xps, lambda ci, t: stationary(ci, t, 0, m), m, n, out_hw, taps, dil,
                                         bias(0, m) if bias is not None else None)  # fmt: skip
        emit(0, m, res)
        return
    width = xps[0].shape[3] if flat else ow
    rows = max(1, min(oh, PSUM_FREE // width))
    plane = xps[0].shape[2] * width if flat else oh * ow  # PSUM columns per image
    group = max(1, PSUM_FREE // plane) if rows == oh else 1
    for o0 in range(0, m, P):
        mt = min(P, m - o0)
        res = nl.ndarray((mt, n, oh, ow), dtype=nl.float32, buffer=nl.sbuf)
        col = bias(o0, mt) if bias is not None else None
        for img in range(0, n, group):
            g = min(group, n - img)
            for r0 in range(0, oh, rows):
                rt = min(rows, oh - r0)
                run = (g - 1) * plane + rt * width
                whole = nl.ndarray((mt, g * plane if g > 1 else run), dtype=nl.float32, buffer=nl.psum)
                acc = whole[:, :run] if g > 1 else whole
                for k, (ci, (t, tap)) in enumerate(itertools.product(range(len(xps)), taps)):
                    moving = (_flat_window(xps[ci], img, r0, rt, tap, dil, g) if flat
                              else _windows(xps[ci], img, g, r0, rt, ow, tap, stride, dil))  # fmt: skip
                    prod = nisa.nc_matmul(stationary(ci, t, o0, mt), moving)
                    if k == 0:
                        acc[...] = prod
                    else:
                        acc += prod
                if g > 1:
                    src = whole.unflatten_free((g, plane // width, width))[:, :, :rt, :ow]
                    dst = res[:, img : img + g, r0 : r0 + rt, :]
                else:
                    src, dst = acc.unflatten_free((rt, width))[:, :, :ow], res[:, img, r0 : r0 + rt, :]
                evict(src, dst, col)  # checked (`nprof.compiler.conv_check`)
        emit(o0, mt, res)


def _weights(w: View, o0: int, mt: int) -> NkiTensor:
    """W[o0:o0+mt] as its natural SBUF tile [mt, C*KH*KW] (one DMA)."""
    per = w.shape[1] * w.shape[2] * w.shape[3]
    return load(Access(Space.HBM, w.tensor, w.dtype, w.offset + o0 * per, mt, ((1, per),), 0, per))


def _store_nchw(out: View, o0: int, mt: int, res: NkiTensor) -> None:
    n, _, oh, ow = out.shape
    store(_nchw(out, o0, mt), _shaped(res, (n, oh * ow)))


def conv_kernel(out: View, x: View, w: View, bias: View | None, stride: tuple[int, int], padding: tuple[int, int],
                dilation: tuple[int, int]) -> None:  # fmt: skip
    n, c, _, _ = x.shape
    oc, _, kh, kw = w.shape
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    g = batched_images(tuple(x.shape), tuple(w.shape), stride, padding, dilation, bias is not None)
    if g:  # strided, few channels: images on the partitions (one input DMA on g * C partitions)
        conv_batched_kernel(out, x, w, stride, padding, g)
        return

    def column(o0: int, mt: int) -> NkiTensor:
        assert bias is not None
        return load(Access(Space.HBM, bias.tensor, bias.dtype, bias.offset + o0 * bias.strides[0], mt, ((0, 1),), 0,
                           bias.strides[0]))  # fmt: skip

    if stacked_rows(tuple(x.shape), tuple(w.shape), tuple(out.shape[2:]), (stride, padding, dilation)):
        _stacked_conv(out, x, (kh, kw), _forward_stacks(w), column if bias is not None else None,
                      (stride, padding, dilation))  # fmt: skip
        return
    xps = [_padded(x, c0, min(P, c - c0), padding, _slack(kw, stride)) for c0 in range(0, c, P)]
    wn = [_weights(w, o0, min(P, oc - o0)) for o0 in range(0, oc, P)]
    wt: dict[tuple[int, int, int], NkiTensor] = {}

    def stationary(ci: int, t: int, o0: int, mt: int) -> NkiTensor:
        key = (ci, t, o0)
        if key not in wt:  # W[o0.., c0.., tap].T: [cc, mt], transposed on TensorE once
            c0, cc, nt = ci * P, min(P, c - ci * P), len(taps)
            wt[key] = engines.copy(nisa.nc_transpose(wn[o0 // P][:, c0 * nt + t : (c0 + cc - 1) * nt + t + 1 : nt]))
        return wt[key]

    (ph, pw), (hi, wi) = padding, x.shape[2:]
    live = live_taps(taps, (out.shape[2], out.shape[3]), stride, dilation, (range(ph, ph + hi), range(pw, pw + wi)))
    _conv_core(xps, stationary, oc, n, out.shape[2:], live, stride, dilation, column if bias is not None else None,
               lambda o0, mt, res: _store_nchw(out, o0, mt, res))  # fmt: skip


def conv_input_grad_kernel(dx: View, g: View, w: View, stride: tuple[int, int], padding: tuple[int, int],
                           dilation: tuple[int, int]) -> None:  # fmt: skip
    if stride != (1, 1):  # by output phase: no zero-dilated gradient (kernels.conv_strided)
        strided_input_grad(dx, g, w, stride, padding, dilation)
        return
    n, c, h, wd = dx.shape
    oc, _, kh, kw = w.shape
    (dh, dw), (ph, pw) = dilation, padding
    lo = (dh * (kh - 1) - ph, dw * (kw - 1) - pw)
    size = (h + dh * (kh - 1), wd + dw * (kw - 1))
    if stride == (1, 1) and stacks(oc, kh * kw, n * h * wd):  # the stride-1 convolution of G padded by lo
        _stacked_conv(dx, g, (kh, kw), _flipped_stacks(w), None, ((1, 1), lo, dilation))
        return
    gds = [_dilated(g, o0, min(P, oc - o0), stride, lo, size, _slack(kw, (1, 1))) for o0 in range(0, oc, P)]
    wn = [_weights(w, o0, min(P, oc - o0)) for o0 in range(0, oc, P)]
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    nt = len(taps)

    def stationary(ci: int, t: int, c0: int, mt: int) -> NkiTensor:
        flipped = nt - 1 - t  # tap (i, j) of the flipped kernel is (KH-1-i, KW-1-j) of W
        return wn[ci][:, c0 * nt + flipped : (c0 + mt - 1) * nt + flipped + 1 : nt]

    (sh, sw), (_, _, oh, ow) = stride, g.shape
    data = (range(lo[0], lo[0] + sh * (oh - 1) + 1, sh), range(lo[1], lo[1] + sw * (ow - 1) + 1, sw))
    _conv_core(gds, stationary, c, n, (h, wd), live_taps(taps, (h, wd), (1, 1), dilation, data), (1, 1), dilation, None,
               lambda c0, mt, res: _store_nchw(dx, c0, mt, res))  # fmt: skip


def conv_weight_grad_kernel(dw: View, g: View, x: View, stride: tuple[int, int], padding: tuple[int, int],
                            dilation: tuple[int, int]) -> None:  # fmt: skip
    n, c, _, _ = x.shape
    oc, _, kh, kw = dw.shape
    _, _, oh, ow = g.shape
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    nt = len(taps)
    if stacked_rows(tuple(x.shape), tuple(dw.shape), (oh, ow), (stride, padding, dilation), weight=True):
        _stacked_weight_grad(dw, g, x, stride, padding, dilation)
        return
    xps = [_padded(x, c0, min(P, c - c0), padding) for c0 in range(0, c, P)]
    gs = [_shaped(load(_nchw(g, o0, min(P, oc - o0))), (n, oh, ow)) for o0 in range(0, oc, P)]
    blocks = _pixel_blocks(n, oh, ow)
    g_t = []  # per pixel block: G.T [pixels, OC]
    for img, im, r0, rt in blocks:
        gt = nl.ndarray((im * rt * ow, oc), dtype=nl.float32, buffer=nl.sbuf)
        for k, gk in enumerate(gs):
            flat = _shaped(engines.copy(gk[:, img : img + im, r0 : r0 + rt, :]), (im * rt * ow,))
            gt[:, k * P : k * P + gk.shape[0]] = nisa.nc_transpose(flat)
        g_t.append(gt)
    dwn = [nl.ndarray((min(P, oc - o0), c * nt), dtype=nl.float32, buffer=nl.sbuf) for o0 in range(0, oc, P)]
    (ph, pw), (h, w) = padding, x.shape[2:]
    live = live_taps(taps, (oh, ow), stride, dilation, (range(ph, ph + h), range(pw, pw + w)))
    if len(live) < nt:  # a tap that reads only padding has a zero gradient
        for d in dwn:
            nisa.memset(d.shape, 0.0, nl.float32, dst=d)
    for ci, xp in enumerate(xps):
        c0, cc = ci * P, xp.shape[0]
        for t, tap in live:
            accs = [nl.ndarray((d.shape[0], cc), dtype=nl.float32, buffer=nl.psum) for d in dwn]
            for b0 in range(0, len(blocks), BATCH):  # a batch of windows transposed first: TensorE runs them
                x_ts = []  # back to back, then the matmuls (none waits on the copy out of PSUM just before it)
                for img, im, r0, rt in blocks[b0 : b0 + BATCH]:
                    win = _windows(xp, img, im, r0, rt, ow, tap, stride, dilation)
                    win = _shaped(engines.copy(win), (im * rt * ow,))
                    x_ts.append(engines.copy(nisa.nc_transpose(win)))  # [pixels, cc]
                for b, x_t in enumerate(x_ts, b0):
                    for k, acc in enumerate(accs):
                        prod = nisa.nc_matmul(g_t[b][:, k * P : k * P + acc.shape[0]], x_t)  # [oc chunk, cc]
                        if b == 0:
                            acc[...] = prod
                        else:
                            acc += prod
            for d, acc in zip(dwn, accs, strict=True):
                evict(acc, d[:, c0 * nt + t : (c0 + cc - 1) * nt + t + 1 : nt])
    per = c * nt
    for k, d in enumerate(dwn):
        store(Access(Space.HBM, dw.tensor, dw.dtype, dw.offset + k * P * per, d.shape[0], ((1, per),), 0, per), d)


BATCH = 8  # pixel blocks whose transposes a weight-gradient kernel issues before their matmuls
STACK_MAX_C = 32  # input channels up to which a convolution stacks kernel taps on the partitions


def _stacked_weights(wn: NkiTensor, group: list[int], c: int, taps: int) -> NkiTensor:
    """[len(group) * C, mt] stationary: row j * C + ci = W[o, ci, tap group[j]] (natural rows gathered, then one
    TensorE transpose)."""
    mt = wn.shape[0]
    rows = nl.ndarray((mt, len(group) * c), dtype=nl.float32, buffer=nl.sbuf)
    for j, t in enumerate(group):
        engines.copy(wn[:, t : (c - 1) * taps + t + 1 : taps], dst=rows[:, j * c : (j + 1) * c])
    return engines.copy(nisa.nc_transpose(rows))


def _forward_stacks(w: View) -> Any:
    """For `_stacked_conv`'s forward: (o0, mt) -> (tap group -> its stationary [len * C, mt]), the weights
    W[o0:o0+mt] loaded once (natural rows, one contiguous DMA) per output-channel block."""
    _, c, kh, kw = w.shape

    def block(o0: int, mt: int) -> Any:
        wn = _weights(w, o0, mt)
        return lambda group: _stacked_weights(wn, group, c, kh * kw)

    return block


def _flipped_stacks(w: View) -> Any:
    """For `_stacked_conv`'s input gradient (the flipped, transposed kernel): (c0, mt) -> (tap group -> its
    stationary [len * OC, mt], row j * OC + o = W[o, c0 + column, taps - 1 - group[j]]). The weights
    W[:, c0:c0+mt] are loaded in their natural layout (one DMA of OC rows of mt * taps contiguous elements:
    a transposing HBM pattern would move taps-element pieces) and transposed on TensorE per tap."""
    oc, c, kh, kw = w.shape
    nt = kh * kw

    def block(c0: int, mt: int) -> Any:
        nat = load(Access(Space.HBM, w.tensor, w.dtype, w.offset + c0 * nt, oc, ((1, mt * nt),), 0, c * nt))
        return lambda group: _flipped_stack(nat, [nt - 1 - t for t in group], mt, nt)

    return block


def _flipped_stack(nat: NkiTensor, group: list[int], mt: int, nt: int) -> NkiTensor:
    """[len(group) * OC, mt] from the natural rows `nat` [OC, mt * nt]: tap t's [OC, mt] columns transposed
    into one PSUM tile [mt, len * OC] (row ci, column j * OC + o = W[o, ci, group[j]]), then back."""
    oc = nat.shape[0]
    cols = nl.ndarray((mt, len(group) * oc), dtype=nl.float32, buffer=nl.psum)
    for j, t in enumerate(group):
        nisa.nc_transpose(nat[:, t : (mt - 1) * nt + t + 1 : nt], dst=cols[:, j * oc : (j + 1) * oc])
    return engines.copy(nisa.nc_transpose(engines.copy(cols)))


def _stacked_conv(out: View, x: View, kernel: tuple[int, int], stationaries: Any, column: Any,
                  geometry: tuple[tuple[int, int], ...]) -> None:  # fmt: skip
    """`conv_kernel` for C <= `STACK_MAX_C`: taps stacked on the partitions (`_stacked_input`), every output
    pixel block of 512 one PSUM accumulation over the tap groups. `stationaries(o0, mt)` gives, for output channels
    o0.., the function from a tap group to its stationary [len * C, mt] (`_forward_stacks`, `_flipped_stacks`);
    geometry is (stride, padding, dilation). In bands of output rows (`stacked_rows`) when the whole output's
    stacked tiles do not fit: a band's stacked input is that of the convolution padded by the band's offset
    (its first row's input row, `_band_padding`), its result stored by one DMA per 128 output channels."""
    n, c, _, _ = x.shape
    _, oc, oh, ow = out.shape
    taps = [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]
    nt, per = len(taps), max(1, P // c)
    groups = [list(range(g, min(g + per, nt))) for g in range(0, nt, per)]
    rows = stacked_rows(tuple(x.shape), (oc, c, *kernel), (oh, ow), geometry) or oh
    blocks: dict[int, tuple[list[NkiTensor], Any]] = {}
    for b0 in range(0, oh, rows):
        rt = min(rows, oh - b0)
        stage = band_stage(x.shape, (oh, ow), len(groups), rows)
        band = (geometry[0], _band_padding(geometry, b0), geometry[2], stage)
        inputs = [stacked_input(x, [taps[t] for t in g], (rt, ow), *band) for g in groups]
        pixels = n * rt * ow
        for o0 in range(0, oc, P):
            mt = min(P, oc - o0)
            if o0 not in blocks:
                stack = stationaries(o0, mt)
                blocks[o0] = ([stack(g) for g in groups], column(o0, mt) if column is not None else None)
            stationary, col = blocks[o0]
            res = nl.ndarray((mt, pixels), dtype=nl.float32, buffer=nl.sbuf)
            for p0 in range(0, pixels, PSUM_FREE):
                pt = min(PSUM_FREE, pixels - p0)
                acc = nl.ndarray((mt, pt), dtype=nl.float32, buffer=nl.psum)
                for k, (st, mv) in enumerate(zip(stationary, inputs, strict=True)):
                    if k == 0:
                        acc[...] = nisa.nc_matmul(st, mv[:, p0 : p0 + pt])
                    else:
                        acc += nisa.nc_matmul(st, mv[:, p0 : p0 + pt])
                evict(acc, res[:, p0 : p0 + pt], col)
            store(_rows_nchw(out, o0, mt, b0, rt), _shaped(res, (n, rt * ow)))


def _band_padding(geometry: tuple[tuple[int, int], ...], b0: int) -> tuple[int, int]:
    """The padding whose convolution's output row 0 is output row `b0` of the one with `geometry` (stride,
    padding, dilation): the row padding less b0 strides (negative: the band starts inside the image)."""
    (sh, _), (ph, pw), _ = geometry
    return ph - b0 * sh, pw


def _rows_nchw(v: View, c0: int, cc: int, r0: int, rows: int) -> Access:
    """HBM access of rows r0..r0+rows of channels c0..c0+cc of a contiguous [N, C, H, W] view: [cc, N, rows*W]."""
    n, c, h, w = v.shape
    return Access(Space.HBM, v.tensor, v.dtype, v.offset + c0 * h * w + r0 * w, cc, ((c * h * w, n), (1, rows * w)),
                  0, h * w)  # fmt: skip


def stacked_rows(x_shape: tuple[int, ...], w_shape: tuple[int, ...], out_hw: tuple[int, ...],
                 geometry: tuple[tuple[int, int], ...], weight: bool = False) -> int:  # fmt: skip
    """Output rows per band of the stacked kernels (`_stacked_conv`, `_stacked_weight_grad` when `weight`) for a
    convolution (x, w shapes; output size; stride, padding, dilation), 0 when they do not run: all rows when
    the whole output's stacked tiles fit (`stacks`); else, when the padded-input kernels do not fit either
    (`fits`), the most rows whose stacked tiles and result fit `SBUF_SHARE` and, strided, whose input rows
    `conv_taps.staged_row` can stage in the rest (`band_stage`); the weight gradient's per-group PSUM
    accumulators (kept over the bands) must take at most `BANDED_PSUM_TILES` tiles."""
    n, c, _, w = x_shape
    oc, _, kh, kw = w_shape
    oh, ow = out_hw
    taps = kh * kw
    if stacks(c, taps, n * oh * ow):
        return oh
    groups = -(-taps // max(1, P // c))
    if c > STACK_MAX_C or taps < 2 or fits(x_shape, w_shape, (oh, ow), geometry[1]):
        return 0
    if weight and groups * -(-oc // P) > BANDED_PSUM_TILES:
        return 0
    rows = SBUF_SHARE // ((groups + 1) * n * ow * 4)
    (sh, sw), (_, pw), (_, dw) = geometry
    if (sh, sw) != (1, 1) and weight:  # its other resident tiles leave the stage `STAGE_MAX_BYTES` (fragmented)
        rows = min(rows, (STAGE_MAX_BYTES // 4 - kw * dw - pw) // (n * sh * w) - 2)
    elif (sh, sw) != (1, 1):  # the forward's stage of `band_stage` bytes takes its share too, at most STAGE_CAP
        rows = (SBUF_SHARE - 4 * (2 * n * sh * w + kw * dw + pw)) // (4 * n * ((groups + 1) * ow + sh * w))
        rows = min(rows, (STAGE_CAP // 4 - kw * dw - pw) // (n * sh * w) - 2)
    return max(0, min(rows, oh))


STAGE_CAP = 56 * 1024  # bytes per partition a banded forward may stage a kernel row's input rows in


def band_stage(x_shape: tuple[int, ...], out_hw: tuple[int, ...], groups: int, rows: int) -> int:
    """The SBUF bytes per partition `conv_taps.staged_row` may stage a band's input rows in: what `SBUF_SHARE`
    leaves beside the band's stacked tiles and result (`stacked_rows` chose the rows so that a strided band's
    staged rows fit it); 0 (the default, `conv_taps.STAGE_MAX_BYTES`) when the output is not banded."""
    if rows >= out_hw[0]:
        return 0
    return min(STAGE_CAP, max(0, SBUF_SHARE - (groups + 1) * x_shape[0] * rows * out_hw[1] * 4))


BANDED_PSUM_TILES = 4  # PSUM accumulators a banded stacked weight gradient may keep (of 8 banks)


def stacks(c: int, taps: int, pixels: int) -> bool:
    """Does a convolution with `c` input channels stack its taps (`_stacked_input`), and do the stacked
    tiles (one per tap group) and the result fit `SBUF_SHARE`?"""
    groups = -(-taps // max(1, P // c))
    return c <= STACK_MAX_C and taps > 1 and (groups + 1) * pixels * 4 <= SBUF_SHARE


def _stacked_weight_grad(dw: View, g: View, x: View, stride: tuple[int, int], padding: tuple[int, int],
                         dil: tuple[int, int]) -> None:  # fmt: skip
    """`conv_weight_grad_kernel` for C <= `STACK_MAX_C`: per block of 128 output pixels, G.T [pixels, OC] and
    each tap group's stacked input transposed [pixels, taps * C] (one TensorE transpose per group, no window
    copies); one PSUM accumulation per (tap group, 128 output channels) gives dW for all its taps at once. In
    bands of output rows (`stacked_rows`, as `_stacked_conv`), the accumulations running on over the bands."""
    n, c, _, _ = x.shape
    oc, _, kh, kw = dw.shape
    _, _, oh, ow = g.shape
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    nt, per = len(taps), max(1, P // c)
    groups = [list(range(t, min(t + per, nt))) for t in range(0, nt, per)]
    rows = stacked_rows(tuple(x.shape), tuple(dw.shape), (oh, ow), (stride, padding, dil), weight=True) or oh
    chunks = [(o0, min(P, oc - o0)) for o0 in range(0, oc, P)]
    dwn = [nl.ndarray((mt, c * nt), dtype=nl.float32, buffer=nl.sbuf) for _, mt in chunks]
    accs: list[list[NkiTensor]] = [[] for _ in groups]  # per tap group and 128 output channels, kept over bands
    for b0 in range(0, oh, rows):
        rt = min(rows, oh - b0)
        pixels = n * rt * ow
        band = (stride, _band_padding((stride, padding, dil), b0), dil)
        early = [stacked_input(x, [taps[t] for t in group], (rt, ow), *band) for group in groups] if rows < oh else []
        gs = [_shaped(load(_rows_nchw(g, o0, mt, b0, rt)), (pixels,)) for o0, mt in chunks]
        blocks = [(p0, min(P, pixels - p0)) for p0 in range(0, pixels, P)]
        g_t = []  # per pixel block: G.T [pixels, OC]
        for p0, pt in blocks:
            gt = nl.ndarray((pt, oc), dtype=nl.float32, buffer=nl.sbuf)
            for k, gk in enumerate(gs):
                gt[:, k * P : k * P + gk.shape[0]] = nisa.nc_transpose(gk[:, p0 : p0 + pt])
            g_t.append(gt)
        for gi, (group, acc_g) in enumerate(zip(groups, accs, strict=True)):  # banded: the stacked inputs
            stacked = early[gi] if early else stacked_input(x, [taps[t] for t in group], (rt, ow), *band)  # first
            if not acc_g:
                acc_g.extend(nl.ndarray((mt, len(group) * c), dtype=nl.float32, buffer=nl.psum) for _, mt in chunks)
            _accumulate_blocks(acc_g, g_t, stacked, blocks, b0 == 0)
            if b0 + rt < oh:
                continue
            for d, acc in zip(dwn, acc_g, strict=True):  # the last band: evicted while the next group runs
                for j, t in enumerate(group):  # columns ci * taps + t of dW's natural rows
                    evict(acc[:, j * c : (j + 1) * c], d[:, t : (c - 1) * nt + t + 1 : nt])
    size = c * nt
    for k, d in enumerate(dwn):
        store(Access(Space.HBM, dw.tensor, dw.dtype, dw.offset + k * P * size, d.shape[0], ((1, size),), 0, size), d)


def _accumulate_blocks(accs: list[NkiTensor], g_t: list[NkiTensor], stacked: NkiTensor,
                       blocks: list[tuple[int, int]], first: bool) -> None:  # fmt: skip
    """accs[k] (+)= sum over pixel blocks of g_t[block][:, chunk k].T @ stacked[:, block].T (the first product
    starts the accumulation when `first`): a batch of transposes first (see conv_weight_grad_kernel)."""
    for b0 in range(0, len(blocks), BATCH):
        x_ts = [engines.copy(nisa.nc_transpose(stacked[:, p0 : p0 + pt])) for p0, pt in blocks[b0 : b0 + BATCH]]
        for b, x_t in enumerate(x_ts, b0):
            for k, acc in enumerate(accs):
                prod = nisa.nc_matmul(g_t[b][:, k * P : k * P + acc.shape[0]], x_t)
                if b == 0 and first:
                    acc[...] = prod
                else:
                    acc += prod
