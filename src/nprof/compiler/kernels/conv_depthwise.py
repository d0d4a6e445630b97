"""Depthwise 2-D convolution (groups = channels = output channels) on VectorE, ScalarE and GpSimdE (NKI).

Contract (contiguous NCHW / [C, 1, KH, KW] fp32 views; stride, padding, dilation pairs of ints):
* `supported(x_shape, w_shape, stride, padding, dilation)`: do these kernels run this convolution?
* `depthwise_kernel(out, x, w, bias, stride, padding, dilation)`: out = conv2d(x, w, bias, groups=C).
* `depthwise_input_grad_kernel(dx, g, w, stride, padding, dilation)`: the input gradient [N, C, H, W].
* `depthwise_weight_grad_kernel(dw, g, x, stride, padding, dilation)`: the weight gradient [C, 1, KH, KW].
Not covered (`supported` is False; `nprof.compiler.grouped_conv` decomposes them, which is correct but slow):
a channel multiplier (OC = m * C, m > 1), groups between 1 and C (those are not depthwise), operands other than
fp32, an output or input row wider than `PSUM_FREE` (one PSUM bank), and a geometry whose band of one output
row and the input rows it reads does not fit `BUDGET`.

Layout: (image, channel) planes on partitions. With C <= 128, k = min(128 // C, N) images side by side on the
partitions (partition j * C + c holds channel c of images j, j + k, j + 2k, ... along its free axis: one affine
HBM pattern, partition stride H * W, so one DMA moves a piece of all of them) and, when k does not divide N,
one more group of the last N % k images; with C > 128, chunks of 128 channels, every image on the free axis.
Per partition the weights are a column per kernel tap (one DMA of [C, KH*KW]; repeated to the k image slots by
two TensorE transposes).

How (no padded copy, no multiply by padding): each kernel tap reads, for a block of outputs, the window of
input elements inside the image; the taps near the border cover a smaller rectangle of the block (`span`).
Forward, per PSUM block of at most 512 outputs a partition: the first tap that covers the whole block writes
w[:, tap] * window into the PSUM accumulator (ScalarE; a VectorE memset of zeros when no tap covers it),
every other tap is a multiply by its per-partition weight (ScalarE and GpSimdE by turns: TENSOR_SCALAR) and
a VectorE add into the accumulator's rectangle (PSUM + SBUF: the fast TENSOR_TENSOR); with more than
2 x `GPSIMD_ADDS` other taps, `GPSIMD_ADDS` of them are summed by GpSimdE into a zeroed SBUF partial instead
(their multiplies on ScalarE) and added to the accumulator once (VectorE is the busiest engine: its adds and
the eviction; GpSimdE has no PSUM port, so its adds take the slower SBUF + SBUF rate); then the accumulator is
evicted through `nprof.compiler.conv_check.evict` (bias added there). The input gradient is the same with
the roles turned (tap (i, j) adds w[:, tap] * g to the input positions o * stride + tap * dilation - padding:
a strided rectangle of the accumulator). The weight gradient: per tap, the product of the output gradient
and the tap's window (VectorE and GpSimdE by turns) summed over its free axis on ScalarE (ACTIVATE with a
reduction) into one column per piece and tap; the columns summed, the k image slots summed by transposes, the
result evicted through the checked copy. Every result leaves through `evict`: a call whose results hold an
inf or NaN runs eagerly (`nprof.compiler.conv_check`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from nprof.arch.isa import Access, Space
from nprof.compiler.conv_check import evict
from nprof.compiler.kernels.conv_taps import shaped
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512  # fp32 a partition in one PSUM bank: the accumulator block
BUDGET = 96 * 1024  # bytes a partition one piece's source band and result (or gradient band) may take
PIECE = 16 * 1024  # bytes a partition a piece aims at: several pieces, so loads and stores overlap compute

Pair = tuple[int, int]


class Geometry(NamedTuple):
    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    oh: int
    ow: int
    stride: Pair
    pad: Pair
    dil: Pair


class Group(NamedTuple):
    """Partitions `parts` = slots x `cc` channels from channel `c0`; partition p holds channel c0 + p % cc of
    images img0 + p // cc + i * step for i < rounds (its free axis)."""

    parts: int
    c0: int
    cc: int
    img0: int
    rounds: int
    step: int


def geometry(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: Pair, padding: Pair,
             dilation: Pair) -> Geometry:  # fmt: skip
    n, c, h, w = x_shape
    kh, kw = w_shape[2], w_shape[3]
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return Geometry(n, c, h, w, kh, kw, oh, ow, stride, padding, dilation)


