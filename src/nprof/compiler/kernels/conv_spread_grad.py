"""Weight gradient of a few-channel "same" convolution in the spread layout of `kernels.conv_spread` (NKI).

Contract: `conv_spread_weight_grad(dw, g, x, k, padding)` writes dw [OC, C, KH, KW] = sum over images and
output pixels of g[n, oc, pixel] * x[n, c, pixel + tap offset] (zero outside the image) for a convolution
`conv_spread.spread_factor` spreads with factor k: g [N, OC, H, W] on OC * k = 128 partitions and x on C * k,
each partition one block of rb = H / k rows of every image (the layout the spread batch norm and the spread
convolution store, so both operands are usually still in SBUF: no DMA, or one DMA each when not).

How: x lies in the padded tile E of `conv_spread.padded_input` (halo rows from the neighbouring blocks,
zero at the image edges). The contraction runs over pixels, so pixels go on the partitions: per chunk of at
most 128 pixels of one block (a few whole rows of one image), g's chunk is transposed once to [pixels,
(oc, b)] and every tap's window of E to [pixels, (c, b')] (TensorE transposes: data moves), and one matmul
per tap accumulates A_t[(oc, b), (c, b')] over the chunks in PSUM. A_t's diagonal blocks (b == b') are the
per-block partial sums: a select by the block mask keeps them (the other blocks pair rows of different
blocks and are dropped, never multiplied: an inf stays in its own channel's sums, as in eager), a VectorE
sum over b' and the transposes of `norm_spread.per_channel` add the k blocks of each output channel.
"""

from __future__ import annotations

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_spread import block_predicate, block_rows, padded_input
from nprof.compiler.kernels.conv_taps import shaped
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.norm_spread import per_channel
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512


def _chunks(n: int, rb: int, wd: int) -> list[tuple[int, int, int]]:
    """Pixel chunks of at most `P` pixels per partition: (image, first row of the block, rows)."""
    rows = max(1, min(rb, P // wd))
    return [(img, r0, min(rows, rb - r0)) for img in range(n) for r0 in range(0, rb, rows)]


def _diagonal_sums(accs: list[NkiTensor], per: int, taps: int, c: int, k: int) -> NkiTensor:
    """[128, taps * C]: column t * C + c of partition (oc, b) = A_t[(oc, b), (c, b)] (see module doc)."""
    width = c * k
    mask = block_predicate(P, k, width, 1, 0)  # 1 where the column's block equals the partition's
    mp0, me0, mdims = mask.access_key()
    sums = nl.ndarray((P, taps * c), dtype=nl.float32, buffer=nl.sbuf)
    for a, acc in enumerate(accs):
        tn = acc.shape[1] // width
        diag = nisa.memset((P, tn, width), 0.0, nl.float32)
        per_tap = NkiTensor(mask.base, mp0, me0, (mdims[0], (0, 0, tn), *mdims[1:]), ())
        nisa.tensor_copy_predicated(src=acc.unflatten_free((tn, width)), dst=diag, predicate=per_tap)
        t0 = a * per
        nisa.tensor_reduce(
            "add", shaped(diag, (tn, c, k)), axis=3, dst=shaped(sums[:, t0 * c : (t0 + tn) * c], (tn, c))
        )
    return sums


def conv_spread_weight_grad(dw: View, g: View, x: View, k: int, padding: tuple[int, int]) -> None:
    """See module doc."""
    n, c, h, wd = x.shape
    oc, _, kh, kw = dw.shape
    rb, taps, width = h // k, kh * kw, c * k
    gs = shaped(load(block_rows(g, k, 0, P, 0, rb * wd)), (n, rb, wd))  # [(oc, b), N, rb, W]
    e = padded_input(x, k, padding)  # [(c, b), N, rb + 2 ph, W + 2 pw]
    per = max(1, PSUM_FREE // width)  # taps whose accumulators share one PSUM bank
    accs = [nl.ndarray((P, min(per, taps - t0) * width), dtype=nl.float32, buffer=nl.psum)
            for t0 in range(0, taps, per)]  # fmt: skip
    for q, (img, r0, rt) in enumerate(_chunks(n, rb, wd)):
        g_t = engines.copy(nisa.nc_transpose(shaped(gs[:, img, r0 : r0 + rt, :], (rt * wd,))))  # [pixels, 128]
        for t in range(taps):
            i, j = divmod(t, kw)
            win = engines.copy(e[:, img, i + r0 : i + r0 + rt, j : j + wd])
            x_t = engines.copy(nisa.nc_transpose(shaped(win, (rt * wd,))))  # [pixels, (c, b')]
            acc = accs[t // per][:, (t % per) * width : (t % per + 1) * width]
            prod = nisa.nc_matmul(g_t, x_t)
            if q == 0:
                acc[...] = prod
            else:
                acc += prod
    sums = _diagonal_sums(accs, per, taps, c, k)  # [(oc, b), (t, c)]
    rows = nl.ndarray((oc, taps * c), dtype=nl.float32, buffer=nl.sbuf)  # [oc, (t, c)]: the k blocks added
    for m0 in range(0, taps * c, P):
        m = min(P, taps * c - m0)
        nisa.tensor_copy(per_channel(sums[:, m0 : m0 + m], k), dst=rows[:, m0 : m0 + m])
    natural = nl.ndarray((oc, c, taps), dtype=nl.float32, buffer=nl.sbuf)  # dW's rows: column c * taps + t
    p0, e0, dims = rows.access_key()
    nisa.tensor_copy(NkiTensor(rows.base, p0, e0, (dims[0], (0, 1, c), (0, c, taps)), ()), dst=natural)
    per_row = c * taps
    store(Access(Space.HBM, dw.tensor, dw.dtype, dw.offset, oc, ((1, per_row),), 0, per_row),
          shaped(natural, (per_row,)))  # fmt: skip
