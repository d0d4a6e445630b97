"""Tensors indexed with runtime values: indirect DMA (gather/scatter of HBM rows) and dynamic on-chip offsets.

An index item whose value lives in SBUF is *dynamic*: a tile of indices
(`data[idx_tile, i_f]`, `data[idx_tile[i_p, 0], i_f]`), a one-element tile
plus an optional `nl.arange` term (`src[ix, offsets[0, i] + iy]`), or
`nl.ds(tile, size)`. Indexing with one gives an `IndirectView` (not a tile:
what cannot take one refuses it by name) that `nl.load`, `nl.store`,
`nisa.dma_copy`, `nl.atomic_rmw` and `nisa.tensor_copy_dynamic_src/dst`
lower to one instruction with the offsets as an extra input (semantics:
`nprof.arch.isa`, "Runtime addresses"; numerics: `nprof.device.indirect`).

Rules, as AWS's NKI API reference and error catalogue state them (a
KernelError at the kernel's line otherwise):

* A tile of indices ([P, 1], one per partition: "vector") addresses HBM only,
  on the axis that becomes the access's partition axis
  (err_indirect_indices_free_dim); one-element offsets ("scalar") address HBM
  or a free axis of an on-chip tile, never its partition axis.
* Indices are integers in SBUF; one runtime index per access.
* A runtime-indexed view cannot be copied by assignment
  (err_copy_dynamic_indirect_indices_not_natively_supported: use
  `nisa.tensor_copy_dynamic_src/dst`), transposed by `nl.load_transpose2d` /
  `nisa.dma_transpose` (err_indirect_indices_are_not_supported_with_nki_api)
  or used as a compute operand.

Dependencies: an indirect access may touch any element of the tensor it
indexes, so the instruction reads (or writes) all of it for ordering.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from nprof.arch.isa import Engine, Opcode, Space, attrs
from nprof.nki import trace
from nprof.nki.index import IndexExpr
from nprof.nki.indirection import ViewAttributes
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, partition_first

_INT = ("int32", "uint32", "int16", "uint16", "int8", "uint8")


class DynIndex:
    """An index item read at run time: `tile` (SBUF integers) plus an optional static `expr` (nl.arange terms)."""

    __slots__ = ("expr", "tile")

    def __init__(self, tile: NkiTensor, expr: IndexExpr | None = None) -> None:
        self.tile, self.expr = tile, expr

    def __add__(self, other: Any) -> DynIndex:
        if isinstance(other, IndexExpr | int):
            return DynIndex(self.tile, other + self.expr if self.expr is not None else _expr(other))
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any) -> DynIndex:
        if isinstance(other, IndexExpr | int):
            return self + (-other)
        return NotImplemented

    def __bool__(self) -> bool:
        raise kernel_error("a runtime index has no truth value at trace time")


@dataclass(frozen=True)
class DynSlice:
    """`nl.ds(start, size)` with a runtime `start` (a one-element SBUF tile)."""

    tile: NkiTensor
    size: int


def _expr(value: IndexExpr | int) -> IndexExpr:
    return value if isinstance(value, IndexExpr) else IndexExpr(0, int(value), ())


def is_dynamic(item: Any) -> bool:
    """Is `item` (one entry of an index tuple) read at run time?"""
    return isinstance(item, NkiTensor | DynIndex | DynSlice)


@dataclass(frozen=True, eq=False)
class IndirectView(ViewAttributes):
    """A tensor indexed with runtime values (see module doc). `view` is the access pattern with the dynamic axis
    at its static part; the runtime value moves it by `stride` elements per unit on an axis of extent `size`."""

    view: NkiTensor
    index: NkiTensor  # SBUF integers: [P, 1] (vector) or one element (scalar)
    cover: NkiTensor  # the tensor that was indexed: every element the offsets may reach (dependencies)
    axis: int
    stride: int
    size: int
    lo: int  # static coordinates the pattern adds on the dynamic axis
    hi: int

    @property
    def vector(self) -> bool:
        return math.prod(self.index.shape) > 1

    @property
    def shape(self) -> tuple[int, ...]:
        return self.view.shape

    @property
    def ndim(self) -> int:
        return self.view.ndim

    @property
    def is_hbm(self) -> bool:
        return self.view.is_hbm

    def __repr__(self) -> str:
        return f"IndirectView({self.view!r}, index={self.index!r})"

    def restrict(self, box: list[tuple[int, int]] | None) -> IndirectView:
        """Narrowed to a mask's box; a vector index is narrowed along the partition axis with it."""
        if box is None:
            return self
        index = self.index
        if self.vector:
            index = index.restrict([box[0]] + [(0, s) for s in index.shape[1:]])
        return replace(self, view=self.view.restrict(box), index=index)

    def __getitem__(self, items: Any) -> Any:
        raise kernel_error("a view indexed with runtime values cannot be indexed again; index the tensor once")

    def __setitem__(self, items: Any, value: Any) -> None:
        raise kernel_error("a view indexed with runtime values cannot be indexed again; index the tensor once")

    def assign_into(self, view: Any) -> None:
        """`tile[...] = t[runtime index]`: refused as NKI does."""
        if self.is_hbm or getattr(view, "is_hbm", False):
            raise kernel_error("load a runtime-indexed HBM view with nl.load(...) or nisa.dma_copy(dst=, src=)")
        raise kernel_error(
            "copying a tile indexed with runtime values by assignment is not supported "
            "(NKI: err_copy_dynamic_indirect_indices_not_natively_supported); "
            "use nisa.tensor_copy_dynamic_src(src) / nisa.tensor_copy_dynamic_dst(dst=, src=)"
        )

    def assign_from(self, value: Any) -> None:
        """`t[runtime index] = value`: an indirect store for HBM, refused on chip (use tensor_copy_dynamic_dst)."""
        if self.is_hbm:
            from nprof.nki import language

            language.store(self, value)
            return
        raise kernel_error(
            "writing a tile at runtime offsets by assignment is not supported "
            "(NKI: err_copy_dynamic_indirect_indices_not_natively_supported); use nisa.tensor_copy_dynamic_dst"
        )

    def dyn_attrs(self, side: str) -> dict[str, Any]:
        return {"indirect": side, "dyn_stride": self.stride, "dyn_size": self.size, "dyn_lo": self.lo,
                "dyn_hi": self.hi, "dyn_axis": self.axis}  # fmt: skip


