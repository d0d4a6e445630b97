"""The input gradient of a strided convolution by output phase (NKI), without the zero-dilated gradient.

Contract: `strided_input_grad(dx, g, w, stride, padding, dilation)` writes dx [N, C, H, W] = the gradient of a
convolution's input from its output gradient g [N, OC, OH, OW] and weights w [OC, C, KH, KW] (contiguous
NCHW / OIHW fp32), for any stride. The stride-1 formulation convolves the zero-dilated gradient, so with stride
2 three of every four moving columns TensorE multiplies are zeros. Here the input positions are split by
phase (y mod sh, x mod sw): input row y = a * sh + ry reads output row oy = a + (ry + ph - i * dh) / sh
through kernel row i exactly when sh divides ry + ph - i * dh, so each phase is a stride-1 correlation of the
undilated gradient (in SBUF once, zero-padded by the largest offsets) with the taps of that phase only:
per (phase, block of at most 512 pixels) one PSUM accumulation over its taps and 128-channel chunks of OC,
evicted into the strided positions of the resident result, which is stored by one DMA per 128 channels (few
channels: moved into the spread layout of `kernels.norm_spread` by TensorE transposes and stored in it, the
layout the spread batch norm and ReLU backward after it keep in SBUF). A phase no tap reaches is zero (a 1x1
stride-2 convolution reaches one phase of four).
"""

from __future__ import annotations

import itertools
from typing import Any

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels import conv_transposed as transposed
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_taps import shaped
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.norm_spread import respread, spread_access, spread_factor
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512


