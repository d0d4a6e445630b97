"""`tensor.view(dtype)`: a tensor's bytes reinterpreted as another dtype, no copy (NKI's `NkiTensor.view`).

AWS's API reference (`nki.language.NkiTensor.view`, the NKI 0.3.0 API of the
aws-neuron-sdk docs) defines it like `numpy.ndarray.view(dtype)`: the last
dimension's size scales by the ratio of item sizes (fp32 [128, 64] viewed as
uint8 is [128, 256]; uint8 [128, 256] viewed as fp32 is [128, 64]); the last
dimension must be contiguous, and a contraction needs a last-dim size divisible
by the ratio.

* On chip (SBUF/PSUM): any item sizes. The view's base is a `DtypeAlias` of
  the tile: the same memory, lifetime and dependencies (SBUF/PSUM are
  byte-addressed in the device model, `nprof.device.memory`), read and written
  in the new dtype. A tile with block axes before the partition axis keeps its
  blocks where they are (the block stride is the same bytes, counted in the new
  items), whether placed whole, block by block (`nprof.nki.blocks`) or by
  direct allocation.
* HBM: the same item size (a different one raises KernelError: view the
  on-chip tile after loading it instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nprof.arch.isa import ITEMSIZE
from nprof.nki.dtypes import dtype_name
from nprof.nki.source import kernel_error
from nprof.nki.tensor import HbmBase, OnChip

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor

_OWN = frozenset({"_target", "dtype", "shape"})


class DtypeAlias(OnChip):
    """An on-chip tile seen in another dtype: every attribute but `dtype`/`shape` is the tile's own (reads and
    writes go to the tile, so allocation, lifetime and release stay the tile's)."""

    def __init__(self, target: OnChip, dtype: str, shape: tuple[int, ...]) -> None:  # no dataclass __init__
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", shape)

    def __getattribute__(self, name: str) -> Any:
        if name in _OWN or name.startswith("__"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_target"), name, value)


def original(base: Any) -> Any:
    """The tile behind a `DtypeAlias` (anything else unchanged)."""
    return object.__getattribute__(base, "_target") if isinstance(base, DtypeAlias) else base


def view_as(t: NkiTensor, dtype: Any) -> NkiTensor:
    """`t`'s bytes as `dtype` (see module doc); KernelError where the reinterpretation is not defined."""
    from nprof.nki.tensor import NkiTensor

    try:
        new = dtype_name(dtype)
    except ValueError as err:
        raise kernel_error(str(err)) from None
    base = t.base
    old = base.dtype
    if new == old:
        return t
    if isinstance(base, HbmBase):
        if ITEMSIZE[old] != ITEMSIZE[new]:
            raise kernel_error(f"view({new}) of the {old} HBM tensor {base.name!r}: nprof reinterprets HBM tensors "
                               "at the same item size only; load the tile and view it on chip")  # fmt: skip
        alias = HbmBase(base.name, base.shape, new, base.kind, base.builder)
        return NkiTensor(alias, t._p0, t._e0, t._dims, t._checks)
    tile = original(base)
    if tile.byte_offset < 0:  # a lazily placed result: placed now (the alias never allocates)
        tile.builder.flush()
        tile.builder.materialize(tile)
    if ITEMSIZE[old] == ITEMSIZE[new]:  # the same elements, read as another type: any layout
        same = tile if new == tile.dtype else DtypeAlias(tile, new, tile.shape)
        return NkiTensor(same, t._p0, t._e0, t._dims, t._checks)
    if t.ndim == 1:  # a [P] tile: its one free element is the last axis
        t = t.pad_free(2)
    e0, dims = _rescale(t, ITEMSIZE[old], ITEMSIZE[new])
    row = tile.shape[-1] * ITEMSIZE[tile.dtype]
    root_shape = (*tile.shape[:-1], row // ITEMSIZE[new]) if row % ITEMSIZE[new] == 0 else tile.shape  # cosmetic
    seen = tile if new == tile.dtype else DtypeAlias(tile, new, root_shape)
    return NkiTensor(seen, t._p0, e0, dims, ())


def _rescale(t: NkiTensor, old: int, new: int) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """The element offset and dims of `t` counted in items of `new` bytes instead of `old` (see module doc)."""
    t.check_bounds()  # the view is whole: its index checks are settled here
    *outer, (lps, les, lsize) = t._dims
    if lps or (les != 1 and lsize > 1):
        raise kernel_error(f"view: the last axis of {t.name!r} {t.shape} must be contiguous to change the item "
                           "size; view a contiguous slice")  # fmt: skip
    if old > new:  # each element becomes old/new elements
        r = old // new
        return t._e0 * r, (*((ps, es * r, n) for ps, es, n in outer), (0, 1, lsize * r))
    r = new // old
    bad = lsize % r or t._e0 % r or any(es % r for _, es, _ in outer)
    if bad:
        raise kernel_error(f"view: {t.name!r} {t.shape} cannot be read as items of {new} bytes: the last axis "
                           f"({lsize}) and the offsets must be multiples of {r} elements")  # fmt: skip
    return t._e0 // r, (*((ps, es // r, n) for ps, es, n in outer), (0, 1, lsize // r))
