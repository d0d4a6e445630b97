"""Strided few-channel convolutions with images on the partitions (NKI): one input DMA on g * C partitions.

Contract: `batched_images(x_shape, w_shape, stride, padding, dilation, bias)` is g >= 2, the images per chunk,
when a convolution is strided (stride != 1), undilated, without bias, with 16 <= C and OC, g = min(N,
128 // max(C, OC)) >= 2, OH * OW <= 512 (one PSUM bank) and the padded input within `SBUF_SHARE`; else 0.
`conv_batched_kernel(out, x, w, stride, padding, g)` is `kernels.conv.conv_kernel` for those.

Why: with channels on the partitions (`kernels.conv`: the taps stacked on C-partition blocks, or one
C-partition input tile), a 16-channel input moves in DMAs of 16 partitions, two DMA engines each (cost model:
one engine per 8 partitions), one per tap: a 3x3 stride-2 convolution of a 4 x 16 x 32 x 32 input moved 2.2 MB
at 34 GB/s per DMA where 262 kB would do. Here partition n * C + c holds channel c of image n of a chunk of g
images (a contiguous NCHW chunk: one DMA on g * C partitions, one partition stride), zero-padded on chip; tap
(i, j) is the strided window E[:, i :: sh, j :: sw] (copied contiguous on GpSimdE), and

    out[(n, o), pixel] = sum over taps of st_tap[(n', c), (n, o)] * window_tap[(n', c), pixel]

with the block-diagonal stationary st_tap[(n', c), (n, o)] = W[o, c, tap] if n == n' else 0 (the weights'
natural rows repeated g times per tap, one TensorE transpose per tap, a select by the 0/1 mask
floor(p / C) == floor(q / OC)). The result [(n, o), OH * OW] is the contiguous NCHW output of the chunk:
one DMA on g * OC partitions.

Non-finite inputs: a stationary zero meets every moving value of its row, so an inf or NaN input element
also makes NaN in the same pixel of the other images of its chunk (0 x inf), where eager keeps those finite;
every output eager makes non-finite is non-finite here too. The results are evicted through
`nprof.compiler.conv_check.evict`, whose check makes such a call run eagerly.
"""

from __future__ import annotations

from nprof.arch.isa import Access, Space
from nprof.compiler.conv_check import evict
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_taps import shaped, tap_transposes
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512
MIN_C = 16  # fewer channels: the stacked taps of `kernels.conv` use TensorE better (g * C rows would be few)
SBUF_SHARE = 32 * 1024  # bytes per partition the padded input may take
ENABLED = True  # module switch (tests compare with the channel-partition lowering)


