"""Lowering of 2-D max pooling (forward with indices, and backward) as tap-by-tap VectorE passes in SBUF.

Contract: importing registers ``aten.max_pool2d_with_indices`` and ``aten.max_pool2d_with_indices_backward``
(2-D, any kernel/stride/padding/dilation, ``ceil_mode=False``) in `nprof.compiler.ops.LOWERINGS`. Rows are
the (image, channel) pairs on partitions, the output plane the free dims. Forward: per block of 128 rows the
input crosses HBM once, into an SBUF tile padded with -inf (one DMA, or none when an earlier kernel keeps it
in SBUF); every kernel tap is a strided window of that tile read by VectorE (no strided DMA: a stride-2
window is one DMA chunk per element); the running max and the argmax (flat ``h * W + w`` index into the
unpadded input, from a GpSimdE iota; the first maximum wins, as in PyTorch) update on VectorE. Backward: per
block of rows, ``grad * (indices == tap index)`` is added into that tap's window of a zero-padded SBUF tile,
in tap order (the same fp32 additions as eager's scatter-add order), whose interior is stored once.
"""

from __future__ import annotations

from typing import Any

from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_taps import source
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.lower import Lowerer
from nprof.compiler.ops import LOWERINGS, as_contiguous, register, view_of
from nprof.compiler.views import FREE_MAX, PMAX, View, view_access
from nprof.errors import UnsupportedOpError
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

__all__ = ["LOWERINGS"]


def _pair(v: Any, default: int) -> tuple[int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default, default
    if isinstance(v, int):
        return v, v
    return (int(v[0]), int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))


class _Geometry:
    def __init__(self, shape: tuple[int, ...], kernel: Any, stride: Any, padding: Any, dilation: Any) -> None:
        self.n, self.c, self.h, self.w = shape
        self.kh, self.kw = _pair(kernel, 1)
        self.sh, self.sw = _pair(stride, 0) if stride else (self.kh, self.kw)
        if self.sh == 0:
            self.sh, self.sw = self.kh, self.kw
        self.ph, self.pw = _pair(padding, 0)
        self.dh, self.dw = _pair(dilation, 1)
        self.hp, self.wp = self.h + 2 * self.ph, self.w + 2 * self.pw
        self.oh = (self.hp - self.dh * (self.kh - 1) - 1) // self.sh + 1
        self.ow = (self.wp - self.dw * (self.kw - 1) - 1) // self.sw + 1
        self.rows = self.n * self.c

    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]

    def window(self, padded: View, i: int, j: int) -> View:
        """Tap (i, j) of every output position: [N*C, OH, OW] on the padded (contiguous) tensor."""
        return View(padded.tensor, padded.dtype, (self.rows, self.oh, self.ow),
                    (self.hp * self.wp, self.sh * self.wp, self.sw), i * self.dh * self.wp + j * self.dw)  # fmt: skip

    def tap_index(self, parts: int, i: int, j: int) -> NkiTensor:
        """[parts, OH, OW]: the flat index h * W + w in the unpadded input that tap (i, j) reads."""
        base = (i * self.dh - self.ph) * self.w + (j * self.dw - self.pw)
        expr = (nl.arange(parts)[:, None, None] * 0 + nl.arange(self.oh)[None, :, None] * (self.sh * self.w)
                + nl.arange(self.ow)[None, None, :] * self.sw + base)  # fmt: skip
        return nisa.iota(expr, dtype=nl.float32)


def _rows(g: _Geometry) -> range:
    return range(0, g.rows, PMAX)


def _box(v: View, r0: int, rt: int) -> Any:
    return view_access(v, 0, (r0, 0, 0), (rt, v.shape[1], v.shape[2]), (1, 2))


def _input_tile(x: View, g: _Geometry, r0: int, rt: int, fill: float) -> NkiTensor:
    """SBUF tile [rt, Hp, Wp]: rows r0.. of `x` ([N*C, H, W], contiguous) inside a border of `fill`."""
    a = _box(x, r0, rt)
    if g.ph == g.pw == 0:
        return load(a)
    tile = nisa.memset((rt, g.hp, g.wp), fill, nl.float32)
    nisa.dma_copy(dst=tile[:, g.ph : g.ph + g.h, g.pw : g.pw + g.w], src=source(a))
    return tile


