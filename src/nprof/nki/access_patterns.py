"""`tensor.ap(pattern, offset=, dtype=)`: an explicit access pattern over a tensor's storage (NKI's `NkiTensor.ap`).

AWS's API reference (`nki.language.NkiTensor.ap`, NKI 0.3.0 API in the
aws-neuron-sdk docs) describes it as the escape hatch replacing shape and strides
with `[[stride, count], ...]` pairs addressing the underlying storage, like
`torch.as_strided`; `offset` (elements) is added to the view's own storage offset
(None: that offset unchanged); `dtype` reinterprets the storage first. The pairs
are outermost first, the last one the fastest-moving.

Storage is counted in elements of the (reinterpreted) dtype:
* HBM: the flat, row-major tensor. Reinterpreting needs the same item size
  (as `view`, `nprof.nki.dtype_views`).
* SBUF/PSUM: the tile read row-major as [partitions, elements per partition],
  so the first pair's stride is a whole number of partitions (`F` elements step
  one partition, as AWS's `sb.ap(pattern=[[32, 128], [1, 32]])` for a
  [128, 32] tile) and the other pairs stay inside one partition. The view must
  step one partition at a time (an engine operand reads consecutive partitions).

Everything is checked here, once: a pattern reaching outside the tensor is a
KernelError naming the extent.

Runtime offsets (AWS's API reference: `NkiTensor.ap`, and "Indirect addressing"
of `nki.isa.dma_copy`): `indirect_dim` names a dimension of the tensor `.ap` is
called on; its stride (elements) scales the offset. Mutually exclusive:
* `scalar_offset`: a one-element SBUF integer tile (or a trace-time int, which
  is just a static shift) read when the instruction runs; the whole pattern
  moves by value x stride. HBM, or a free dimension of an on-chip tile.
* `vector_offset`: an SBUF integer tile [P, 1], HBM tensors only; the first
  pair is the partition pair [stride, P]: partition p reads from
  index[p] x stride onward (so the pair's stride must be the dimension's), the
  other pairs as given — the gather `out[p] = data[idx[p]]` of AWS's example.
The result is a runtime-indexed view (`nprof.nki.indirect.IndirectView`) that
`nisa.dma_copy` (and the other calls taking runtime indices) lowers to one
instruction; an index moving the access outside the tensor is an error when it
runs (or skipped with `oob_mode=nisa.oob_mode.skip`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nprof.arch.isa import ITEMSIZE
from nprof.nki.dtype_views import original, view_as
from nprof.nki.source import kernel_error

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor


def access_pattern(t: NkiTensor, pattern: Any, offset: int | None = None, scalar_offset: Any = None,
                   vector_offset: Any = None, indirect_dim: int = 0, dtype: Any = None) -> Any:  # fmt: skip
    """`t.ap(...)` (see module doc): an NkiTensor, or an IndirectView with a runtime offset."""
    if scalar_offset is not None and vector_offset is not None:
        raise kernel_error("ap: scalar_offset and vector_offset are mutually exclusive; pass one")
    pairs = _pairs(pattern)
    if dtype is not None:
        t = view_as(t, dtype) if t.is_hbm else _whole_as(t, dtype)
    start = _storage_offset(t) + int(offset or 0)
    if isinstance(scalar_offset, int) and not isinstance(scalar_offset, bool):  # known at trace time: static
        start += scalar_offset * _dim_stride(t, indirect_dim)
        scalar_offset = None
    if vector_offset is not None:
        return _vector(t, pairs, start, vector_offset, indirect_dim)
    view = _static(t, pairs, start)
    if scalar_offset is None:
        return view
    from nprof.nki.indirect import DynIndex, index_tile

    if isinstance(scalar_offset, DynIndex):
        raise kernel_error("ap(scalar_offset=) takes a one-element SBUF tile of the offset, not an expression")
    idx = index_tile(scalar_offset)
    if math.prod(idx.shape) != 1:
        raise kernel_error(f"ap(scalar_offset=) takes a one-element SBUF tile, got {idx.shape}; a tile of one "
                           "offset per partition is vector_offset=")  # fmt: skip
    return _runtime(t, view, pairs, start, idx, indirect_dim)


def _static(t: NkiTensor, pairs: list[tuple[int, int]], start: int) -> NkiTensor:
    """The pattern as a plain view of `t`'s storage from element `start`."""
    from nprof.nki.tensor import NkiTensor

    base = t.base
    if t.is_hbm:
        _check_extent(start, pairs, math.prod(base.shape), base.name)  # (same item size as declared: view_as)
        return NkiTensor(base, 0, start, tuple((0, s, n) for s, n in pairs), ())
    tile = original(base)
    row = _row_elements(tile, base.dtype)
    p0, e0 = divmod(start, row)
    (pstride, parts), *free = pairs
    if pstride % row or (parts > 1 and pstride != row):
        raise kernel_error(f"ap on tile {tile.name!r}: the first pair [{pstride}, {parts}] must step one "
                           f"partition ({row} elements) at a time")  # fmt: skip
    if p0 + parts > _partitions(tile):
        raise kernel_error(f"ap on tile {tile.name!r}: partitions {p0}..{p0 + parts - 1} are outside its "
                           f"{_partitions(tile)}")  # fmt: skip
    _check_extent(e0, free, row, tile.name)
    if any(s >= row for s, n in free if n > 1):
        raise kernel_error(f"ap on tile {tile.name!r}: a free-axis stride must stay inside one partition ({row})")
    return NkiTensor(base, p0, e0, ((1, 0, parts), *((0, s, n) for s, n in free)), ())


