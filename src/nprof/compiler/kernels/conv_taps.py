"""The stacked im2col input of small-channel convolutions: kernel taps on the partitions, DMA'd from HBM.

Contract: `stacked_input(x, group, out_hw, stride, padding, dilation)` returns the SBUF tile
[len(group) * C, N * OH * OW] whose block j holds, for every output pixel, the input pixel kernel tap group[j]
reads (zero where it reads padding); `tap_rows` gives the output positions of one axis a tap reads inside
the input. One DMA per tap. With stride 1 and OW == W (same-width convolutions), a tap's window of rows
r0..r1 is moved as one contiguous run per (channel, image) — whole input rows shifted by the tap's column
offset — and the few columns that run wraps into the neighbouring row (the padding columns) are zeroed after
it on-chip: a transfer of N chunks per partition instead of one chunk per window row (the DMA cost model
charges every contiguous chunk `dma_chunk_overhead_bytes`: 31-element rows cost more in overhead than in
data). Other (strided) geometries stage each tap's input rows as one run per (channel, image) and pick the
window on-chip; the taps of one kernel row share that pick (`staged_row`: one copy of all their partitions,
the stages offset so the window sits at the same place in each) instead of one copy of C partitions per tap.
"""

from __future__ import annotations

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.hbm import window
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor


def source(a: Access) -> NkiTensor:
    """The DMA source for the HBM pattern `a`: a window of a tile the fusion cache keeps in SBUF (an on-chip
    DMA that need not wait for the producer's store to reach HBM), else `a` itself."""
    lookup = getattr(trace.current(), "lookup", None)
    kept = lookup(a, contiguous=False) if lookup is not None and a.dtype == "float32" else None
    return kept if kept is not None else window(a)


def shaped(t: NkiTensor, free: tuple[int, ...]) -> NkiTensor:
    """A contiguous tile seen with free dims `free` (same element count per partition)."""
    f = t.flatten_free()
    assert f is not None, "tiles allocated here are contiguous"
    return f.unflatten_free(free)


def tap_transposes(rows: NkiTensor, taps: int, parts: int, t0: int, tn: int) -> NkiTensor:
    """PSUM tile [parts, tn * OC]: columns t * OC.. hold the TensorE transpose of tap t0 + t of `rows`
    [OC, taps * parts] (a tap's `parts` columns contiguous), for t < tn (tn * OC must fit one PSUM bank)."""
    oc = rows.shape[0]
    cols = nl.ndarray((parts, tn * oc), dtype=nl.float32, buffer=nl.psum)
    by_tap = shaped(rows, (taps, parts))
    for t in range(tn):
        nisa.nc_transpose(by_tap[:, t0 + t, :], dst=cols[:, t * oc : (t + 1) * oc])
    return cols


