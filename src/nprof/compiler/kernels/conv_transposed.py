"""Convolutions of few output channels with the matmul operands' roles swapped (NKI): transposed output.

Contract: `transposed_core(xps, weights, m, n, out_hw, taps, dil, col)` returns res [m, N, OH, OW] = the
stride-1 convolution that `kernels.conv._conv_core` computes from the same padded tiles `xps` ([cc, N, padded
rows + slack, Wp], Wp <= 128) and weights(ci, t) [cc, m] (+ the [m, 1] column `col`), for m <=
`TRANSPOSED_MAX_M`; `TRANSPOSED` is the module switch (the tests compare both ways). Not used for the stacked
small-channel kernels (`kernels.conv._stacked_conv`): tried on resnet18's stem (3 -> 64 channels, 7x7, stride
2), the forward simulated 11 us slower in bench/compile.py's resnet18 (411.6 -> 423.0 us).

Why: a matmul costs max(min(64, stationary columns), moving columns) TensorE cycles (x4 in fp32;
`arch.cost.matmul_cycles`). The plain kernels stream the positions as the moving operand, one cycle per
position per tap (group) whatever m is. Here the tap's window of at most 128 positions is the stationary and
the weights [cc, m] the moving operand: max(64, m) cycles per 128 positions, half for m <= 64; the weight loads
(the windows) overlap the matmul before them (`device.schedule`). The result acc[positions, m] is turned back
by one TensorE transpose per chunk (data moves: the values are the same products and sums), evicted with the
padding columns and the rows between images dropped and the bias added.

Pipelining: TensorE runs in program order, and a transpose waits for the copy of its accumulator out of PSUM;
issued right after its chunk's matmuls it would stall the next chunk's. So the chunks' accumulators share PSUM
banks (m columns each) and a bank's transposes are issued after the next bank's matmuls (`_pipelined`).
"""

from __future__ import annotations

import itertools
from typing import Any

from nprof.compiler.kernels import engines
from nprof.compiler.kernels.conv_taps import shaped
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
PSUM_FREE = 512  # fp32 per partition in one PSUM bank
TRANSPOSED = True  # module switch (see module doc)
TRANSPOSED_MAX_M = 64  # output channels up to which the transposed kernels run


def _pipelined(chunks: list[tuple[Any, int]], m: int, accumulate: Any, evict: Any) -> None:
    """For each chunk (key, rows): accumulate(acc [rows, m] in PSUM, key) issues its matmuls; then evict(its
    transpose [m, rows] in PSUM, key). Chunks share banks of `PSUM_FREE` columns; a bank's copies and
    transposes are issued after the next bank's matmuls (see module doc)."""
    per = max(1, PSUM_FREE // m)
    pending: tuple[NkiTensor, list[tuple[Any, int]]] | None = None
    for b0 in range(0, len(chunks), per):
        batch = chunks[b0 : b0 + per]
        acc = nl.ndarray((max(rows for _, rows in batch), len(batch) * m), dtype=nl.float32, buffer=nl.psum)
        for b, (key, rows) in enumerate(batch):
            accumulate(acc[:rows, b * m : (b + 1) * m], key)
        if pending is not None:
            _flush(*pending, m, evict)
        pending = (acc, batch)
    if pending is not None:
        _flush(*pending, m, evict)


def _flush(acc: NkiTensor, batch: list[tuple[Any, int]], m: int, evict: Any) -> None:
    for b, (key, rows) in enumerate(batch):
        evict(nisa.nc_transpose(engines.copy(acc[:rows, b * m : (b + 1) * m])), key)


def _evict(src: NkiTensor, dst: NkiTensor, col: NkiTensor | None) -> None:
    if col is None:
        engines.copy(src, dst=dst)
    else:
        nisa.tensor_scalar(src, "add", col, dst=dst)


def image_rows(r0: int, rt: int, hs: int, rows: int) -> list[tuple[int, int, int, int]]:
    """The pieces of the flattened images' rows r0..r0+rt (each image `hs` rows, of which the first `rows` hold
    outputs) as (image, first row in the chunk, first output row, row count); the rows between images dropped."""
    out = []
    for img in range(r0 // hs, (r0 + rt - 1) // hs + 1):
        lo, hi = max(r0, img * hs), min(r0 + rt, img * hs + rows)
        if hi > lo:
            out.append((img, lo - r0, lo - img * hs, hi - lo))
    return out


def transposed_rows(flats: list[NkiTensor], offsets: list[tuple[int, int, int]], weights: Any, m: int, wp: int,
                    last: int, place: Any) -> None:  # fmt: skip
    """The transposed accumulation over rows 0..last of flattened tiles `flats` [cc, rows * wp] (wp <= 128), in
    chunks of whole rows (at most 128 positions): acc[positions, m] = sum over (ci, t, offset) in `offsets` of
    flats[ci][:, chunk start + offset ..].T @ weights(ci, t); then place(its transpose [m, rows, wp], first
    row) evicts it (see module doc)."""
    per = P // wp  # rows per chunk

    def accumulate(acc: NkiTensor, r0: int) -> None:
        q = acc.shape[0]
        for k, (ci, t, off) in enumerate(offsets):
            prod = nisa.nc_matmul(flats[ci][:, r0 * wp + off : r0 * wp + off + q], weights(ci, t))
            if k == 0:
                acc[...] = prod
            else:
                acc += prod

    def evict(back: NkiTensor, r0: int) -> None:
        place(back.unflatten_free((back.shape[1] // wp, wp)), r0)

    _pipelined([(r0, min(per, last - r0) * wp) for r0 in range(0, last, per)], m, accumulate, evict)


def transposed_core(xps: list[NkiTensor], weights: Any, m: int, n: int, out_hw: tuple[int, ...],
                    taps: list[tuple[int, tuple[int, int]]], dil: tuple[int, int],
                    col: NkiTensor | None) -> NkiTensor:  # fmt: skip
    """See module doc: chunks of whole padded rows (at most 128 positions) of the flattened tiles, as
    `kernels.conv._flat_window` reads them; `taps` are the (index, tap) pairs that read data."""
    oh, ow = out_hw
    _, _, hs, wp = xps[0].shape  # [cc, N, padded rows + slack, padded width]
    res = nl.ndarray((m, n, oh, ow), dtype=nl.float32, buffer=nl.sbuf)

    def place(view: NkiTensor, r0: int) -> None:
        for img, c0, o0, rows in image_rows(r0, view.shape[1], hs, oh):
            _evict(view[:, c0 : c0 + rows, :ow], res[:, img, o0 : o0 + rows, :], col)

    offsets = [(ci, t, i * dil[0] * wp + j * dil[1]) for ci, (t, (i, j)) in itertools.product(range(len(xps)), taps)]
    flats = [shaped(xp, (n * hs * wp,)) for xp in xps]
    transposed_rows(flats, offsets, weights, m, wp, (n - 1) * hs + oh, place)
    return res
