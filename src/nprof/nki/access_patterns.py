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
KernelError naming the extent. `scalar_offset` / `vector_offset` /
`indirect_dim` (tensor indirection, NeuronCore-v4) are refused by name.
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
                   vector_offset: Any = None, indirect_dim: int = 0, dtype: Any = None) -> NkiTensor:  # fmt: skip
    """`t.ap(...)` (see module doc)."""
    from nprof.nki.tensor import NkiTensor

    if scalar_offset is not None or vector_offset is not None or indirect_dim:
        raise kernel_error("ap(scalar_offset=/vector_offset=/indirect_dim=): tensor indirection is not supported "
                           "by nprof; index with a runtime value (nl.ds(reg, n)) instead")  # fmt: skip
    pairs = _pairs(pattern)
    if dtype is not None:
        t = view_as(t, dtype) if t.is_hbm else _whole_as(t, dtype)
    base = t.base
    start = _storage_offset(t) + int(offset or 0)
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
