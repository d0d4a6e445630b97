"""Lowering of 2-D max pooling (forward with indices, and backward) as tap-by-tap VectorE passes in SBUF.

Contract: importing registers ``aten.max_pool2d_with_indices`` and ``aten.max_pool2d_with_indices_backward``
(2-D, any kernel/stride/padding/dilation, ``ceil_mode=False``) in `nprof.compiler.ops.LOWERINGS`. Rows are
the (image, channel) pairs on partitions, the output plane the free dims, cut by `plan` into pieces (bands
of output rows, and of columns when one row is too wide) whose SBUF tiles hold at most `FREE_MAX` elements
a partition each; a piece's input tile carries the halo its windows need. Forward: per block of 128 rows
and piece, the piece's input window crosses HBM once, into an SBUF tile padded with -inf (one DMA, or none
when an earlier kernel keeps it in SBUF); every kernel tap is a strided window of that tile read by VectorE
(no strided DMA: a stride-2 window is one DMA chunk per element); the running max and the argmax (flat
``h * W + w`` index into the unpadded input, from a GpSimdE iota; the first maximum wins, as in PyTorch)
update on VectorE, as eager's ``val > max || isnan(val)`` (a NaN input is the maximum, the last NaN of a
window its index: an is-NaN tile of the input, one VectorE pass a piece, or-ed into each tap's test; a window
of only -inf inputs has its first real input as index, `_Geometry.first_index`).
Backward: each piece owns a band of the (padded) input plane, the bands partitioning
it; it reads the gradient and indices of every output whose window reaches its band (its own outputs and
a halo before them), adds ``grad if indices == tap index else 0`` (a select: ``grad * hit`` made 0 x inf =
NaN where eager's scatter leaves 0) into that tap's window of a zero-padded SBUF tile, in tap order (the
same fp32 additions as eager's scatter-add order, whatever the cut), and stores the real (unpadded) part of
its band once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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

__all__ = ["LOWERINGS", "Axis", "Piece", "plan"]


def _pair(v: Any, default: int) -> tuple[int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default, default
    if isinstance(v, int):
        return v, v
    return (int(v[0]), int(v[0])) if len(v) == 1 else (int(v[0]), int(v[1]))


@dataclass(frozen=True)
class Axis:
    """One axis of a pooling (the rows or the columns of the plane): input length `n`, padding `pad`, kernel
    `k`, stride `s`, dilation `d`."""

    n: int
    pad: int
    k: int
    s: int
    d: int

    @property
    def padded(self) -> int:
        return self.n + 2 * self.pad

    @property
    def reach(self) -> int:
        """How far past a window's first element its last tap reads."""
        return (self.k - 1) * self.d

    @property
    def out(self) -> int:
        return (self.padded - self.reach - 1) // self.s + 1

    @property
    def halo(self) -> int:
        """How many outputs before a band's first one have windows reaching into it."""
        return self.reach // self.s


@dataclass(frozen=True)
class Piece:
    """A cut of one axis: the outputs `o0`..`o1` a kernel reads or writes, the padded input positions
    `t0`..`t1` its SBUF tile covers, and (backward) the padded positions `q0`..`q1` it owns and stores."""

    o0: int
    o1: int
    t0: int
    t1: int
    q0: int = 0
    q1: int = 0


def _forward_piece(ax: Axis, o0: int, o1: int) -> Piece:
    return Piece(o0, o1, o0 * ax.s, (o1 - 1) * ax.s + ax.reach + 1)


def _backward_piece(ax: Axis, o0: int, o1: int) -> Piece:
    q0 = 0 if o0 == 0 else o0 * ax.s
    q1 = ax.padded if o1 == ax.out else o1 * ax.s
    lo = max(0, o0 - ax.halo)
    return Piece(lo, o1, lo * ax.s, max(q1, (o1 - 1) * ax.s + ax.reach + 1), q0, q1)


def _bounds(ax: Axis, m: int, backward: bool) -> tuple[int, int]:
    """(outputs, tile length) a piece of `m` outputs takes at most along `ax`."""
    if backward:
        return m + ax.halo, (m + ax.halo) * ax.s + ax.reach
    return m, (m - 1) * ax.s + ax.reach + 1