def index_dynamic(t: NkiTensor, items: tuple[Any, ...]) -> IndirectView:
    """`t[items]` where exactly one item is read at run time (see module doc)."""
    dyn = [k for k, item in enumerate(items) if is_dynamic(item)]
    if len(dyn) != 1:
        raise kernel_error(f"one runtime index per access, got {len(dyn)}; index with one tile of indices")
    if any(item is None for item in items):
        raise kernel_error("cannot mix None (new axis) with a runtime index")
    (k,) = dyn
    item = items[k]
    if isinstance(item, NkiTensor):
        item = DynIndex(item)
    idx = index_tile(item.tile)
    vector = math.prod(idx.shape) > 1
    if isinstance(item, DynSlice):
        placeholder: Any = slice(0, item.size)
        lo, hi = 0, item.size - 1
    else:
        lo, hi = item.expr.bounds() if item.expr is not None else (0, 0)
        placeholder = item.expr if item.expr is not None else 0
    if vector:
        items = _slices_as_aranges(t, items)
        placeholder = _vector_placeholder(t, idx, item, items)
    ps, es, size = t._dims[k]
    if not t.is_hbm and ps:
        raise kernel_error(
            f"the partition axis of tile {t.name!r} cannot take a runtime index; index a free axis "
            "(on chip the offsets move the access within each partition)"
        )
    view = t.index((*items[:k], placeholder, *items[k + 1 :]))
    if vector and view.ndim and view.shape[0] != idx.shape[0]:
        raise kernel_error("a tile of indices must index the axis that becomes the partition axis of the access "
                           "(NKI: err_indirect_indices_free_dim)")  # fmt: skip
    return IndirectView(view, idx, t, k, es, size, lo, hi)


def index_tile(tile: Any) -> NkiTensor:
    """Check a runtime index tile: SBUF integers, one per partition ([P, 1]) or a single value."""
    if not isinstance(tile, NkiTensor):
        raise kernel_error(f"runtime indices are an SBUF tile of integers, got {type(tile).__name__}")
    if tile.space is not Space.SBUF:
        raise kernel_error(f"runtime indices must be in SBUF (nl.load them first), got {tile.name!r} in {tile.space}")
    if tile.dtype_name not in _INT:
        raise kernel_error(f"runtime indices must be integers (nl.int32 / nl.uint32), got {tile.dtype_name}")
    if math.prod(tile.shape[1:]) != 1:
        raise kernel_error(
            f"a tile of indices gives one index per partition ([P, 1]), got {tile.shape}; "
            "dynamic indexing only supports the partition axis (NKI: err_indirect_indices_free_dim)"
        )
    builder = trace.current()
    if builder.is_pending(tile):
        builder.flush()
    return tile


def _slices_as_aranges(t: NkiTensor, items: tuple[Any, ...]) -> tuple[Any, ...]:
    """`data[idx_tile, 0:F]`: with a tile of indices on the partition axis, each slice becomes its own free axis
    (when no other item is an nl.arange expression: NKI does not mix the two)."""
    slices = [k for k, item in enumerate(items) if isinstance(item, slice)]
    if not slices or any(isinstance(item, IndexExpr) for item in items):
        return items
    ndim = 1 + len(slices)
    out = list(items)
    for j, k in enumerate(slices, start=1):
        r = range(*items[k].indices(t._dims[k][2]))
        if not len(r):
            raise kernel_error(f"slice {items[k]} of axis {k} of {t.name!r} is empty")
        out[k] = IndexExpr(ndim, r.start, ((j, r.step, len(r)),))
    return tuple(out)


