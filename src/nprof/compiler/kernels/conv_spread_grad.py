"""Weight gradient of a few-channel convolution in the spread layout of `kernels.conv_spread` (NKI).

Contract: `weight_grad_factor(x_shape, w_shape, stride, padding, dilation)` is k > 1 when the weight gradient
can run with the images' rows in k blocks on the partitions (see below), else 1. `conv_spread_weight_grad(dw,
g, x, k, padding, stride)` then writes dw [OC, C, KH, KW] = sum over images and output pixels of
g[n, oc, pixel] * x[n, c, stride * pixel + tap offset] (zero outside the image): g [N, OC, OH, OW] on OC * k
partitions and x [N, C, H, W] on C * k, partition (channel, b) holding block b of rbo = OH / k output rows,
resp. rb = H / k = stride * rbo input rows, of every image (the layout the spread batch norm and the spread
convolution store, so g is usually still in SBUF and x costs one DMA). k is 128 / OC (g on all partitions, as
its spread producer left it) when x fits too, else 128 / max(C, OC).

How: x lies in the padded tile E of `conv_spread.padded_input` (halo rows from the neighbouring blocks,
zero at the image edges); output row r' of block b reads E rows stride * r' + i for kernel row i. The
contraction runs over pixels, so pixels go on the partitions: per chunk of at most 128 pixels of each block
(whole images, or a few rows of one), g's chunk is transposed once to [pixels, (oc, b)] and every tap's window
of E to [pixels, (c, b')] (TensorE transposes: data moves), and one matmul per tap accumulates
A_t[(oc, b), (c, b')] over the chunks in PSUM. A_t's diagonal blocks (b == b') are the per-block partial sums:
a select by the block mask keeps them (the other blocks pair rows of different blocks and are dropped, never
multiplied: an inf stays in its own channel's sums, as in eager), a VectorE sum over b' and the transposes of
`norm_spread.per_channel` add the k blocks of each output channel.
"""

from __future__ import annotations

from nprof.arch.isa import Access, Space
from nprof.compiler.conv_check import evict
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_spread import SBUF_SHARE, block_predicate, block_rows, padded_input
from nprof.compiler.kernels.conv_taps import shaped
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.norm_spread import SPREAD_MAX_C, per_channel
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512