def tap_rows(o: int, tap: int, stride: int, pad: int, dil: int, size: int) -> tuple[int, int]:
    """Output positions [lo, hi) of one axis whose input position o * stride + tap * dil - pad is in [0, size)."""
    first = tap * dil - pad
    lo = max(0, -(first // stride)) if first < 0 else 0
    while lo * stride + first < 0:
        lo += 1
    hi = o
    while hi > lo and (hi - 1) * stride + first >= size:
        hi -= 1
    return lo, max(lo, hi)


def live_taps(taps: list[tuple[int, int]], out_hw: tuple[int, int], stride: tuple[int, int], dil: tuple[int, int],
              data: tuple[range, range]) -> list[tuple[int, tuple[int, int]]]:  # fmt: skip
    """The (index, tap) pairs of the kernel taps whose window over a padded tile reads at least one data
    element: tap (i, j) reads rows i * dil + stride * r (r < OH) and columns j * dil + stride * q (q < OW);
    `data` holds the tile rows and columns that hold data (the rest is zero padding). A tap that reads only
    padding adds exact zeros to every output (a 3x3 convolution of a 1x1 image: eight of its nine taps), so
    skipping it changes no value. All taps when none reads data."""
    rows, cols = set(data[0]), set(data[1])
    live = [(t, (i, j)) for t, (i, j) in enumerate(taps)
            if any(i * dil[0] + stride[0] * r in rows for r in range(out_hw[0]))
            and any(j * dil[1] + stride[1] * q in cols for q in range(out_hw[1]))]  # fmt: skip
    return live or list(enumerate(taps))


def stacked_input(x: View, group: list[tuple[int, int]], out_hw: tuple[int, int], stride: tuple[int, int],
                  padding: tuple[int, int], dil: tuple[int, int], stage_max: int = 0) -> NkiTensor:  # fmt: skip
    """The stacked tile [len(group) * C, N * OH * OW] (see module doc); `stage_max`: the SBUF bytes per
    partition `staged_row` may stage in (0: `STAGE_MAX_BYTES`)."""
    n, c, h, w = x.shape
    oh, ow = out_hw
    runs = stride == (1, 1) and ow == w
    tile = nl.ndarray((len(group) * c, n, oh, ow), dtype=nl.float32, buffer=nl.sbuf)
    staged = not runs and n * h * w * 4 <= STAGE_MAX_BYTES and placeable(n * h * w * 4)
    stage = nl.ndarray((len(group) * c, n, h, w), dtype=nl.float32, buffer=nl.sbuf) if staged else None
    if not runs:
        nisa.memset((len(group) * c, n, oh, ow), 0.0, nl.float32, dst=tile)
    done: set[int] = set()
    if not runs and ROW_PICKS:
        for j0, ks in _tap_row_runs(group):
            if staged_row(x, tile, (j0, group[j0][0], ks), out_hw, (stride, padding, dil), stage_max):
                done.update(range(j0, j0 + len(ks)))
    for j, (i, k) in enumerate(group):
        block = tile[j * c : (j + 1) * c]
        r0, r1 = tap_rows(oh, i, stride[0], padding[0], dil[0], h)
        q0, q1 = tap_rows(ow, k, stride[1], padding[1], dil[1], w)
        if runs:
            _row_runs(x, block, (r0, r1), (q0, q1), i * dil[0] - padding[0], k * dil[1] - padding[1])
            continue
        if r1 <= r0 or q1 <= q0 or j in done:
            continue
        row0, col0 = r0 * stride[0] + i * dil[0] - padding[0], q0 * stride[1] + k * dil[1] - padding[1]
        if stage is not None:
            _staged(x, block, stage[j * c : (j + 1) * c], (r0, r1, row0), (q0, q1, col0), stride)
            continue
        src = Access(Space.HBM, x.tensor, x.dtype, x.offset + row0 * w + col0, c,
                     ((c * h * w, n), (stride[0] * w, r1 - r0), (stride[1], q1 - q0)), 0, h * w)  # fmt: skip
        nisa.dma_copy(dst=block[:, :, r0:r1, q0:q1], src=source(src))
    return shaped(tile, (n * oh * ow,))


def placeable(nbytes: int) -> bool:
    """Can the running builder place an SBUF stage of `nbytes` bytes per partition now (`can_place`:
    a free range that large, fragmentation included)? A stage is optional: without it the taps' windows move
    by strided DMAs (same values, more DMA chunks)."""
    can_place = getattr(trace.current(), "can_place", None)
    return can_place is None or bool(can_place(nbytes))


STAGE_MAX_BYTES = 32 * 1024  # SBUF bytes per partition a strided tap may stage its input rows in
ROW_PICKS = True  # module switch: one on-chip pick per row of kernel taps (`staged_row`); tests compare both


def _tap_row_runs(group: list[tuple[int, int]]) -> list[tuple[int, list[int]]]:
    """The group's taps as runs of consecutive taps of one kernel row: (index of the first, their columns)."""
    out: list[tuple[int, list[int]]] = []
    for j, (i, k) in enumerate(group):
        if out and group[out[-1][0]][0] == i and out[-1][1][-1] == k - 1:
            out[-1][1].append(k)
        else:
            out.append((j, [k]))
    return out


def staged_row(x: View, tile: NkiTensor, run: tuple[int, int, list[int]], out_hw: tuple[int, int],
               geometry: tuple[tuple[int, int], ...], stage_max: int = 0) -> bool:  # fmt: skip
    """Blocks j0.. of the stacked `tile` for the consecutive taps (i, k) of `run` = (j0, i, ks) of one kernel row,
    strided geometry (stride, padding, dilation): each tap's input rows move as one contiguous run per
    (channel, image), as in `_staged`, but each lands `(ks[-1] - k) * dw` elements further into its stage, so
    that one strided on-chip copy picks every tap's window at once (the same position in every partition: a
    copy of the run's C * len(ks) partitions instead of one 3-partition copy per tap: VectorE time is per
    element of a partition, not per partition). The columns a tap reads from the padding then hold
    neighbouring data and are zeroed after it, one memset per such output column. False (nothing emitted)
    when the stage would not fit `stage_max` bytes per partition (0: `STAGE_MAX_BYTES`) or the stride is wider
    than a stage row."""
    n, c, h, w = x.shape
    (j0, i, ks), (oh, ow) = run, out_hw
    (sh, sw), (ph, pw), (dh, dw) = geometry
    r0, r1 = tap_rows(oh, i, sh, ph, dh, h)
    if r1 <= r0:
        return True  # the taps read only padding rows: their blocks stay zero
    row0, span = r0 * sh + i * dh - ph, (r1 - 1 - r0) * sh + 1
    shift = max(0, ks[-1] * dw - pw)  # stage element e of tap k holds input element row0 * W + e + k * dw - pw - shift
    need = max(shift + pw - ks[0] * dw + span * w, shift + (r1 - 1 - r0) * sh * w + (ow - 1) * sw + 1)
    per = -(-need // (sh * w)) * sh * w  # stage elements per image: whole strides of sh input rows
    if (ow - 1) * sw >= sh * w or (n * per + shift) * 4 > (stage_max or STAGE_MAX_BYTES):
        return False
    if not placeable((n * per + shift) * 4):  # fragmented SBUF: the taps' rows by strided DMAs instead
        return False
    parts = slice(j0 * c, (j0 + len(ks)) * c)
    stage = nl.ndarray((tile.shape[0], n * per + shift), dtype=nl.float32, buffer=nl.sbuf)
    src = Access(Space.HBM, x.tensor, x.dtype, x.offset + row0 * w, c, ((c * h * w, n), (1, span * w)), 0, h * w)
    for m, k in enumerate(ks):
        e0 = shift + pw - k * dw
        dst = stage[(j0 + m) * c : (j0 + m + 1) * c, : n * per].unflatten_free((n, per))[:, :, e0 : e0 + span * w]
        nisa.dma_copy(dst=dst, src=source(src))
    window = stage[parts, shift : shift + n * per].unflatten_free((n, per // (sh * w), sh * w))
    engines.copy(window[:, :, : r1 - r0, : (ow - 1) * sw + 1 : sw], dst=tile[parts, :, r0:r1, :])
    cols = [tap_rows(ow, k, sw, pw, dw, w) for k in ks]
    for q in range(ow):  # the taps reading padding at output column q: a prefix (left) and a suffix (right) of ks
        bad = [m for m, (q0, q1) in enumerate(cols) if not q0 <= q < q1]
        for first, last in _segments(bad):
            rows = slice((j0 + first) * c, (j0 + last + 1) * c)
            zero = (rows.stop - rows.start, n, r1 - r0, 1)  # on GpSimdE: off the VectorE queue the picks use
            nisa.memset(zero, 0.0, nl.float32, dst=tile[rows, :, r0:r1, q : q + 1], engine=nisa.gpsimd_engine)
    return True


def _segments(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted `indices` as maximal runs of consecutive integers (first, last)."""
    out: list[tuple[int, int]] = []
    for m in indices:
        if out and out[-1][1] == m - 1:
            out[-1] = (out[-1][0], m)
        else:
            out.append((m, m))
    return out


def _staged(x: View, block: NkiTensor, stage: NkiTensor, rows: tuple[int, int, int], cols: tuple[int, int, int],
            stride: tuple[int, int]) -> None:  # fmt: skip
    """A strided tap's window: the input rows it reads move as one contiguous run per (channel, image) into
    `stage` (same partitions as `block`), then a strided on-chip copy picks the window: N chunks per partition
    instead of one per element (stride 2 in the width would make every element its own DMA chunk)."""
    n, c, h, w = x.shape
    (r0, r1, row0), (q0, q1, col0) = rows, cols
    span = (r1 - 1 - r0) * stride[0] + 1
    src = Access(Space.HBM, x.tensor, x.dtype, x.offset + row0 * w, c, ((c * h * w, n), (1, span * w)), 0, h * w)
    nisa.dma_copy(dst=shaped(stage, (n, h * w))[:, :, : span * w], src=source(src))
    picked = stage[:, :, 0 : span : stride[0], col0 : col0 + (q1 - q0 - 1) * stride[1] + 1 : stride[1]]
    engines.copy(picked, dst=block[:, :, r0:r1, q0:q1])


def _row_runs(x: View, block: NkiTensor, rows: tuple[int, int], cols: tuple[int, int], di: int, dk: int) -> None:
    """Fill `block` [C, N, OH, W] for one stride-1 tap reading input (o + di, q + dk): rows r0..r1 as one run
    per (channel, image) of the flattened input shifted by di * W + dk, then zeros where the tap reads
    padding (rows outside r0..r1, columns outside q0..q1, which the run filled with neighbouring rows)."""
    n, c, h, w = x.shape
    _, _, oh, ow = block.shape
    (r0, r1), (q0, q1) = rows, cols
    if r1 <= r0 or q1 <= q0:
        nisa.memset(block.shape, 0.0, nl.float32, dst=block)
        return
    start = (r0 + di) * w + dk  # input element of output (r0, 0), relative to its image
    skip = max(0, -start)
    end = min((r1 - r0) * w, h * w - start)  # the run may not reach past its image's last element
    src = Access(Space.HBM, x.tensor, x.dtype, x.offset + start + skip, c, ((c * h * w, n), (1, end - skip)), 0,
                 h * w)  # fmt: skip
    flat = shaped(block, (n, oh * ow))
    nisa.dma_copy(dst=flat[:, :, r0 * ow + skip : r0 * ow + end], src=source(src))
    for lo, hi in ((0, r0), (r1, oh)):
        if hi > lo:
            nisa.memset((c, n, hi - lo, ow), 0.0, nl.float32, dst=block[:, :, lo:hi, :])
    for lo, hi in ((0, q0), (q1, ow)):
        if hi > lo:
            nisa.memset((c, n, r1 - r0, hi - lo), 0.0, nl.float32, dst=block[:, :, r0:r1, lo:hi])
