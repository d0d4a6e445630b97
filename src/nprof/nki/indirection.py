"""Selection and tensor indirection of the newer NKI API: `t.select`, `t.vector_select`, `t.indirect`.

From AWS's newer NKI API reference (nki.language, `NkiTensor` methods):

* `t.select(dim, index)`: one element along `dim`, the dimension removed
  (`t[:, index, :]` for `dim=1`); `index` an int (static) or a one-element
  SBUF tensor read at run time (dynamic: not the partition dim of an on-chip
  tensor, one dynamic select per tensor). nprof builds exactly the view of
  the matching index expression (`nprof.nki.indirect` for runtime values).
* `t.vector_select(dim, vector_offset)`: per-partition indirect addressing of
  an HBM tensor: `dim` must be 0, `vector_offset` an SBUF [P, 1] integer tile;
  the result's dim 0 has P entries, partition p reading row `vector_offset[p]`
  (an indirect DMA when loaded).
* `t.indirect(index, num_elem=None)`: Tensor Indirection (NeuronCore-v4 and
  later): an operand of a compute instruction reading (gather) or writing
  (scatter) a column of `t` at runtime free-dim offsets across its
  partitions. Output shape (P, num_elem); offset i is
  `index[i % G, i // G]` ("snake pattern"), G = 16 for the Vector, Scalar and
  GpSimd engines and 32 for the Tensor engine; `index` is an SBUF tensor
  (P, K), P = t.shape[0]; `num_elem` defaults to `index.size`.

Model of `indirect` (stated): the instruction reading such an operand first
gathers its columns into a new SBUF tile, one dynamic copy per column (the
copy `nisa.tensor_copy_dynamic_src` emits, reading its offset from `index` at
run time), then reads that tile; an instruction writing one writes a new tile
that is then scattered, one dynamic copy per column. The values are exact,
including runtime offsets past the row (an IndexError, as for every runtime
index). The hardware indexes inside the one instruction (NKI Trainium3 guide,
"SBUF/PSUM indirect access"), so the copies are tagged `inline` and take no
time (`nprof.arch.cost`): the instruction is timed on its gathered operand,
plus one dependency latency after the copies. The base-partition rules the
reference gives for manually allocated operands are not checked.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nprof.arch.isa import Space
from nprof.nki import trace as _trace
from nprof.nki.source import kernel_error

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor

_INT = ("int32", "uint32", "int16", "uint16", "int8", "uint8")
GROUP = {"vector": 16, "tensor": 32}  # offsets per partition group of `index` (the reference's G)
USED = False  # an indirect view was made in this process (instruction calls look for them only then)


def select(t: NkiTensor, dim: int, index: Any) -> Any:
    """`t` with one element selected along `dim` (static int, or a one-element SBUF tensor read at run time)."""
    dim = _dim(t, dim, "select")
    from nprof.nki.tensor import NkiTensor

    if not isinstance(index, NkiTensor):
        index = int(index)
        if not 0 <= index < t.shape[dim]:
            raise kernel_error(f"select({dim}, {index}): index out of range for size {t.shape[dim]}")
    elif math.prod(index.shape) != 1:
        raise kernel_error(f"select({dim}, index): a runtime index is a one-element SBUF tensor, got {index.shape}")
    elif dim == 0 and not t.is_hbm:
        raise kernel_error("select(0, runtime index) of an on-chip tensor: dynamic selection cannot address the "
                           "partition dim; select a free dim or use vector_select on an HBM tensor")  # fmt: skip
    return t.index((slice(None),) * dim + (index,))


def vector_select(t: NkiTensor, dim: int, vector_offset: Any) -> Any:
    """Per-partition rows of the HBM tensor `t` at the runtime offsets `vector_offset` ([P, 1] SBUF integers)."""
    from nprof.nki.tensor import NkiTensor

    if _dim(t, dim, "vector_select") != 0:
        raise kernel_error(f"vector_select(dim={dim}): dim must be 0 (NKI API reference)")
    if not t.is_hbm:
        raise kernel_error("vector_select applies to HBM tensors only (NKI API reference)")
    if not isinstance(vector_offset, NkiTensor) or vector_offset.is_hbm or vector_offset.ndim != 2 \
            or vector_offset.shape[1] != 1:  # fmt: skip
        raise kernel_error("vector_select: vector_offset must be an SBUF tile of shape (P, 1)")
    return t.index((vector_offset,) + (slice(None),) * (t.ndim - 1))


def _dim(t: NkiTensor, dim: Any, what: str) -> int:
    d = int(dim)
    if not 0 <= d < t.ndim:
        raise kernel_error(f"{what}(dim={dim}) is out of range for a tensor of rank {t.ndim}")
    return d


class ViewAttributes:
    """The element type, memory and name of a stand-in for the tensor `view` (a runtime-indexed or indirect view):
    read from `view`."""

    __slots__ = ()
    view: NkiTensor

    @property
    def dtype(self) -> Any:
        return self.view.dtype

    @property
    def dtype_name(self) -> str:
        return self.view.dtype_name

    @property
    def space(self) -> Space:
        return self.view.space

    @property
    def name(self) -> str:
        return self.view.name


class TensorIndirection(ViewAttributes):
    """`t.indirect(index, num_elem)`: the columns of tile `t` at runtime offsets (see module doc). Not a tile:
    compute instructions gather it on reading and scatter into it on writing."""

    __slots__ = ("index", "num_elem", "view")

    def __init__(self, view: NkiTensor, index: NkiTensor, num_elem: int) -> None:
        self.view, self.index, self.num_elem = view, index, num_elem

    @property
    def shape(self) -> tuple[int, int]:
        return (self.view.shape[0], self.num_elem)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def is_hbm(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TensorIndirection({self.view!r}, index={self.index.name}, num_elem={self.num_elem})"

    def __setitem__(self, items: Any, value: Any) -> None:
        """`t.indirect(idx)[...] = value`: scatter `value` ([P, num_elem]) into the columns."""
        if items is not Ellipsis and items != slice(None) and items != (slice(None), slice(None)):
            raise kernel_error("an indirect view is written whole: use view[...] = value")
        from nprof.nki import compute as _c

        x = _c.tile(value, "value")
        if x.shape != self.shape:
            raise kernel_error(f"cannot write shape {x.shape} through an indirect view of shape {self.shape}")
        self.scatter(x, GROUP["vector"])

    def _offset(self, i: int, group: int) -> NkiTensor:
        """The one-element view of `index` holding offset `i` (the snake pattern)."""
        p, k = i % group, i // group
        return self.index[p : p + 1, k : k + 1]

    def _check(self, group: int) -> None:
        parts, cols = self.index.shape
        if self.num_elem > group * cols or min(self.num_elem, group) > parts:
            raise kernel_error(
                f"indirect(index {self.index.shape}, num_elem={self.num_elem}): offset i is index[i % {group}, "
                f"i // {group}] on this engine, so at most {group * cols} offsets fit; pass num_elem <= "
                f"{min(group * cols, parts * cols)}"
            )

    def gathered(self, group: int) -> NkiTensor:
        """A new SBUF tile [P, num_elem] holding the columns (one dynamic copy per column, see module doc)."""
        from nprof.nki import compute as _c
        from nprof.nki.indirect import DynSlice, emit_dynamic_copy, index_dynamic
        from nprof.nki.indirect_ops import copy_engine

        self._check(group)
        res = _c.new_tile(self.shape, self.dtype_name)
        for i in range(self.num_elem):
            src = index_dynamic(self.view, (slice(None), DynSlice(self._offset(i, group), 1)))
            col = res[:, i : i + 1]
            emit_dynamic_copy(col, src, copy_engine(None, col, self.view), inline=True)
        return res

    def scatter(self, value: NkiTensor, group: int) -> None:
        """Write `value` [P, num_elem] into the columns (one dynamic copy per column)."""
        from nprof.nki.indirect import DynSlice, emit_dynamic_copy, index_dynamic
        from nprof.nki.indirect_ops import copy_engine

        self._check(group)
        for i in range(self.num_elem):
            dst = index_dynamic(self.view, (slice(None), DynSlice(self._offset(i, group), 1)))
            col = value[:, i : i + 1]
            emit_dynamic_copy(dst, col, copy_engine(None, col, self.view), inline=True)


def indirect(t: NkiTensor, index: Any, num_elem: int | None = None) -> TensorIndirection:
    """`t.indirect(index, num_elem)` (see module doc): checked here, resolved by the instruction using it."""
    from nprof.nki.tensor import NkiTensor

    preset = _trace.current().preset
    if preset.core in ("NeuronCore-v2", "NeuronCore-v3"):
        raise kernel_error(f"tensor indirection (.indirect) needs NeuronCore-v4 or later; this kernel targets "
                           f"{preset.core}: trace it for trn3")  # fmt: skip
    if t.is_hbm or t.ndim != 2:
        raise kernel_error(f"indirect applies to a 2-D SBUF/PSUM tile, got {t.name!r} of shape {t.shape}")
    if not isinstance(index, NkiTensor) or index.space is not Space.SBUF or index.ndim != 2:
        raise kernel_error("indirect: index must be a 2-D SBUF tensor (P, K) of free-dim offsets")
    if index.dtype_name not in _INT:
        raise kernel_error(f"indirect: index must hold integers, got {index.dtype_name}")
    if index.shape[0] != t.shape[0]:
        raise kernel_error(f"indirect: index has {index.shape[0]} partitions, the tile {t.shape[0]} (P must match)")
    n = math.prod(index.shape) if num_elem is None else int(num_elem)
    if n < 1:
        raise kernel_error(f"indirect: num_elem must be positive, got {num_elem}")
    global USED
    USED = True
    return TensorIndirection(t, index, n)


def is_indirect(x: Any) -> bool:
    """Is `x` an indirect view (`t.indirect(index)`)?"""
    return USED and isinstance(x, TensorIndirection)


def resolve(args: tuple[Any, ...], kwargs: dict[str, Any], group: int) -> tuple[tuple[Any, ...], dict[str, Any],
                                                                               TensorIndirection | None]:  # fmt: skip
    """The arguments of an instruction call with indirect operands gathered into tiles and an indirect `dst`
    replaced by a new tile; that `dst` is returned to be scattered after the call (None when there is none)."""
    from nprof.nki import compute as _c

    scatter = kwargs.get("dst")
    if isinstance(scatter, TensorIndirection):
        kwargs = {**kwargs, "dst": _c.new_tile(scatter.shape, scatter.dtype_name, scatter.space)}
    else:
        scatter = None
    args = tuple(a.gathered(group) if isinstance(a, TensorIndirection) else a for a in args)
    kwargs = {k: v.gathered(group) if isinstance(v, TensorIndirection) else v for k, v in kwargs.items()}
    return args, kwargs, scatter
