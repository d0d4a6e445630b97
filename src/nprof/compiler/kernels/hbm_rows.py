"""Small planes moved batch-major: long DMA runs, with the channel-major tile made on TensorE.

Contract: `plan(a)` recognises the HBM pattern of a channel-major tile of an [N, C, S] tensor with a small plane S
(`a`: C' channels on partitions at stride S, free ((s_n, N), (1, S)), every dim of size 1 ignored) and returns
the `Rows` that move it instead: the batch-major pattern [N partitions at s_n, (C', S) free], whose partition
rows are each one contiguous run of C' * S elements, or None when `a` is not such a pattern or the move would not
be cheaper under the cost model (`nprof.arch.cost`). `load(rows, dtype)` DMAs the batch-major pattern and turns it
channel-major with S TensorE transposes into one PSUM tile and one copy to SBUF, returning the tile of shape
``a.shape`` that `nl.load` of `a` would; `store(rows, tile)` is the reverse (S transposes of the tile's columns,
one copy, one DMA). Values are moved, never computed: the results are the bits the direct DMA moves.

Why (cost model, `nprof.arch.cost.dma_chunks`): a DMA is charged `dma_chunk_overhead_bytes` (256 B) per contiguous
run, and the channel-major pattern's runs are S elements long (a 1x1 plane: 4 bytes of data per 256-byte chunk,
C' * N chunks), while the batch-major one has N runs. The S transposes (`transpose_cycles`: max(P, min(64, F))
TensorE cycles each) and the copy of [P, N * S] are paid instead, and the batch-major DMA spreads over fewer
partitions (`dma_engines`: one engine per 8), so alone it is not always faster. `MAX_PLANE` bounds S per
direction, as measured on resnet18 (batch 8, 32x32; bench/compile.py, simulated step): 1x1 planes both ways and
2x2 loads are faster moved batch-major; 2x2 stores and 4x4 planes are slower (the single-engine DMA and the copy of
[N, C' * S] on the critical path outweigh the chunks saved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nprof.arch.cost import dma_chunks
from nprof.arch.isa import Access, Space
from nprof.arch.presets import Preset
from nprof.compiler.kernels import engines
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

MAX_PLANE = {"load": 4, "store": 1}  # largest plane S (elements) moved batch-major, by direction (module doc)
PSUM_FREE = 512  # fp32 elements of one PSUM bank per partition (HARDWARE.md)


@dataclass(frozen=True)
class Rows:
    """The batch-major pattern `rows` [N, C', S] standing for the channel-major `access` [C', N, S]."""

    access: Access
    rows: Access
    channels: int
    batch: int
    plane: int


def _dims(a: Access) -> tuple[int, int, int] | None:
    """(N, s_n, S) of a channel-major pattern (module doc), or None."""
    free = [(stride, size) for stride, size in a.free if size > 1]
    plane = a.partition_stride
    if plane < 1 or not free or free[0][0] <= 0:  # (stride 0: one row broadcast to every partition, no channels)
        return None
    if plane == 1 and len(free) == 1:
        return free[0][1], free[0][0], 1
    if len(free) == 2 and free[1] == (1, plane) and plane > 1:
        return free[0][1], free[0][0], plane
    return None


def plan(a: Access, preset: Preset, direction: str) -> Rows | None:
    """The batch-major move of `a` (`direction`: "load" or "store") when it is one and is cheaper (module doc),
    else None."""
    if a.space is not Space.HBM or a.dtype != "float32" or a.partitions < 2:
        return None
    dims = _dims(a)
    if dims is None:
        return None
    batch, batch_stride, plane = dims
    channels = a.partitions
    if plane > MAX_PLANE[direction] or batch > preset.pmax or batch < 2 or batch * plane > PSUM_FREE:
        return None
    if batch_stride < channels * plane:  # rows would overlap: not a [N, C, S] tensor's channels
        return None
    rows = Access(Space.HBM, a.tensor, a.dtype, a.offset, batch, ((plane, channels), (1, plane)), 0, batch_stride)
    sbuf = Access(Space.SBUF, "", a.dtype, 0, channels, ((1, batch * plane),), 0, 0)
    direct = dma_chunks(a, sbuf)
    moved = dma_chunks(rows, Access(Space.SBUF, "", a.dtype, 0, batch, ((1, channels * plane),), 0, 0))
    if moved >= direct:
        return None
    return Rows(a, rows, channels, batch, plane)


def load(r: Rows, window: NkiTensor, dtype: Any = nl.float32) -> NkiTensor:
    """The channel-major SBUF tile of `r.access` (shape ``r.access.shape``) from `window`, the HBM view of
    `r.rows`, moved batch-major (module doc)."""
    c, n, s = r.channels, r.batch, r.plane
    rows = nl.load(window, dtype=nl.float32).flatten_free()  # [N, C' * S]
    assert rows is not None
    acc = nl.ndarray((c, n * s), dtype=nl.float32, buffer=nl.psum)
    for k in range(s):
        nisa.nc_transpose(rows[:, k : k + (c - 1) * s + 1 : s], dst=acc[:, k : k + (n - 1) * s + 1 : s])
    out = nl.ndarray((c, n * s), dtype=dtype, buffer=nl.sbuf)
    engines.copy(acc, dst=out)
    return out.unflatten_free(r.access.shape[1:])


def store(r: Rows, tile: NkiTensor, window: NkiTensor) -> bool:
    """DMA the channel-major `tile` to `r.access` batch-major through `window`, the HBM view of `r.rows` (module
    doc); False (nothing done) when `tile` is not a contiguous fp32 SBUF tile, which the caller then stores
    directly."""
    if tile.space is not Space.SBUF or tile.dtype_name != "float32":
        return False
    flat = tile if tile.ndim == 2 else tile.flatten_free()
    c, n, s = r.channels, r.batch, r.plane
    if flat is None or flat.shape != (c, n * s):
        return False
    rows = nl.ndarray((n, c * s), dtype=nl.float32, buffer=nl.sbuf)
    group = max(1, PSUM_FREE // s)  # channels per PSUM bank
    for g0 in range(0, c, group):
        gc = min(group, c - g0)
        acc = nl.ndarray((n, gc * s), dtype=nl.float32, buffer=nl.psum)
        for k in range(s):
            part = flat[g0 : g0 + gc, k : k + (n - 1) * s + 1 : s]
            nisa.nc_transpose(part, dst=acc[:, k : k + (gc - 1) * s + 1 : s])
        engines.copy(acc, dst=rows[:, g0 * s : (g0 + gc) * s])
    nl.store(window, value=rows.unflatten_free((c, s)))
    return True