def weight_grad_factor(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, int],
                       padding: tuple[int, int], dilation: tuple[int, int]) -> int:  # fmt: skip
    """k (see module doc), or 1 when the weight gradient does not spread."""
    n, c, h, w = x_shape
    oc, _, kh, kw = w_shape
    (sh, sw), (ph, pw) = stride, padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    if dilation != (1, 1) or max(c, oc) > SPREAD_MAX_C or oh <= 0 or ow <= 0 or ow > P:
        return 1
    for k in dict.fromkeys((P // oc, P // max(c, oc))):
        if k < 2 or c * k > P or h % k or oh % k or h // k != sh * (oh // k) or ph > h // k:
            continue
        rb, rbo = h // k, oh // k
        reach_rows = (rbo - 1) * sh + kh <= rb + 2 * ph and (ow - 1) * sw + kw <= w + 2 * pw
        padded = n * (rb + 2 * ph) * (w + 2 * pw) * 4
        if reach_rows and padded + n * rbo * ow * 4 <= SBUF_SHARE:
            return k
    return 1


def _chunks(n: int, rbo: int, ow: int) -> list[tuple[int, int, int, int]]:
    """Pixel chunks of at most `P` pixels per partition: (first image, images, first row of the block, rows):
    whole blocks of several images when a block has at most 128 pixels, else a few rows of one image."""
    if rbo * ow <= P:
        per = P // (rbo * ow)
        return [(img, min(per, n - img), 0, rbo) for img in range(0, n, per)]
    rows = max(1, P // ow)
    return [(img, 1, r0, min(rows, rbo - r0)) for img in range(n) for r0 in range(0, rbo, rows)]


def _diagonal_sums(accs: list[NkiTensor], per: int, taps: int, c: int, k: int) -> NkiTensor:
    """[OC * k, taps * C]: column t * C + c of partition (oc, b) = A_t[(oc, b), (c, b)] (see module doc)."""
    width, parts = c * k, accs[0].shape[0]
    mask = block_predicate(parts, k, width, 1, 0)  # 1 where the column's block equals the partition's
    mp0, me0, mdims = mask.access_key()
    sums = nl.ndarray((parts, taps * c), dtype=nl.float32, buffer=nl.sbuf)
    for a, acc in enumerate(accs):
        tn = acc.shape[1] // width
        diag = nisa.memset((parts, tn, width), 0.0, nl.float32, engine=nisa.gpsimd_engine)
        per_tap = NkiTensor(mask.base, mp0, me0, (mdims[0], (0, 0, tn), *mdims[1:]), ())
        nisa.tensor_copy_predicated(src=acc.unflatten_free((tn, width)), dst=diag, predicate=per_tap)
        t0 = a * per
        nisa.tensor_reduce(
            "add", shaped(diag, (tn, c, k)), axis=3, dst=shaped(sums[:, t0 * c : (t0 + tn) * c], (tn, c))
        )
    return sums


def conv_spread_weight_grad(dw: View, g: View, x: View, k: int, padding: tuple[int, int],
                            stride: tuple[int, int] = (1, 1)) -> None:  # fmt: skip
    """See module doc."""
    n, c, _, _ = x.shape
    oc, _, kh, kw = dw.shape
    _, _, oh, ow = g.shape
    sh, sw = stride
    rbo, taps, width, parts = oh // k, kh * kw, c * k, oc * k
    gs = shaped(load(block_rows(g, k, 0, parts, 0, rbo * ow)), (n, rbo, ow))  # [(oc, b), N, rbo, OW]
    e = padded_input(x, k, padding)  # [(c, b), N, rb + 2 ph, W + 2 pw]
    per = max(1, PSUM_FREE // width)  # taps whose accumulators share one PSUM bank
    accs = [nl.ndarray((parts, min(per, taps - t0) * width), dtype=nl.float32, buffer=nl.psum)
            for t0 in range(0, taps, per)]  # fmt: skip
    for q, (img, im, r0, rt) in enumerate(_chunks(n, rbo, ow)):
        pixels = im * rt * ow
        g_t = engines.copy(nisa.nc_transpose(shaped(gs[:, img : img + im, r0 : r0 + rt, :], (pixels,))))
        x_t = []  # every tap's window transposed first: TensorE runs the transposes back to back while the
        for t in range(taps):  # copies out of PSUM proceed, then the matmuls (none waits on its own copy)
            i, j = divmod(t, kw)
            y0 = i + r0 * sh
            win = engines.copy(e[:, img : img + im, y0 : y0 + (rt - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw])
            x_t.append(engines.copy(nisa.nc_transpose(shaped(win, (pixels,)))))  # [pixels, (c, b')]
        for t in range(taps):
            acc = accs[t // per][:, (t % per) * width : (t % per + 1) * width]
            prod = nisa.nc_matmul(g_t, x_t[t])
            if q == 0:
                acc[...] = prod
            else:
                acc += prod
    sums = _diagonal_sums(accs, per, taps, c, k)  # [(oc, b), (t, c)]
    rows = nl.ndarray((oc, taps * c), dtype=nl.float32, buffer=nl.sbuf)  # [oc, (t, c)]: the k blocks added
    for m0 in range(0, taps * c, P):
        m = min(P, taps * c - m0)
        evict(per_channel(sums[:, m0 : m0 + m], k), rows[:, m0 : m0 + m])  # checked (`compiler.conv_check`)
    natural = nl.ndarray((oc, c, taps), dtype=nl.float32, buffer=nl.sbuf)  # dW's rows: column c * taps + t
    p0, e0, dims = rows.access_key()
    nisa.tensor_copy(NkiTensor(rows.base, p0, e0, (dims[0], (0, 1, c), (0, c, taps)), ()), dst=natural)
    per_row = c * taps
    store(Access(Space.HBM, dw.tensor, dw.dtype, dw.offset, oc, ((1, per_row),), 0, per_row),
          shaped(natural, (per_row,)))  # fmt: skip
