"""Few-channel "same" convolutions spread over all 128 partitions (NKI): rows of the images on partitions.

Contract: `spread_factor(x_shape, w_shape, stride, padding, dilation)` is k > 1 when the convolution is 2-D,
stride 1, dilation 1, "same" (odd kernel, padding (KH-1)/2 and (KW-1)/2), with OC <= `SPREAD_MAX_C` output
channels (128 % OC == 0, k = 128 / OC), k * C <= 128, H % k == 0 (blocks of rb = H / k rows), the padding
rows within one block and the tiles within `SBUF_SHARE`; else 1. `conv_spread_kernel(out, x, w, bias, k,
padding)` is `kernels.conv.conv_kernel` for those, in the layout of `kernels.norm_spread`: channel c on
partitions c * k .. c * k + k - 1, partition c * k + j holding rows j * rb .. j * rb + rb - 1 of every image
(one HBM access: partition stride rb * W). So the input is read by one DMA (none when the producer's tile
is still in SBUF: a spread batch norm or ReLU stored it in that very pattern), the output lands on all 128
partitions, and the batch norm, ReLU and residual add after it run on 128 partitions instead of OC.

How: the input lies in an SBUF tile E [C * k, N, rb + 2 ph, W + 2 pw], each partition's rb rows between ph
halo rows and pw zero columns on each side; the halo rows are the neighbouring blocks' edge rows (one DMA
each way, partition p from p -/+ 1), zero where the block is the image's first or last (a select, not a
multiply: an inf next door stays out). Each kernel tap (i, j) is then the window E[:, :, i : i + rb,
j : j + W], and out[(oc, b), pixel] = sum over taps of st_tap[(c, b'), (oc, b)] * window[(c, b'), pixel]
with the block-diagonal stationary st_tap[(c, b'), (oc, b)] = W[oc, c, tap] if b == b' else 0 (built on
chip: the tap's weights repeated k times per row, one TensorE transpose, a select by a 0/1 mask). One
matmul per tap and PSUM bank of 512 pixels per partition: for 16 channels of 32x32 images, 9 matmuls of
512 columns where the stacked kernel needs 16.

Non-finite inputs: a stationary zero meets every moving value of its row, so an inf or NaN input element
also makes NaN at the same row and column within every other row block of its image (0 x inf), where eager
keeps those outputs finite; every output eager makes non-finite is non-finite here too, and the halo rows
that stand for zero padding are zeroed by a select, so a neighbouring channel's value never enters them.
The results are evicted through `nprof.compiler.conv_check.evict`, whose check makes such a call run eagerly.
"""

from __future__ import annotations

from nprof.arch.isa import Access, Space
from nprof.compiler.conv_check import evict
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_taps import shaped, source, tap_transposes
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.kernels.norm_spread import SPREAD_MAX_C
from nprof.compiler.kernels.norm_spread import spread as spread_columns
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512
SBUF_SHARE = 64 * 1024  # bytes per partition the padded input and the result may take together