def _offsets(size: int, r: int, s: int, p: int, d: int, k: int) -> tuple[int, list[tuple[int, int]]]:
    """(positions of phase r along one axis, [(kernel index, output offset)] of the taps reaching it)."""
    count = max(0, -(-(size - r) // s))
    return count, [(i, (r + p - i * d) // s) for i in range(k) if (r + p - i * d) % s == 0]


def _nchw(v: View, c0: int, cc: int) -> Access:
    n, c, h, w = v.shape
    return Access(Space.HBM, v.tensor, v.dtype, v.offset + c0 * h * w, cc, ((c * h * w, n), (1, h * w)), 0, h * w)


def _padded_gradient(g: View, o0: int, mt: int, lo: tuple[int, int], hi: tuple[int, int],
                     slack: int = 0) -> NkiTensor:  # fmt: skip
    """SBUF [mt, N, OH + lo + hi + slack, OW + lo + hi] of output channels o0.., zero around (one DMA, one copy)."""
    n, _, oh, ow = g.shape
    dense = shaped(load(_nchw(g, o0, mt)), (n, oh, ow))
    if lo == hi == (0, 0) and slack == 0:
        return dense
    tile = nisa.memset((mt, n, oh + lo[0] + hi[0] + slack, ow + lo[1] + hi[1]), 0.0, nl.float32,
                       engine=nisa.gpsimd_engine)  # fmt: skip
    engines.copy(dense, dst=tile[:, :, lo[0] : lo[0] + oh, lo[1] : lo[1] + ow])
    return tile


def strided_input_grad(dx: View, g: View, w: View, stride: tuple[int, int], padding: tuple[int, int],
                       dilation: tuple[int, int]) -> None:  # fmt: skip
    """See module doc."""
    n, c, h, wd = dx.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = g.shape
    phases = []
    for ry, rx in itertools.product(range(stride[0]), range(stride[1])):
        ay, rows = _offsets(h, ry, stride[0], padding[0], dilation[0], kh)
        ax, cols = _offsets(wd, rx, stride[1], padding[1], dilation[1], kw)
        if ay and ax and rows and cols:  # a phase no tap reaches stays zero (no PSUM accumulation to evict)
            phases.append(((ry, rx), (ay, ax), [(i * kw + j, (oy, ox)) for (i, oy), (j, ox) in
                                                itertools.product(rows, cols)]))  # fmt: skip
    offs = [o for *_, taps in phases for _, o in taps] or [(0, 0)]
    lo = tuple(max(0, -min(o[a] for o in offs)) for a in (0, 1))
    hi = tuple(max(0, max(ext[a] - 1 + o[a] for (_, ext, taps) in phases for _, o in taps) - (oh, ow)[a] + 1)
               if phases else 0 for a in (0, 1))  # fmt: skip
    taps_total = kh * kw
    # few channels and small phases (at most 128 positions: the plain matmuls below stream at most 128 columns,
    # each behind a copy of its window): the transposed kernels, with no window copies. Measured: with larger
    # phases (bench/compile.py's CNN, 16 and 32 channels at 256 and 1024 positions) the step was slower.
    small = all(n * ay * ax <= P for _, (ay, ax), _ in phases)
    flat = transposed.TRANSPOSED and small and c <= transposed.TRANSPOSED_MAX_M and ow + lo[1] + hi[1] <= P
    grads = [_padded_gradient(g, o0, min(P, oc - o0), lo, hi, int(flat))  # type: ignore[arg-type]
             for o0 in range(0, oc, P)]  # fmt: skip
    weights = [load(Access(Space.HBM, w.tensor, w.dtype, w.offset + o0 * c * taps_total, min(P, oc - o0),
                           ((1, c * taps_total),), 0, c * taps_total)) for o0 in range(0, oc, P)]  # fmt: skip
    for c0 in range(0, c, P):
        cc = min(P, c - c0)
        res = nisa.memset((cc, n, h, wd), 0.0, nl.float32, engine=nisa.gpsimd_engine)
        if flat:  # few channels: the transposed kernels' operand roles (one chunk: cc == C)
            _transposed_phases(res, grads, weights, phases, (lo, stride, taps_total))
        for (ry, rx), (ay, ax), taps in [] if flat else phases:
            row_run = max(1, min(ay, PSUM_FREE // ax))
            group = max(1, PSUM_FREE // (ay * ax)) if row_run == ay else 1
            for n0, a0 in itertools.product(range(0, n, group), range(0, ay, row_run)):
                gi, ra = min(group, n - n0), min(row_run, ay - a0)
                acc = nl.ndarray((cc, gi * ra * ax), dtype=nl.float32, buffer=nl.psum)
                for k, (ki, (t, (oy, ox))) in enumerate(itertools.product(range(len(grads)), taps)):
                    y0, x0 = lo[0] + oy + a0, lo[1] + ox
                    moving = grads[ki][:, n0 : n0 + gi, y0 : y0 + ra, x0 : x0 + ax]
                    stationary = weights[ki][:, c0 * taps_total + t : (c0 + cc - 1) * taps_total + t + 1 : taps_total]
                    prod = nisa.nc_matmul(stationary, moving)
                    if k == 0:
                        acc[...] = prod
                    else:
                        acc += prod
                y, x = a0 * stride[0] + ry, rx
                dst = res[:, n0 : n0 + gi, y : y + (ra - 1) * stride[0] + 1 : stride[0],
                          x : x + (ax - 1) * stride[1] + 1 : stride[1]]  # fmt: skip
                engines.copy(acc.unflatten_free((gi, ra, ax)), dst=dst)
        k = spread_factor(tuple(dx.shape)) if c <= P and h * wd <= P * P else 1
        if k > 1 and h * wd // k <= P:  # few channels: stored in the spread layout the consumers keep in SBUF
            store(spread_access(dx, k), respread(shaped(res, (n, h * wd)), k))
        else:
            store(_nchw(dx, c0, cc), shaped(res, (n, h * wd)))


def _transposed_phases(res: NkiTensor, grads: list[NkiTensor], weights: list[NkiTensor], phases: list[Any],
                       geometry: tuple[Any, ...]) -> None:  # fmt: skip
    """Every phase of `strided_input_grad` into res [C, N, H, W] (C <= `conv_transposed.TRANSPOSED_MAX_M`) by
    `conv_transposed.transposed_rows`: the padded gradient tiles [OC chunk, N, rows + 1 slack, Wg] flattened,
    the phase's taps (oy, ox) read at (lo + oy) * Wg + lo + ox from each output position, the weights
    [OC chunk, C] of the tap the moving operand, and the chunks' rows placed at the phase's strided positions."""
    (lo, stride, taps_total), c = geometry, res.shape[0]
    _, n, hs, wg = grads[0].shape
    flats = [shaped(t, (n * hs * wg,)) for t in grads]

    def weight(ki: int, t: int) -> NkiTensor:
        return weights[ki][:, t : (c - 1) * taps_total + t + 1 : taps_total]

    for (ry, rx), (ay, ax), taps in phases:
        offsets = [(ki, t, (lo[0] + oy) * wg + lo[1] + ox) for ki in range(len(grads)) for t, (oy, ox) in taps]

        def place(view: NkiTensor, r0: int, ry: int = ry, rx: int = rx, ay: int = ay, ax: int = ax) -> None:
            for img, c0, a0, rows in transposed.image_rows(r0, view.shape[1], hs, ay):
                y = a0 * stride[0] + ry
                dst = res[:, img, y : y + (rows - 1) * stride[0] + 1 : stride[0],
                          rx : rx + (ax - 1) * stride[1] + 1 : stride[1]]  # fmt: skip
                engines.copy(view[:, c0 : c0 + rows, :ax], dst=dst)

        transposed.transposed_rows(flats, offsets, weight, c, wg, (n - 1) * hs + ay, place)
