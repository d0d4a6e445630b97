"""HBM windows for the lowering kernels: an ISA `Access` pattern on a Program tensor as an NKI tensor view.

Contract: inside a kernel traced by `nprof.nki.trace.ProgramBuilder.call`, `window(access)` is the
`NkiTensor` view of the HBM tensor `access.tensor` with exactly that pattern (partition dim first, any
strides, zero strides for broadcasts); `load(access, dtype=fp32)` DMAs it into a new SBUF tile of shape
``(partitions, *free sizes)`` with `nl.load` (fp32 unless asked: bf16 matmul operands stay bf16),
`store(access, tile)` DMAs a tile back with `nl.store`. A channel-major pattern of a small plane (1x1 both
ways, 2x2 loads) is moved batch-major, one DMA run per image, and turned on TensorE (`hbm_rows`). Under the
compiler's `FusingBuilder` an fp32 load of a pattern an earlier kernel stored or loaded returns the tile kept
in SBUF instead (see `nprof.compiler.fusion`).
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Access
from nprof.compiler.kernels import hbm_rows
from nprof.nki import language as nl
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor


def window(a: Access) -> NkiTensor:
    base = trace.current().tensors()[a.tensor]
    dims = ((0, a.partition_stride, a.partitions), *((0, stride, size) for stride, size in a.free))
    return NkiTensor(base, 0, a.offset, dims, ())


def load(a: Access, dtype: Any = nl.float32, strided: bool = False) -> NkiTensor:
    """The SBUF tile of `a`: kept in SBUF by an earlier kernel (`nprof.compiler.fusion`), else a new DMA;
    a non-fp32 `dtype` (bf16 matmul operands) is always a new DMA in that dtype. `strided`: the caller takes
    a strided view too (a broadcast operand read with zero strides from a kept tile: no element-wise DMA)."""
    builder = trace.current()
    lookup, remember = getattr(builder, "lookup", None), getattr(builder, "remember", None)
    if lookup is None or remember is None or dtype != nl.float32:
        return _dma_load(a, dtype)
    tile = lookup(a)
    if tile is None and strided and any(stride == 0 and size > 1 for stride, size in a.free):
        tile = lookup(a, contiguous=False)
    if tile is None and getattr(builder, "fusing", False):
        from nprof.compiler.regather import assemble, regather

        tile = regather(builder, a)  # held on other partitions of a kept tile: moved on TensorE
        if tile is None:
            tile = assemble(builder, a)  # in pieces (a concatenation's): copied side by side
        if tile is not None:
            remember(a, tile, stored=False)
    packed = getattr(builder, "packed_load", None)
    if tile is None and packed is not None:
        tile = packed(a)  # a member of the packed small inputs: its group's tile (`nprof.compiler.packing`)
    if tile is None:
        tile = _dma_load(a, nl.float32)
        builder.flush()  # commit the DMA into this tile before keeping it
        remember(a, tile, stored=False)
        note = getattr(builder, "note_load", None)
        if note is not None:
            note(a)  # its tiling, for the next kernel reading the tensor (`fusion.tiles_for`)
    return tile


def _dma_load(a: Access, dtype: Any) -> NkiTensor:
    """A new SBUF tile of `a` by DMA: a small plane's channels moved batch-major (`hbm_rows`), else directly."""
    rows = hbm_rows.plan(a, trace.current().preset, "load")
    if rows is not None:
        return hbm_rows.load(rows, window(rows.rows), dtype)
    return nl.load(window(a), dtype=dtype)


def store(a: Access, tile: NkiTensor, exact: bool = False) -> None:
    """DMA `tile` to `a`; under the fusion cache keep it as `a`'s content (`exact`: its values are 0/1, which
    any dtype holds exactly, so a non-fp32 `a` may be kept too)."""
    stage = getattr(trace.current(), "stage_output", None)
    if stage is None or not stage(a, tile):  # a small output may wait in SBUF for one DMA (compiler.packing)
        rows = hbm_rows.plan(a, trace.current().preset, "store")
        if rows is None or not hbm_rows.store(rows, tile, window(rows.rows)):
            nl.store(window(a), value=tile)
    remember = getattr(trace.current(), "remember", None)
    if remember is not None:
        remember(a, tile, exact=exact)


def flat(t: NkiTensor) -> NkiTensor:
    """A contiguous tile seen as [P, N]."""
    if t.ndim == 2:
        return t
    f = t.flatten_free()
    assert f is not None, "tiles allocated by the kernels are contiguous"
    return f