def _largest(top: int, fits: Callable[[int], bool]) -> int:
    """The largest m in 1..top with fits(m) (fits is monotone: true up to some m), 0 if none."""
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _cuts(ax: Axis, m: int) -> list[tuple[int, int]]:
    """`ax.out` outputs cut into the fewest pieces of at most `m`, of sizes as even as can be."""
    pieces = -(-ax.out // m)
    size = -(-ax.out // pieces)
    return [(o, min(o + size, ax.out)) for o in range(0, ax.out, size)]


def plan(rows: Axis, cols: Axis, backward: bool) -> list[tuple[Piece, Piece]] | None:
    """The pieces (row piece, column piece) of the output plane, row-major, whose output and input tiles
    each hold at most `FREE_MAX` elements (whole rows of the plane when a row fits, else bands of columns
    too); None when not even one output's window fits."""

    def fits(mh: int, mw: int) -> bool:
        (oh, th), (ow, tw) = _bounds(rows, mh, backward), _bounds(cols, mw, backward)
        return oh * ow <= FREE_MAX and th * tw <= FREE_MAX

    mw = _largest(cols.out, lambda m: fits(1, m))
    if mw == 0:
        return None
    mh = _largest(rows.out, lambda m: fits(m, mw))
    cut = _backward_piece if backward else _forward_piece
    return [(cut(rows, *h), cut(cols, *w)) for h in _cuts(rows, mh) for w in _cuts(cols, mw)]


class _Geometry:
    def __init__(self, shape: tuple[int, ...], kernel: Any, stride: Any, padding: Any, dilation: Any) -> None:
        n, c, h, w = shape
        kh, kw = _pair(kernel, 1)
        sh, sw = _pair(stride, 0) if stride else (kh, kw)
        if sh == 0:
            sh, sw = kh, kw
        ph, pw = _pair(padding, 0)
        dh, dw = _pair(dilation, 1)
        self.rows, self.h, self.w = n * c, h, w
        self.y, self.x = Axis(h, ph, kh, sh, dh), Axis(w, pw, kw, sw, dw)
        self.oh, self.ow = self.y.out, self.x.out

    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.y.k) for j in range(self.x.k)]

    def tap_index(self, parts: int, py: Piece, px: Piece, i: int, j: int) -> NkiTensor:
        """[parts, outputs of py, outputs of px]: the flat index h * W + w in the unpadded input that tap
        (i, j) of each output of the piece reads."""
        y, x = self.y, self.x
        base = (py.o0 * y.s + i * y.d - y.pad) * self.w + (px.o0 * x.s + j * x.d - x.pad)
        expr = (nl.arange(parts)[:, None, None] * 0 + nl.arange(py.o1 - py.o0)[None, :, None] * (y.s * self.w)
                + nl.arange(px.o1 - px.o0)[None, None, :] * x.s + base)  # fmt: skip
        return nisa.iota(expr, dtype=nl.float32)

    def first_index(self, parts: int, py: Piece, px: Piece) -> NkiTensor:
        """[parts, outputs of py, outputs of px]: the flat index of each window's first real (unpadded) input,
        eager's index of a window whose inputs are all -inf; per axis ``max(a, a mod d)`` of the window's padded
        start ``a = o * s - pad`` (its first tap at or after 0)."""
        if py.o0 * self.y.s >= self.y.pad and px.o0 * self.x.s >= self.x.pad:
            return self.tap_index(parts, py, px, 0, 0)  # no window of the piece starts in the padding
        rows, cols = nl.arange(py.o1 - py.o0), nl.arange(px.o1 - px.o0)
        zero = nl.arange(parts)[:, None, None] * 0
        h = nisa.iota(zero + rows[None, :, None] * self.y.s + cols[None, None, :] * 0 + (py.o0 * self.y.s - self.y.pad),
                      dtype=nl.float32)  # fmt: skip
        w = nisa.iota(zero + rows[None, :, None] * 0 + cols[None, None, :] * self.x.s + (px.o0 * self.x.s - self.x.pad),
                      dtype=nl.float32)  # fmt: skip
        h = nisa.scalar_tensor_tensor(data=h, op0="mod", operand0=float(self.y.d), op1="maximum", operand1=h)
        w = nisa.scalar_tensor_tensor(data=w, op0="mod", operand0=float(self.x.d), op1="maximum", operand1=w)
        return nisa.scalar_tensor_tensor(data=h, op0="multiply", operand0=float(self.w), op1="add", operand1=w)