def supported(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: Pair, padding: Pair, dilation: Pair,
              dtypes: tuple[str, ...] = ("float32",)) -> bool:  # fmt: skip
    """Do these kernels run this convolution, forward and backward (module doc: what is not covered)?"""
    if len(x_shape) != 4 or len(w_shape) != 4 or any(d != "float32" for d in dtypes):
        return False
    if w_shape[0] != x_shape[1] or w_shape[1] != 1 or min(x_shape) < 1 or min(w_shape) < 1:
        return False
    if min(*stride, *dilation) < 1 or min(padding) < 0:
        return False
    geo = geometry(x_shape, w_shape, stride, padding, dilation)
    if geo.oh < 1 or geo.ow < 1 or max(geo.w, geo.ow) > PSUM_FREE:
        return False
    return all(band_rows(geo, kind, 1) > 0 for kind in ("forward", "input", "weight"))


def groups(n: int, c: int) -> list[Group]:
    """The partition groups of N images of C channels (module doc: layout)."""
    if c > P:
        return [Group(min(P, c - c0), c0, min(P, c - c0), 0, n, 1) for c0 in range(0, c, P)]
    k = min(P // c, n)
    rounds, rest = divmod(n, k)
    out = [Group(k * c, 0, c, 0, rounds, k)]
    if rest:
        out.append(Group(rest * c, 0, c, rounds * k, 1, k))
    return out


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def span(acc: Pair, acc_map: Pair, src: Pair, src_map: Pair) -> tuple[int, int, int]:
    """(first accumulator index, first source index, count) of the t with acc_step * t + acc_off in [acc lo,
    hi) and src_step * t + src_off in [src lo, hi), where acc_map = (acc_step, acc_off), src_map likewise."""
    (alo, ahi), (astep, aoff), (slo, shi), (sstep, soff) = acc, acc_map, src, src_map
    t0 = max(_ceil(alo - aoff, astep), _ceil(slo - soff, sstep))
    t1 = min(_ceil(ahi - aoff, astep), _ceil(shi - soff, sstep))
    return astep * t0 + aoff, sstep * t0 + soff, max(0, t1 - t0)


def source_rows(geo: Geometry, kind: str, r0: int, r1: int) -> Pair:
    """The source rows [a, b) the accumulator rows [r0, r1) read: input rows for the forward and the weight
    gradient (whose accumulator rows are output-gradient rows), output-gradient rows for the input gradient."""
    (sh, _), (ph, _), (dh, _) = geo.stride, geo.pad, geo.dil
    if kind == "input":
        a, b = _ceil(r0 + ph - dh * (geo.kh - 1), sh), _ceil(r1 + ph, sh)
        a, b = max(0, a), min(geo.oh, b)
    else:
        a, b = max(0, r0 * sh - ph), min(geo.h, (r1 - 1) * sh - ph + dh * (geo.kh - 1) + 1)
    return a, max(a, b)


def _sizes(geo: Geometry, kind: str) -> tuple[int, int, int]:
    """(accumulator rows, accumulator row width, source row width) of `kind`."""
    if kind == "input":
        return geo.h, geo.w, geo.ow
    return geo.oh, geo.ow, geo.w


def _piece_bytes(geo: Geometry, kind: str, rounds: int, rows: int) -> int:
    """Bytes a partition of a piece of `rounds` images and `rows` accumulator rows, its source band at worst
    (no clipping at the image's edges)."""
    _, acc_w, src_w = _sizes(geo, kind)
    (sh, _), (dh, _) = geo.stride, geo.dil
    if kind == "input":  # the gradient rows o with o * sh in an interval of rows + dh * (kh - 1) input rows
        worst = min(geo.oh, _ceil(rows + dh * (geo.kh - 1), sh))
    else:
        worst = min(geo.h, (rows - 1) * sh + dh * (geo.kh - 1) + 1)
    return rounds * (rows * acc_w + worst * src_w) * 4


def band_rows(geo: Geometry, kind: str, rounds: int, budget: int | None = None) -> int:
    """The most accumulator rows a piece of `rounds` images may take within `budget` (default `BUDGET`; 0:
    not even one)."""
    limit = BUDGET if budget is None else budget
    return next((r for r in range(_sizes(geo, kind)[0], 0, -1) if _piece_bytes(geo, kind, rounds, r) <= limit), 0)


def pieces(geo: Geometry, kind: str, rounds: int) -> list[tuple[int, int, int, int]]:
    """(first image round, rounds, first row, end row) of the pieces one group runs in: whole images, as many
    rounds a piece as `PIECE` allows (at least one); else one image a piece, in bands of rows."""
    rows = _sizes(geo, kind)[0]
    if _piece_bytes(geo, kind, 1, rows) <= BUDGET:
        per = max([m for m in range(1, rounds + 1) if _piece_bytes(geo, kind, m, rows) <= PIECE] or [1])
        return [(i, min(per, rounds - i), 0, rows) for i in range(0, rounds, per)]
    band = band_rows(geo, kind, 1)
    return [(i, 1, r, min(rows, r + band)) for i in range(rounds) for r in range(0, rows, band)]


def blocks(images: int, rows: int, width: int) -> list[tuple[int, int, int, int]]:
    """PSUM blocks (first image, images, first row, end row) of at most `PSUM_FREE` elements a partition."""
    if rows * width <= PSUM_FREE:
        per = PSUM_FREE // (rows * width)
        return [(b, min(per, images - b), 0, rows) for b in range(0, images, per)]
    step = max(1, PSUM_FREE // width)
    return [(b, 1, r, min(rows, r + step)) for b in range(images) for r in range(0, rows, step)]


def _access(v: View, g: Group, i0: int, rounds: int, e0: int, count: int) -> Access:
    """HBM access [g.parts, rounds, count] of a contiguous NCHW view: elements e0.. of each plane of image
    rounds i0.. of group `g`."""
    _, c, h, w = v.shape
    plane = h * w
    offset = v.offset + ((g.img0 + i0 * g.step) * c + g.c0) * plane + e0
    return Access(Space.HBM, v.tensor, v.dtype, offset, g.parts, ((g.step * c * plane, rounds), (1, count)), 0, plane)


def columns(v: View, g: Group, count: int) -> NkiTensor:
    """[g.parts, count] per-partition columns of the [C, count] contiguous rows of `v` (weights [C, 1, KH, KW]:
    count = KH * KW; a bias [C]: count 1, any element stride): row c0 + p % cc on partition p."""
    stride = count if count > 1 else v.strides[0]
    rows = load(Access(Space.HBM, v.tensor, v.dtype, v.offset + g.c0 * stride, g.cc, ((1, count),), 0, stride))
    if g.parts == g.cc:
        return rows
    row = nisa.nc_transpose(rows)  # [count, cc] in PSUM
    p0, e0, dims = row.access_key()
    repeated = NkiTensor(row.base, p0, e0, (dims[0], (0, 0, g.parts // g.cc), *dims[1:]), ())  # [count, k, cc]
    wide = nisa.tensor_copy(repeated).flatten_free()
    assert wide is not None
    return nisa.tensor_copy(nisa.nc_transpose(wide))


class Engines:
    """The engines the multiplies take by turns: ScalarE, GpSimdE (VectorE does the adds)."""

    def __init__(self) -> None:
        self.turn = 0

    def next(self) -> object:
        self.turn += 1
        return nisa.scalar_engine if self.turn % 2 else nisa.gpsimd_engine


TapWindow = tuple[int, tuple[slice, slice], NkiTensor]  # (tap, accumulator rows and columns, source window)


def _whole(s: slice, size: int) -> bool:
    return s.start == 0 and s.stop == size and s.step == 1


GPSIMD_ADDS = 3  # taps of a block GpSimdE sums into its own partial (module doc); 0: VectorE adds every tap


def accumulate(acc: NkiTensor, windows: list[TapWindow], wcol: NkiTensor, engines: Engines) -> None:
    """acc [parts, images, R, Q] (PSUM) = sum over `windows` of wcol[:, tap] * window, each into its rectangle
    of acc (module doc: how)."""
    _, _, r, q = acc.shape
    first = next((k for k, (_, (rs, cs), _) in enumerate(windows) if _whole(rs, r) and _whole(cs, q)), None)
    if first is None:
        nisa.memset(dst=acc, value=0.0, engine=nisa.vector_engine)
    else:
        tap, _, window = windows[first]
        nisa.tensor_scalar(window, "multiply", wcol[:, tap : tap + 1], engine=nisa.scalar_engine, dst=acc)
    rest = [w for k, w in enumerate(windows) if k != first]
    side = rest[:GPSIMD_ADDS] if len(rest) > 2 * GPSIMD_ADDS else []
    for tap, (rs, cs), window in rest[len(side) :]:
        product = nl.ndarray(window.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(window, "multiply", wcol[:, tap : tap + 1], engine=engines.next(), dst=product)
        rect = acc[:, :, rs, cs]
        nisa.tensor_tensor(rect, product, "add", engine=nisa.vector_engine, dst=rect)
    if not side:
        return
    partial = nisa.memset(acc.shape, 0.0, nl.float32, engine=nisa.gpsimd_engine)
    for tap, (rs, cs), window in side:
        product = nisa.tensor_scalar(window, "multiply", wcol[:, tap : tap + 1], engine=nisa.scalar_engine)
        rect = partial[:, :, rs, cs]
        nisa.tensor_tensor(rect, product, "add", engine=nisa.gpsimd_engine, dst=rect)
    nisa.tensor_tensor(acc, partial, "add", engine=nisa.vector_engine, dst=acc)


def _axis(acc: Pair, acc_map: Pair, src: Pair, src_map: Pair, acc0: int, src0: int) -> tuple[slice, slice] | None:
    """`span` as slices of the accumulator tile (first index acc0) and the source tile (first index src0)."""
    a, s, count = span(acc, acc_map, src, src_map)
    if count == 0:
        return None
    (astep, _), (sstep, _) = acc_map, src_map
    return (slice(a - acc0, a - acc0 + astep * (count - 1) + 1, astep),
            slice(s - src0, s - src0 + sstep * (count - 1) + 1, sstep))  # fmt: skip


def tap_windows(geo: Geometry, kind: str, src: NkiTensor, block: tuple[int, int, int, int], piece_rows: Pair,
                band: Pair) -> list[TapWindow]:  # fmt: skip
    """The taps' windows for one PSUM block (images b0.., accumulator rows r0..r1 of the piece, whose first
    row is piece_rows[0]) over the source band tile `src` [parts, images, rows a..b, width]."""
    b0, nb, q0, q1 = block
    lo, hi = piece_rows[0] + q0, piece_rows[0] + q1
    _, acc_w, src_w = _sizes(geo, kind)
    (sh, sw), (ph, pw), (dh, dw) = geo.stride, geo.pad, geo.dil
    out: list[TapWindow] = []
    for i in range(geo.kh):
        for j in range(geo.kw):
            if kind == "input":  # accumulator (input) row o * sh + i * dh - ph gets source (gradient) row o
                rows = _axis((lo, hi), (sh, i * dh - ph), band, (1, 0), lo, band[0])
                cols = _axis((0, acc_w), (sw, j * dw - pw), (0, src_w), (1, 0), 0, 0)
            else:  # accumulator (output) row o reads source (input) row o * sh + i * dh - ph
                rows = _axis((lo, hi), (1, 0), band, (sh, i * dh - ph), lo, band[0])
                cols = _axis((0, acc_w), (1, 0), (0, src_w), (sw, j * dw - pw), 0, 0)
            if rows is None or cols is None:
                continue
            window = src[:, b0 : b0 + nb, rows[1], cols[1]]
            out.append((i * geo.kw + j, (rows[0], cols[0]), window))
    return out


def _band(v: View, geo: Geometry, kind: str, g: Group, piece: tuple[int, int, int, int]) -> tuple[NkiTensor, Pair]:
    """The source band tile [parts, rounds, b - a, width] of one piece (rows a..b it reads; zero rows: an
    unused one-element tile) and (a, b)."""
    i0, ni, r0, r1 = piece
    a, b = source_rows(geo, kind, r0, r1)
    width = _sizes(geo, kind)[2]
    if b <= a:
        return nisa.memset((g.parts, ni, 1, width), 0.0, nl.float32, engine=nisa.gpsimd_engine), (a, a)
    return shaped(load(_access(v, g, i0, ni, a * width, (b - a) * width)), (ni, b - a, width)), (a, b)


def _run(res_v: View, src_v: View, geo: Geometry, kind: str, wcol_of: Callable[[Group], tuple],
         engines: Engines) -> None:  # fmt: skip
    """The forward (`kind` "forward") or input gradient ("input") into `res_v` from `src_v`: per group and piece,
    the band loaded, each PSUM block accumulated and evicted into the piece's result, the result stored."""
    _, acc_w, _ = _sizes(geo, kind)
    for g in groups(geo.n, geo.c):
        wcol, bcol = wcol_of(g)
        for piece in pieces(geo, kind, g.rounds):
            i0, ni, r0, r1 = piece
            src, band = _band(src_v, geo, kind, g, piece)
            res = nl.ndarray((g.parts, ni, r1 - r0, acc_w), dtype=nl.float32, buffer=nl.sbuf)
            for block in blocks(ni, r1 - r0, acc_w):
                b0, nb, q0, q1 = block
                acc = nl.ndarray((g.parts, nb, q1 - q0, acc_w), dtype=nl.float32, buffer=nl.psum)
                accumulate(acc, tap_windows(geo, kind, src, block, (r0, r1), band), wcol, engines)
                evict(acc, res[:, b0 : b0 + nb, q0:q1, :], bcol)
            store(_access(res_v, g, i0, ni, r0 * acc_w, (r1 - r0) * acc_w), shaped(res, (ni, (r1 - r0) * acc_w)))


def depthwise_kernel(out: View, x: View, w: View, bias: View | None, stride: Pair, padding: Pair,
                     dilation: Pair) -> None:  # fmt: skip
    """out [N, C, OH, OW] = the depthwise convolution of x [N, C, H, W] with w [C, 1, KH, KW], + bias [C]."""
    geo = geometry(tuple(x.shape), tuple(w.shape), stride, padding, dilation)
    taps = geo.kh * geo.kw

    def wcol_of(g: Group) -> tuple:
        return columns(w, g, taps), (columns(bias, g, 1) if bias is not None else None)

    _run(out, x, geo, "forward", wcol_of, Engines())


def depthwise_input_grad_kernel(dx: View, g: View, w: View, stride: Pair, padding: Pair, dilation: Pair) -> None:
    """dx [N, C, H, W]: the input gradient of the depthwise convolution for the output gradient g."""
    geo = geometry(tuple(dx.shape), tuple(w.shape), stride, padding, dilation)
    taps = geo.kh * geo.kw
    _run(dx, g, geo, "input", lambda grp: (columns(w, grp, taps), None), Engines())


def depthwise_weight_grad_kernel(dw: View, g: View, x: View, stride: Pair, padding: Pair, dilation: Pair) -> None:
    """dw [C, 1, KH, KW]: sum over images and output pixels of g times each tap's input window (module doc)."""
    geo = geometry(tuple(x.shape), tuple(dw.shape), stride, padding, dilation)
    taps = geo.kh * geo.kw
    slots: dict[int, NkiTensor] = {}  # c0 -> [parts of the widest group, taps] sums of its groups
    for grp in groups(geo.n, geo.c):
        total = _weight_grad_group(g, x, geo, grp)
        if grp.c0 in slots:
            acc = slots[grp.c0][0 : grp.parts]
            nisa.tensor_tensor(acc, total, "add", dst=acc)
        else:
            slots[grp.c0] = total
    for c0, total in slots.items():
        cc = min(P, geo.c - c0)
        k = total.shape[0] // cc
        if k > 1:  # the image slots of each channel summed: transposed, reduced over the slot axis, back
            rows = nisa.nc_transpose(total).unflatten_free((k, cc))  # [taps, k, cc]
            total = nisa.nc_transpose(nisa.tensor_reduce("add", rows, axis=1))  # [cc, taps] in PSUM
        res = nl.ndarray((cc, taps), dtype=nl.float32, buffer=nl.sbuf)
        evict(total, res)
        store(Access(Space.HBM, dw.tensor, dw.dtype, dw.offset + c0 * taps, cc, ((1, taps),), 0, taps), res)


def _weight_grad_group(g: View, x: View, geo: Geometry, grp: Group) -> NkiTensor:
    """[grp.parts, taps] sums over the group's images of g times each tap's window (one column a piece and
    tap, summed at the end)."""
    taps = geo.kh * geo.kw
    plan = pieces(geo, "weight", grp.rounds)
    cols = nisa.memset((grp.parts, len(plan), taps), 0.0, nl.float32, engine=nisa.gpsimd_engine)
    turn = 0
    for m, piece in enumerate(plan):
        i0, ni, r0, r1 = piece
        src, band = _band(x, geo, "weight", grp, piece)
        gt = shaped(load(_access(g, grp, i0, ni, r0 * geo.ow, (r1 - r0) * geo.ow)), (ni, r1 - r0, geo.ow))
        for tap, (rs, cs), window in tap_windows(geo, "weight", src, (0, ni, 0, r1 - r0), (r0, r1), band):
            turn += 1
            engine = nisa.vector_engine if turn % 2 else nisa.gpsimd_engine
            product = nisa.tensor_tensor(gt[:, :, rs, cs], window, "multiply", engine=engine)
            nisa.activation("copy", product, reduce_op="add", reduce_res=cols[:, m, tap : tap + 1])
    if len(plan) == 1:
        return shaped(cols, (taps,))
    return nisa.tensor_reduce("add", cols, axis=1)