def batched_images(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, int],
                   padding: tuple[int, int], dilation: tuple[int, int], bias: bool) -> int:  # fmt: skip
    """g (see module doc), or 0 when the convolution does not take this path."""
    if not ENABLED or len(x_shape) != 4 or stride == (1, 1) or dilation != (1, 1) or bias:
        return 0
    n, c, h, w = x_shape
    oc, wc, kh, kw = w_shape
    if wc != c or min(c, oc) < MIN_C:
        return 0
    g = min(n, P // max(c, oc))
    oh = (h + 2 * padding[0] - kh) // stride[0] + 1
    ow = (w + 2 * padding[1] - kw) // stride[1] + 1
    padded = (h + 2 * padding[0]) * (w + 2 * padding[1]) * 4
    if g < 2 or oh * ow > PSUM_FREE or padded > SBUF_SHARE:
        return 0
    return g


def block_mask(rows: int, c: int, cols: int, oc: int) -> NkiTensor:
    """[rows, cols] 0/1: 1.0 where floor(p / c) == floor(q / oc) (p the partition, q the column): with u = p mod
    c and v = q mod oc, exactly where oc * (p - u) == c * (q - v), i.e. oc * p - c * q - oc * u + c * v == 0
    (small integers: exact in fp32)."""
    gp = nisa.gpsimd_engine
    diff = nisa.iota(nl.arange(rows)[:, None] * oc + nl.arange(cols)[None, :] * -c, dtype=nl.float32)
    pu = nisa.tensor_scalar(nisa.iota(nl.arange(rows)[:, None] + nl.arange(cols)[None, :] * 0, dtype=nl.float32),
                            "mod", float(c), op1="multiply", operand1=float(oc), engine=gp)  # fmt: skip
    qv = nisa.tensor_scalar(nisa.iota(nl.arange(rows)[:, None] * 0 + nl.arange(cols)[None, :], dtype=nl.float32),
                            "mod", float(oc), op1="multiply", operand1=float(c), engine=gp)  # fmt: skip
    total = nisa.tensor_tensor(nisa.tensor_tensor(diff, pu, "subtract", engine=gp), qv, "add", engine=gp)
    return nisa.tensor_scalar(total, "is_equal", 0.0, engine=gp)


def _stationaries(w: View, g: int) -> NkiTensor:
    """st [g * C, taps, g * OC]: st[(n', c), t, (n, o)] = W[o, c, t] if n == n' else 0 (see module doc)."""
    oc, c, kh, kw = w.shape
    taps = kh * kw
    natural = load(Access(Space.HBM, w.tensor, w.dtype, w.offset, oc, ((1, c * taps),), 0, c * taps))
    p0, e0, dims = natural.access_key()
    by_tap = NkiTensor(natural.base, p0, e0, (dims[0], (0, 1, taps), (0, 0, g), (0, taps, c)), ())
    rows = nisa.tensor_copy(by_tap, engine=nisa.gpsimd_engine)  # [OC, taps, g, C]: W[o, c, t] g times
    mask = block_mask(g * c, c, g * oc, oc)
    mp0, me0, mdims = mask.access_key()
    st = nisa.memset((g * c, taps, g, oc), 0.0, nl.float32, engine=nisa.gpsimd_engine)
    per = max(1, PSUM_FREE // oc)  # taps whose transposes share one PSUM bank
    for t0 in range(0, taps, per):
        tn = min(per, taps - t0)
        cols = tap_transposes(rows, taps, g * c, t0, tn)
        cp0, ce0, cdims = cols.access_key()
        repeated = NkiTensor(cols.base, cp0, ce0, (cdims[0], (0, oc, tn), (0, 0, g), (0, 1, oc)), ())
        per_tap = NkiTensor(mask.base, mp0, me0, (mdims[0], (0, 0, tn), (0, oc, g), (0, 1, oc)), ())
        nisa.tensor_copy_predicated(src=repeated, dst=st[:, t0 : t0 + tn], predicate=per_tap)
    return shaped(st, (taps, g * oc))


def conv_batched_kernel(out: View, x: View, w: View, stride: tuple[int, int], padding: tuple[int, int],
                        g: int) -> None:  # fmt: skip
    """See module doc."""
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    _, _, oh, ow = out.shape
    (sh, sw), (ph, pw) = stride, padding
    st = _stationaries(w, g)
    for n0 in range(0, n, g):
        gi = min(g, n - n0)
        dense = load(Access(Space.HBM, x.tensor, x.dtype, x.offset + n0 * c * h * wd, gi * c, ((1, h * wd),), 0,
                            h * wd))  # fmt: skip
        if ph or pw:
            e = nisa.memset((gi * c, h + 2 * ph, wd + 2 * pw), 0.0, nl.float32, engine=nisa.gpsimd_engine)
            engines.copy(shaped(dense, (h, wd)), dst=e[:, ph : ph + h, pw : pw + wd])
        else:
            e = shaped(dense, (h, wd))
        acc = nl.ndarray((gi * oc, oh * ow), dtype=nl.float32, buffer=nl.psum)
        for t in range(kh * kw):
            i, j = divmod(t, kw)
            picked = e[:, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw]
            window = nisa.tensor_copy(picked, engine=nisa.gpsimd_engine)  # contiguous for TensorE
            prod = nisa.nc_matmul(st[: gi * c, t, : gi * oc], shaped(window, (oh * ow,)))
            if t == 0:
                acc[...] = prod
            else:
                acc += prod
        res = evict(acc, nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf))  # checked (`conv_check`)
        store(Access(Space.HBM, out.tensor, out.dtype, out.offset + n0 * oc * oh * ow, gi * oc, ((1, oh * ow),), 0,
                     oh * ow), res)  # fmt: skip