def _rows(g: _Geometry) -> range:
    return range(0, g.rows, PMAX)


def _box(v: View, r0: int, rt: int, ys: tuple[int, int], xs: tuple[int, int]) -> Any:
    """Rows r0.. (rt of them), plane rows ys[0]..ys[1] and columns xs[0]..xs[1] of `v` [N*C, ., .]."""
    return view_access(v, 0, (r0, ys[0], xs[0]), (rt, ys[1] - ys[0], xs[1] - xs[0]), (1, 2))


def _real(ax: Axis, t0: int, t1: int) -> tuple[int, int]:
    """The padded positions t0..t1 that are real input positions (clipped to the unpadded range)."""
    return max(t0, ax.pad), min(t1, ax.pad + ax.n)


def _input_tile(x: View, g: _Geometry, r0: int, rt: int, py: Piece, px: Piece) -> NkiTensor:
    """SBUF tile [rt, t1 - t0 of py, of px]: the padded input rows r0.. under the piece, -inf in the padding."""
    (h0, h1), (w0, w1) = _real(g.y, py.t0, py.t1), _real(g.x, px.t0, px.t1)
    box = _box(x, r0, rt, (h0 - g.y.pad, h1 - g.y.pad), (w0 - g.x.pad, w1 - g.x.pad))
    if (h0, h1, w0, w1) == (py.t0, py.t1, px.t0, px.t1):
        return load(box)
    tile = nisa.memset((rt, py.t1 - py.t0, px.t1 - px.t0), float("-inf"), nl.float32)
    nisa.dma_copy(dst=tile[:, h0 - py.t0 : h1 - py.t0, w0 - px.t0 : w1 - px.t0], src=source(box))
    return tile


def _tap_window(t: NkiTensor, g: _Geometry, py: Piece, px: Piece, i: int, j: int) -> NkiTensor:
    """The strided view [rt, outputs of py, of px] of a piece's tile `t` (starting at the padded position of
    the piece's first outputs) that tap (i, j) reads."""
    h0, w0 = i * g.y.d, j * g.x.d
    return t[:, h0 : h0 + g.y.s * (py.o1 - py.o0 - 1) + 1 : g.y.s, w0 : w0 + g.x.s * (px.o1 - px.o0 - 1) + 1 : g.x.s]


def _forward_kernel(out: View, indices: View, x: View, g: _Geometry, pieces: list[tuple[Piece, Piece]]) -> None:
    for r0 in _rows(g):
        rt = min(PMAX, g.rows - r0)
        for py, px in pieces:
            xp = _input_tile(x, g, r0, rt, py, px)
            nan = nisa.tensor_tensor(xp, xp, "not_equal")  # 1 where the input is NaN (x != x)
            best = idx = None
            for i, j in g.taps():
                tap = _tap_window(xp, g, py, px, i, j)
                if best is None:  # eager's start: -inf, the window's first real input (the tap may be padding)
                    best, idx = tap, g.first_index(rt, py, px)
                    continue
                where = g.tap_index(rt, py, px, i, j)
                better = nisa.tensor_tensor(tap, best, "is_gt")  # as eager: a later NaN wins too (val > max || isnan)
                better = nisa.tensor_tensor(better, _tap_window(nan, g, py, px, i, j), "logical_or")
                idx = nl.where(better, where, idx)
                best = nisa.tensor_tensor(best, tap, "maximum")
            assert best is not None and idx is not None  # a pooling window has at least one tap
            ys, xs = (py.o0, py.o1), (px.o0, px.o1)
            store(_box(out, r0, rt, ys, xs), engines.copy(best) if best.base is xp.base else best)
            store(_box(indices, r0, rt, ys, xs), idx)