def _vector(t: NkiTensor, pairs: list[tuple[int, int]], start: int, index: Any, dim: int) -> Any:
    """`t.ap(pattern, vector_offset=index, indirect_dim=dim)`: partition p from index[p] x stride (module doc)."""
    from nprof.nki.indirect import index_tile
    from nprof.nki.tensor import NkiTensor

    if not t.is_hbm:
        raise kernel_error(f"ap(vector_offset=) indexes HBM tensors only (one row per partition), not the tile "
                           f"{t.name!r}; on chip use scalar_offset= or nisa.local_gather")  # fmt: skip
    idx = index_tile(index)
    stride = _dim_stride(t, dim)
    (pstride, parts), *inner = pairs
    if parts != idx.shape[0] or pstride != stride:
        raise kernel_error(f"ap(vector_offset=) with {idx.shape[0]} offsets: the first pair must be "
                           f"[{stride}, {idx.shape[0]}] (dimension {dim}'s stride, one per offset), "
                           f"got [{pstride}, {parts}]")  # fmt: skip
    view = NkiTensor(t.base, 0, start, ((0, 0, parts), *((0, s, n) for s, n in inner)), ())
    _check_extent(start, inner, math.prod(t.base.shape), t.base.name)
    return _runtime(t, view, inner, start, idx, dim)


def _runtime(t: NkiTensor, view: NkiTensor, pairs: list[tuple[int, int]], start: int, idx: NkiTensor,
             dim: int) -> Any:  # fmt: skip
    """The IndirectView moving `view` by the runtime offset x dimension `dim`'s stride. Its bounds (`lo`, `hi`,
    `size`) say which offsets keep the pattern (`pairs` from element `start`) inside the tensor's storage."""
    from nprof.nki.indirect import IndirectView

    stride = _dim_stride(t, dim)
    if t.is_hbm:
        first, total = start, math.prod(t.base.shape)
    else:  # within each partition: the free pairs only
        row = _row_elements(original(t.base), t.dtype_name)
        first, total, pairs = start % row, row, pairs[1:]
    last = first + sum(s * (n - 1) for s, n in pairs)
    lo, hi = first // stride, last // stride
    size = hi + (total - 1 - last) // stride + 1
    return IndirectView(view, idx, t, dim, stride, size, lo, hi)


def _dim_stride(t: NkiTensor, dim: int) -> int:
    """Elements between consecutive indices of dimension `dim` of `t` (a free dimension on chip)."""
    if not 0 <= int(dim) < t.ndim:
        raise kernel_error(f"ap: indirect_dim {dim} is not a dimension of {t.name!r} {t.shape}")
    ps, es, _ = t._dims[int(dim)]
    if ps and not t.is_hbm:
        raise kernel_error(f"ap: indirect_dim {dim} is the partition axis of tile {t.name!r}; a runtime offset "
                           "moves an on-chip access within each partition (index a free dimension)")  # fmt: skip
    if es <= 0:
        raise kernel_error(f"ap: dimension {dim} of {t.name!r} has no stride to scale a runtime offset")
    return int(es)


def _pairs(pattern: Any) -> list[tuple[int, int]]:
    try:
        pairs = [(int(s), int(n)) for s, n in pattern]
    except (TypeError, ValueError):
        raise kernel_error(f"ap: pattern must be a list of [stride, count] pairs, got {pattern!r}") from None
    if not pairs or any(n < 1 or s < 0 for s, n in pairs):
        raise kernel_error(f"ap: pattern needs at least one pair, counts >= 1 and strides >= 0, got {pattern!r}")
    return pairs


def _check_extent(start: int, pairs: list[tuple[int, int]], size: int, name: str) -> None:
    last = start + sum(s * (n - 1) for s, n in pairs)
    if start < 0 or last >= size:
        raise kernel_error(f"ap on {name!r}: elements {start}..{last} are outside its {size}")


def _whole_as(t: NkiTensor, dtype: Any) -> NkiTensor:
    """Tile view `t` reinterpreted as `dtype` as a whole tile, at `t`'s storage offset (in the new items)."""
    from nprof.nki.tensor import NkiTensor

    tile = original(t.base)
    whole = view_as(NkiTensor.root(tile), dtype)
    byte = t._p0 * _row_elements(tile, tile.dtype) * ITEMSIZE[tile.dtype] + t._e0 * ITEMSIZE[t.dtype_name]
    item = ITEMSIZE[whole.dtype_name]
    if byte % item:
        raise kernel_error(f"ap(dtype=) on {tile.name!r}: the view starts inside an item of {item} bytes")
    row = _row_elements(tile, whole.dtype_name)
    p0, e0 = divmod(byte // item, row)
    return NkiTensor(whole.base, p0, e0, whole._dims, ())


def _storage_offset(t: NkiTensor) -> int:
    if t.is_hbm:
        return t._e0
    return t._p0 * _row_elements(original(t.base), t.dtype_name) + t._e0


def _row_elements(tile: Any, dtype: str) -> int:
    """Elements of `dtype` in one partition of `tile` (a plain [P, F...] tile)."""
    if tile.partition_axis != 0:
        raise kernel_error(f"ap on tile {tile.name!r}: tiles with block axes before the partition axis are not "
                           "supported; index a block first")  # fmt: skip
    return math.prod(tile.shape[1:]) * ITEMSIZE[tile.dtype] // ITEMSIZE[dtype]


def _partitions(tile: Any) -> int:
    return int(tile.shape[0]) if tile.shape else 1