def _vector_placeholder(t: NkiTensor, idx: NkiTensor, item: Any, items: tuple[Any, ...]) -> IndexExpr:
    """The static stand-in for a tile of P indices: an index expression of size P on the partition axis."""
    if not t.is_hbm:
        raise kernel_error(
            "a tile of indices addresses HBM rows (nl.load / nl.store / nisa.dma_copy); on chip use one runtime "
            "offset (nisa.tensor_copy_dynamic_src/dst), nl.gather_flattened or nisa.local_gather"
        )
    if isinstance(item, DynSlice):
        raise kernel_error("nl.ds takes a single runtime start, not a tile of indices")
    if any(isinstance(i, slice) for i in items):
        raise kernel_error(
            "index the other axes with nl.arange when one axis takes a tile of indices "
            "(NKI does not mix basic and advanced indexing)"
        )
    ndim = max([2] + [i.ndim for i in items if isinstance(i, IndexExpr)])
    base = IndexExpr(ndim, 0, ((0, 0, idx.shape[0]),))
    return base + item.expr if item.expr is not None else base


# -- lowering ---------------------------------------------------------------------------------------
def _cover(t: NkiTensor) -> Any:
    return partition_first([t])[0].access()


def emit_dma(dst: Any, src: Any, *, oob: str = "error", rmw: str | None = None, source: str | None = None) -> None:
    """One DMA between `dst` and `src`, one of them (or neither, with `rmw`) runtime-indexed."""
    builder = trace.current()
    if isinstance(dst, IndirectView) and isinstance(src, IndirectView):
        raise kernel_error("a DMA takes runtime indices on one side only; stage through an SBUF tile")
    iv = dst if isinstance(dst, IndirectView) else src if isinstance(src, IndirectView) else None
    d = dst.view if isinstance(dst, IndirectView) else dst
    s = src.view if isinstance(src, IndirectView) else src
    if d.empty or s.empty:
        return
    if iv is not None and iv.vector and not iv.is_hbm:
        raise kernel_error("a tile of indices addresses HBM rows; on chip use nisa.tensor_copy_dynamic_src/dst")
    out, inp = d.access(), s.access()
    if out.elements != inp.elements:
        raise kernel_error(f"DMA shapes differ: destination {d.shape} vs source {s.shape}")
    if iv is None:
        builder.emit(Engine.DMA, Opcode.DMA_DIRECT2D, (out,), (inp,), attrs(rmw=rmw), source=source)
        return
    side = "dst" if iv is dst else "src"
    cover = (_cover(iv.cover),)
    kw = iv.dyn_attrs(side)
    builder.emit(Engine.DMA, Opcode.DMA_DIRECT2D, (out,), (inp, iv.index.access()),
                 attrs(**kw, oob=oob if oob != "error" else None, rmw=rmw), source=source,
                 extra_reads=cover if side == "src" else (), extra_writes=cover if side == "dst" else ())  # fmt: skip


def emit_dynamic_copy(dst: Any, src: Any, engine: Engine, dtype_cast: bool = False, inline: bool = False) -> None:
    """One on-chip TENSOR_COPY with a runtime offset on `dst` or `src` (cost of a dynamic copy; `inline`: no
    time, the copy carries the addressing of a tensor-indirection operand, `arch.cost`)."""
    iv = dst if isinstance(dst, IndirectView) else src
    d = dst.view if isinstance(dst, IndirectView) else dst
    s = src.view if isinstance(src, IndirectView) else src
    if not isinstance(iv, IndirectView):
        trace.current().emit(engine, Opcode.TENSOR_COPY, (d.access(),), (s.access(),), attrs(dynamic=True))
        return
    if iv.is_hbm:
        raise kernel_error("tensor_copy_dynamic copies on chip; move runtime-indexed HBM data with nisa.dma_copy")
    if iv.vector:
        raise kernel_error("tensor_copy_dynamic takes one runtime offset (a one-element SBUF tile), not a tile "
                           "of indices; loop over the offsets, one copy each")  # fmt: skip
    if d.empty or s.empty:
        return
    views = partition_first([d, s])
    out, inp = views[0].access(), views[1].access()
    if out.elements != inp.elements:
        raise kernel_error(f"copy shapes differ: destination {d.shape} vs source {s.shape}")
    side = "dst" if iv is dst else "src"
    cover = (_cover(iv.cover),)
    trace.current().emit(engine, Opcode.TENSOR_COPY, (out,), (inp, iv.index.access()),
                         attrs(dynamic=True, inline=inline or None, **iv.dyn_attrs(side)),
                         extra_reads=cover if side == "src" else (),
                         extra_writes=cover if side == "dst" else ())  # fmt: skip