def _backward_kernel(out: View, grad: View, indices: View, g: _Geometry, pieces: list[tuple[Piece, Piece]]) -> None:
    for r0 in _rows(g):
        rt = min(PMAX, g.rows - r0)
        for py, px in pieces:
            ys, xs = (py.o0, py.o1), (px.o0, px.o1)
            gt, it = load(_box(grad, r0, rt, ys, xs)), load(_box(indices, r0, rt, ys, xs))
            acc = nisa.memset((rt, py.t1 - py.t0, px.t1 - px.t0), 0.0, nl.float32)
            zero = nisa.memset(gt.shape, 0.0, nl.float32, engine=nisa.gpsimd_engine)
            for i, j in g.taps():
                hit = nisa.tensor_tensor(it, g.tap_index(rt, py, px, i, j), "is_equal")
                win = _tap_window(acc, g, py, px, i, j)  # a select, not grad * hit: 0 x inf would be NaN
                nisa.tensor_tensor(win, nl.where(hit, gt, zero), "add", dst=win)
            (h0, h1), (w0, w1) = _real(g.y, py.q0, py.q1), _real(g.x, px.q0, px.q1)
            if h0 >= h1 or w0 >= w1:
                continue  # the band is all padding
            inner = acc[:, h0 - py.t0 : h1 - py.t0, w0 - px.t0 : w1 - px.t0]
            whole = (h0, h1, w0, w1) == (py.t0, py.t1, px.t0, px.t1)
            box = _box(out, r0, rt, (h0 - g.y.pad, h1 - g.y.pad), (w0 - g.x.pad, w1 - g.x.pad))
            store(box, inner if whole else engines.copy(inner))


def _geometry(lw: Lowerer, x: View, args: tuple, ceil_mode: bool, backward: bool) -> tuple[_Geometry, list]:
    """The geometry of a pooling of `x` (`args`: kernel, stride, padding, dilation; a 3-D input is one image)
    and its plan; raise `UnsupportedOpError` naming the limit the pooling breaks: a 3-D or 4-D input,
    ``ceil_mode=False``, and one output's window within a tile of `FREE_MAX` elements a partition."""
    if len(x.shape) not in (3, 4):
        why = f"max_pool2d of a {len(x.shape)}-D input (only 3-D and 4-D are lowered)"
    elif ceil_mode:
        why = "max_pool2d with ceil_mode=True (only ceil_mode=False is lowered)"
    else:
        g = _Geometry((1, *x.shape) if len(x.shape) == 3 else x.shape, *args)
        pieces = plan(g.y, g.x, backward)
        if pieces is not None:
            return g, pieces
        why = (
            f"max_pool2d with a {g.y.k}x{g.x.k} window (dilation {g.y.d}x{g.x.d}) whose SBUF tile exceeds "
            f"{FREE_MAX} elements a partition"
        )
    raise UnsupportedOpError(lw.unsupported_message(why))


@register("max_pool2d_with_indices.default")
def _max_pool(lw: Lowerer, x: Any, kernel: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
              ceil_mode: bool = False) -> tuple:  # fmt: skip
    xv = view_of(lw, x)
    g, pieces = _geometry(lw, xv, (kernel, stride, padding, dilation), ceil_mode, False)
    rows = as_contiguous(lw, xv).reshape([g.rows, g.h, g.w])
    out, indices = lw.new_tensor(index=0), lw.new_tensor(index=1)
    flat = [v.reshape([g.rows, g.oh, g.ow]) for v in (out, indices)]
    assert rows is not None
    lw.em.call(_forward_kernel, flat[0], flat[1], rows, g, pieces)
    return out, indices


@register("max_pool2d_with_indices_backward.default")
def _max_pool_backward(lw: Lowerer, grad: Any, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any,
                       ceil_mode: bool, indices: Any) -> View:  # fmt: skip
    xv = view_of(lw, x)
    g, pieces = _geometry(lw, xv, (kernel, stride, padding, dilation), ceil_mode, True)
    gv = as_contiguous(lw, view_of(lw, grad)).reshape([g.rows, g.oh, g.ow])
    iv = as_contiguous(lw, view_of(lw, indices)).reshape([g.rows, g.oh, g.ow])
    assert gv is not None and iv is not None
    out = lw.new_tensor()
    flat = out.reshape([g.rows, g.h, g.w])
    assert flat is not None
    lw.em.call(_backward_kernel, flat, gv, iv, g, pieces)
    return out