def _tap_window(t: NkiTensor, g: _Geometry, i: int, j: int) -> NkiTensor:
    """The strided view [rt, OH, OW] of a padded tile `t` [rt, Hp, Wp] that tap (i, j) reads."""
    h0, w0 = i * g.dh, j * g.dw
    return t[:, h0 : h0 + g.sh * (g.oh - 1) + 1 : g.sh, w0 : w0 + g.sw * (g.ow - 1) + 1 : g.sw]


def _forward_kernel(out: View, indices: View, x: View, g: _Geometry) -> None:
    for r0 in _rows(g):
        rt = min(PMAX, g.rows - r0)
        xp = _input_tile(x, g, r0, rt, float("-inf"))
        best = idx = None
        for i, j in g.taps():
            tap = _tap_window(xp, g, i, j)
            where = g.tap_index(rt, i, j)
            if best is None:
                best, idx = tap, where
                continue
            better = nisa.tensor_tensor(tap, best, "is_gt")
            idx = nl.where(better, where, idx)
            best = nisa.tensor_tensor(best, tap, "maximum")
        assert best is not None and idx is not None  # a pooling window has at least one tap
        store(_box(out, r0, rt), engines.copy(best) if best.base is xp.base else best)
        store(_box(indices, r0, rt), idx)


def _backward_kernel(out: View, grad: View, indices: View, g: _Geometry) -> None:
    for r0 in _rows(g):
        rt = min(PMAX, g.rows - r0)
        gt = load(_box(grad, r0, rt))
        it = load(_box(indices, r0, rt))
        acc = nisa.memset((rt, g.hp, g.wp), 0.0, nl.float32)
        for i, j in g.taps():
            hit = nisa.tensor_tensor(it, g.tap_index(rt, i, j), "is_equal")
            win = _tap_window(acc, g, i, j)
            nisa.tensor_tensor(win, nisa.tensor_tensor(gt, hit, "multiply"), "add", dst=win)
        inner = acc[:, g.ph : g.ph + g.h, g.pw : g.pw + g.w]
        store(_box(out, r0, rt), inner if g.ph == g.pw == 0 else engines.copy(inner))


def _check(lw: Lowerer, x: View, g: _Geometry, ceil_mode: bool) -> None:
    """Raise `UnsupportedOpError` naming the limit the pooling breaks: a 4-D input, ``ceil_mode=False``, and an
    output plane of at most `FREE_MAX` elements (one tile row per channel and image)."""
    if len(x.shape) != 4:
        why = f"max_pool2d of a {len(x.shape)}-D input (only 4-D is lowered)"
    elif ceil_mode:
        why = "max_pool2d with ceil_mode=True (only ceil_mode=False is lowered)"
    elif g.oh * g.ow > FREE_MAX:
        why = (f"max_pool2d with a {g.oh}x{g.ow} output plane ({g.oh * g.ow} elements; at most {FREE_MAX} per "
               "channel and image are lowered)")
    else:
        return
    raise UnsupportedOpError(lw.unsupported_message(why))


@register("max_pool2d_with_indices.default")
def _max_pool(lw: Lowerer, x: Any, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False) -> tuple:  # fmt: skip
    xv = view_of(lw, x)
    g = _Geometry(xv.shape, kernel, stride, padding, dilation)
    _check(lw, xv, g, ceil_mode)
    rows = as_contiguous(lw, xv).reshape([g.rows, g.h, g.w])
    out, indices = lw.new_tensor(index=0), lw.new_tensor(index=1)
    flat = [v.reshape([g.rows, g.oh, g.ow]) for v in (out, indices)]
    assert rows is not None
    lw.em.call(_forward_kernel, flat[0], flat[1], rows, g)
    return out, indices


@register("max_pool2d_with_indices_backward.default")
def _max_pool_backward(lw: Lowerer, grad: Any, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any,
                       ceil_mode: bool, indices: Any) -> View:  # fmt: skip
    xv = view_of(lw, x)
    g = _Geometry(xv.shape, kernel, stride, padding, dilation)
    _check(lw, xv, g, ceil_mode)
    gv = as_contiguous(lw, view_of(lw, grad)).reshape([g.rows, g.oh, g.ow])
    iv = as_contiguous(lw, view_of(lw, indices)).reshape([g.rows, g.oh, g.ow])
    assert gv is not None and iv is not None
    out = lw.new_tensor()
    flat = out.reshape([g.rows, g.h, g.w])
    assert flat is not None
    lw.em.call(_backward_kernel, flat, gv, iv, g)
    return out