def spread_factor(x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: tuple[int, int],
                  padding: tuple[int, int], dilation: tuple[int, int]) -> int:  # fmt: skip
    """k (see module doc), or 1 when the convolution does not spread."""
    n, c, h, w = x_shape
    oc, _, kh, kw = w_shape
    same = kh % 2 == 1 and kw % 2 == 1 and padding == ((kh - 1) // 2, (kw - 1) // 2)
    if stride != (1, 1) or dilation != (1, 1) or not same or oc > SPREAD_MAX_C or P % oc:
        return 1
    k = P // oc
    if c * k > P or h % k or w > PSUM_FREE:
        return 1
    rb = h // k
    ph, pw = padding
    padded = n * (rb + 2 * ph) * (w + 2 * pw) * 4
    if ph > rb or rb * w > PSUM_FREE or padded + n * rb * w * 4 > SBUF_SHARE:
        return 1
    return k


def block_rows(v: View, k: int, first: int, last: int, shift: int, count: int) -> Access:
    """HBM access [last - first, N, count] of a contiguous NCHW view seen with k row blocks per channel:
    partition p (first <= p < last) reads `count` elements from the start of its block plus `shift`."""
    n, c, h, w = v.shape
    part = h // k * w
    return Access(Space.HBM, v.tensor, v.dtype, v.offset + first * part + shift, last - first,
                  ((c * h * w, n), (1, count)), 0, part)  # fmt: skip


def block_predicate(rows: int, k: int, cols: int, col_step: int, want: int) -> NkiTensor:
    """[rows, cols] 0/1: 1.0 where (p - col_step * f) mod k == want (p the partition, f the column)."""
    expr = nl.arange(rows)[:, None] + nl.arange(cols)[None, :] * -col_step
    gp = nisa.gpsimd_engine  # it depends on nothing: GpSimdE builds it off the VectorE queue the kernel waits on
    offset = nisa.tensor_scalar(nisa.iota(expr, dtype=nl.float32), "add", float(k * (cols + 1)), engine=gp)
    return nisa.tensor_scalar(offset, "mod", float(k), op1="is_equal", operand1=float(want), engine=gp)


def _column_over(col: NkiTensor, free: tuple[int, ...]) -> NkiTensor:
    """The [P, 1] column `col` seen as [P, *free] (every element of a partition its value: stride 0)."""
    p0, e0, dims = col.access_key()
    return NkiTensor(col.base, p0, e0, (dims[0], *((0, 0, f) for f in free)), ())


def _repeat(t: NkiTensor, k: int) -> NkiTensor:
    """The view of `t` with a last dimension of k repeating each element (stride 0)."""
    p0, e0, dims = t.access_key()
    return NkiTensor(t.base, p0, e0, (*dims, (0, 0, k)), ())


def padded_input(x: View, k: int, pad: tuple[int, int]) -> NkiTensor:
    """E [C * k, N, rb + 2 ph, W + 2 pw] (see module doc)."""
    n, c, h, w = x.shape
    ph, pw = pad
    rb, parts = h // k, c * k
    e = nisa.memset((parts, n, rb + 2 * ph, w + 2 * pw), 0.0, nl.float32, engine=nisa.gpsimd_engine)
    center = shaped(load(block_rows(x, k, 0, parts, 0, rb * w)), (n, rb, w))
    nisa.tensor_copy(center, dst=e[:, :, ph : ph + rb, pw : pw + w])
    if ph == 0 or parts == 1:
        return e
    if ph * w <= P:  # the halo rows moved across partitions on TensorE: no DMA latency on the critical path
        for below in (False, True):
            _halo_by_transposes(e, center, k, pad, below)
        return e
    # the halo: rows of the previous block above (partition p from p - 1), of the next block below
    nisa.dma_copy(dst=e[1:parts, :, 0:ph, pw : pw + w],
                  src=source(block_rows(x, k, 1, parts, -ph * w, ph * w)))  # fmt: skip
    nisa.dma_copy(dst=e[0 : parts - 1, :, ph + rb : 2 * ph + rb, pw : pw + w],
                  src=source(block_rows(x, k, 0, parts - 1, rb * w, ph * w)))  # fmt: skip
    for rows, want in ((slice(0, ph), 0), (slice(ph + rb, 2 * ph + rb), k - 1)):  # the image's own edges: zero
        edge = _column_over(block_predicate(parts, k, 1, 0, want), (n, rows.stop - rows.start, w))
        nisa.tensor_copy_predicated(src=0.0, dst=e[:, :, rows, pw : pw + w], predicate=edge)
    return e


def _halo_by_transposes(e: NkiTensor, center: NkiTensor, k: int, pad: tuple[int, int], below: bool) -> None:
    """E's halo rows above (or `below`) each block: partition p's ph rows of every image are the last (first)
    ph rows of partition p - 1 (p + 1), written where that partition is the same channel's neighbouring block
    and left zero at the image's own edge. The rows cross partitions by TensorE transposes (data moves, no
    multiplication): transpose [parts, rows] -> [rows, parts], shift the columns by one, transpose back,
    then a select by the edge mask writes them into E (zero elsewhere from E's memset)."""
    parts, n, rb, w = center.shape
    ph, pw = pad
    src_rows = slice(0, ph) if below else slice(rb - ph, rb)
    dst_rows = slice(ph + rb, 2 * ph + rb) if below else slice(0, ph)
    group = max(1, P // (ph * w))  # images per transpose (at most 128 elements per partition)
    edge = block_predicate(parts, k, 1, 0, k - 1 if below else 0)
    for n0 in range(0, n, group):
        g = min(group, n - n0)
        f = g * ph * w
        rows = engines.copy(center[:, n0 : n0 + g, src_rows, :])  # [parts, g, ph, w]
        cols = nisa.nc_transpose(shaped(rows, (f,)))  # [f, parts]
        moved = nisa.memset((f, parts), 0.0, nl.float32, engine=nisa.gpsimd_engine)
        if below:  # partition p takes p + 1
            engines.copy(cols[:, 1:parts], dst=moved[:, 0 : parts - 1])
        else:
            engines.copy(cols[:, 0 : parts - 1], dst=moved[:, 1:parts])
        back = nisa.nc_transpose(moved).unflatten_free((g, ph, w))  # [parts, g, ph, w]
        nisa.tensor_copy_predicated(src=back, dst=e[:, n0 : n0 + g, dst_rows, pw : pw + w],
                                    predicate=_column_over(edge, (g, ph, w)), reverse_pred=True)  # fmt: skip


def _stationaries(natural: NkiTensor, c: int, taps: int, k: int) -> list[NkiTensor]:
    """Per tap t: st_t [C * k, OC * k] = W[oc, c, t] where the blocks match, else 0 (see module doc), from the
    weights' rows `natural` [OC, C * taps] (column c * taps + t): every tap's weights repeated k times per
    row (one copy), one TensorE transpose per tap into one PSUM tile, one select by the block mask for all
    taps."""
    oc = natural.shape[0]
    p0, e0, dims = natural.access_key()
    by_tap = NkiTensor(natural.base, p0, e0, (dims[0], (0, 1, taps), (0, taps, c), (0, 0, k)), ())
    rows = nisa.tensor_copy(by_tap, engine=nisa.gpsimd_engine)  # [OC, taps, C, k]: W[oc, c, t] k times
    mask = block_predicate(c * k, k, oc * k, 1, 0)  # block of the row == block of the column
    mp0, me0, mdims = mask.access_key()
    st = nisa.memset((c * k, taps, oc, k), 0.0, nl.float32, engine=nisa.gpsimd_engine)
    per = max(1, PSUM_FREE // oc)  # taps whose transposes share one PSUM bank
    for t0 in range(0, taps, per):
        tn = min(per, taps - t0)
        cols = tap_transposes(rows, taps, c * k, t0, tn)
        per_tap = NkiTensor(mask.base, mp0, me0, (mdims[0], (0, 0, tn), (0, k, oc), (0, 1, k)), ())
        nisa.tensor_copy_predicated(src=_repeat(cols.unflatten_free((tn, oc)), k), dst=st[:, t0 : t0 + tn],
                                    predicate=per_tap)  # fmt: skip
    flat = shaped(st, (taps, oc * k))
    return [flat[:, t, :] for t in range(taps)]


def _natural(w: View) -> NkiTensor:
    """W [OC, C, KH, KW] as its rows [OC, C * KH * KW] (one DMA)."""
    oc, c, kh, kw = w.shape
    return load(Access(Space.HBM, w.tensor, w.dtype, w.offset, oc, ((1, c * kh * kw),), 0, c * kh * kw))


def transposed_rows(w: View) -> NkiTensor:
    """W [OC, C, KH, KW] as the rows [C, OC * KH * KW] of its input gradient's weights (row c, column
    o * taps + t = W[o, c, t]; one DMA of KH * KW-element pieces, one chunk each: 4.9 us for 32x32x3x3).
    Kept over the natural rows (one contiguous DMA, 0.8 us) transposed per tap on TensorE: alone that
    convolution_backward simulates faster (32 channels, batch 4, 16x16: 14.3 -> 10.7 us), but in
    bench/compile.py's CNN backward, where this load is hoisted ahead of need, the TensorE transposes and the
    PSUM copy sit on the in-order engines' critical path: 275.8 -> 281.0 us as bench/compile.py prints it."""
    oc, c, kh, kw = w.shape
    taps = kh * kw
    return load(Access(Space.HBM, w.tensor, w.dtype, w.offset, c, ((c * taps, oc), (1, taps)), 0, taps))


def conv_spread_kernel(out: View, x: View, w: View, bias: View | None, k: int, padding: tuple[int, int]) -> None:
    """See module doc."""
    _, c, kh, kw = w.shape
    stationary = _stationaries(_natural(w), c, kh * kw, k)  # first: it needs only the weights (input in flight)
    _spread_conv(out, x, stationary, bias, k, padding, (kh, kw))


def conv_spread_input_grad(dx: View, g: View, w: View, k: int, padding: tuple[int, int]) -> None:
    """dx [N, C, H, W], the input gradient of a spread convolution of weights `w` [OC, C, KH, KW] for the
    output gradient `g` [N, OC, H, W]: the same convolution of g with the flipped, transposed weights
    (`spread_factor` of g's shape and [C, OC, KH, KW] gives k), stored in the spread layout."""
    oc, _, kh, kw = w.shape
    taps = kh * kw
    stationary = _stationaries(transposed_rows(w), oc, taps, k)
    _spread_conv(dx, g, stationary[::-1], None, k, padding, (kh, kw))  # tap t of the flipped kernel: taps-1-t


def _spread_conv(out: View, x: View, stationary: list[NkiTensor], bias: View | None, k: int,
                 padding: tuple[int, int], kernel: tuple[int, int]) -> None:  # fmt: skip
    """out = the spread convolution of x with the per-tap block-diagonal `stationary` (+ bias), stored spread."""
    n, _, h, wd = x.shape
    oc = out.shape[1]
    rb = h // k
    e = padded_input(x, k, padding)
    shift = None
    if bias is not None:
        col = load(Access(Space.HBM, bias.tensor, bias.dtype, bias.offset, oc, ((0, 1),), 0, bias.strides[0]))
        shift = spread_columns(col, k)
    res = nl.ndarray((P, n, rb * wd), dtype=nl.float32, buffer=nl.sbuf)
    group = max(1, PSUM_FREE // (rb * wd))
    taps = [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]
    for n0 in range(0, n, group):
        g = min(group, n - n0)
        acc = nl.ndarray((P, g * rb * wd), dtype=nl.float32, buffer=nl.psum)
        for t, (i, j) in enumerate(taps):
            window = nisa.tensor_copy(e[:, n0 : n0 + g, i : i + rb, j : j + wd], engine=nisa.gpsimd_engine)
            prod = nisa.nc_matmul(stationary[t], window)  # TensorE reads a contiguous copy: made on GpSimdE
            if t == 0:
                acc[...] = prod
            else:
                acc += prod
        evict(acc.unflatten_free((g, rb * wd)), res[:, n0 : n0 + g, :], shift)  # checked (`compiler.conv_check`)
    store(block_rows(out, k, 0, P, 0, rb * wd), res)
