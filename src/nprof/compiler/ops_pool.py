"""Lowering of 2-D max pooling (forward with indices, and backward) as tap-by-tap VectorE passes.

Contract: importing registers ``aten.max_pool2d_with_indices`` and ``aten.max_pool2d_with_indices_backward``
(2-D, any kernel/stride/padding/dilation, ``ceil_mode=False``) in `nprof.compiler.ops.LOWERINGS`. Rows are
the (image, channel) pairs on partitions, the output plane the free dims. Forward: for every kernel tap a
strided window of the (-inf padded) input is DMA'd in; the running max and the argmax (flat ``h * W + w``
index into the unpadded input, from a GpSimdE iota; the first maximum wins, as in PyTorch) update on VectorE.
Backward: for every tap, ``grad * (indices == tap index)`` is added into that tap's window of a zero-padded
input gradient (read-add-write in HBM), which is then cropped.
"""

from __future__ import annotations

from typing import Any

from nprof.compiler.kernels import elementwise as ew
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.matmul import copy_kernel
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


def _forward_kernel(out: View, indices: View, padded: View, g: _Geometry) -> None:
    for r0 in _rows(g):
        rt = min(PMAX, g.rows - r0)
        best = idx = None
        for i, j in g.taps():
            tap = load(_box(g.window(padded, i, j), r0, rt))
            where = g.tap_index(rt, i, j)
            if best is None:
                best, idx = tap, where
                continue
            better = nisa.tensor_tensor(tap, best, "is_gt")
            idx = nl.where(better, where, idx)
            best = nisa.tensor_tensor(best, tap, "maximum")
        assert best is not None and idx is not None  # a pooling window has at least one tap
        store(_box(out, r0, rt), best)
        store(_box(indices, r0, rt), idx)


def _backward_kernel(acc: View, grad: View, indices: View, g: _Geometry) -> None:
    for r0 in _rows(g):
        rt = min(PMAX, g.rows - r0)
        gt = load(_box(grad, r0, rt))
        it = load(_box(indices, r0, rt))
        for i, j in g.taps():
            hit = nisa.tensor_tensor(it, g.tap_index(rt, i, j), "is_equal")
            win = g.window(acc, i, j)
            total = nisa.tensor_tensor(load(_box(win, r0, rt)), nisa.tensor_tensor(gt, hit, "multiply"), "add")
            store(_box(win, r0, rt), total)


def _check(lw: Lowerer, x: View, g: _Geometry, ceil_mode: bool) -> None:
    if len(x.shape) != 4 or ceil_mode or g.oh * g.ow > FREE_MAX:
        raise UnsupportedOpError(lw.unsupported_message("max_pool2d other than 4-D input, ceil_mode=False"))


def _padded(lw: Lowerer, x: View, g: _Geometry, fill: float) -> View:
    buf = lw.temp_tensor((g.n, g.c, g.hp, g.wp), "float32")
    if g.ph or g.pw:
        lw.em.call(ew.map_kernel, buf, [fill], ew.copy_body)
    lw.em.call(copy_kernel, buf.slice(2, g.ph, g.ph + g.h).slice(3, g.pw, g.pw + g.w), x)
    return buf


@register("max_pool2d_with_indices.default")
def _max_pool(lw: Lowerer, x: Any, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False) -> tuple:  # fmt: skip
    xv = view_of(lw, x)
    g = _Geometry(xv.shape, kernel, stride, padding, dilation)
    _check(lw, xv, g, ceil_mode)
    padded = _padded(lw, xv, g, float("-inf"))
    out, indices = lw.new_tensor(index=0), lw.new_tensor(index=1)
    flat = [v.reshape([g.rows, g.oh, g.ow]) for v in (out, indices)]
    lw.em.call(_forward_kernel, flat[0], flat[1], padded, g)
    return out, indices


@register("max_pool2d_with_indices_backward.default")
def _max_pool_backward(lw: Lowerer, grad: Any, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any,
                       ceil_mode: bool, indices: Any) -> View:  # fmt: skip
    xv = view_of(lw, x)
    g = _Geometry(xv.shape, kernel, stride, padding, dilation)
    _check(lw, xv, g, ceil_mode)
    acc = lw.temp_tensor((g.n, g.c, g.hp, g.wp), "float32")
    lw.em.call(ew.map_kernel, acc, [0.0], ew.copy_body)
    gv = as_contiguous(lw, view_of(lw, grad)).reshape([g.rows, g.oh, g.ow])
    iv = as_contiguous(lw, view_of(lw, indices)).reshape([g.rows, g.oh, g.ow])
    assert gv is not None and iv is not None
    lw.em.call(_backward_kernel, acc, gv, iv, g)
    out = lw.new_tensor()
    lw.em.call(copy_kernel, out, acc.slice(2, g.ph, g.ph + g.h).slice(3, g.pw, g.pw + g.w))
    return out
