"""Tensor handles of the kernel language: HBM tensors and on-chip tiles, and views of them.

Every value a kernel touches is an `NkiTensor`: a strided view of one *base*
(an `HbmBase` declared in the Program, or an `OnChip` SBUF/PSUM allocation).
A view keeps, per logical dimension, a (partition step, element step, size)
triple, so indexing with integers, slices or `nl.arange` expressions composes
exactly into the ISA's `Access` patterns (indexing: `nprof.nki.view_index`;
shape-changing views: `nprof.nki.reshape`; operators: `nprof.nki.operators`). Bounds are checked when the view is
used (after `mask=` has narrowed it), so an out-of-bounds access fails with the
user's `file:line` instead of reading garbage.

SBUF/PSUM layout: an allocation of shape `(B..., par_dim(P), F...)` occupies
partitions `0..P-1` and, in each, `prod(B) * prod(F) * itemsize` bytes from its
byte offset; the partition axis must be the first axis of any view used as an
operand. Integer-indexing the partition axis keeps it as a size-1 axis.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Space
from nprof.nki.dtypes import NUMPY
from nprof.nki.operators import TileOperators
from nprof.nki.replay_guard import LOGGING, guard
from nprof.nki.reshape import ViewReshapes
from nprof.nki.source import kernel_error
from nprof.nki.view_index import ViewIndexing

if TYPE_CHECKING:
    from nprof.nki.trace import ProgramBuilder


@dataclass(eq=False)
class HbmBase:
    """An HBM tensor of the Program being built."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    builder: ProgramBuilder

    space = Space.HBM


@dataclass(eq=False)
class OnChip:
    """An SBUF or PSUM allocation; freed (region reusable) when no view refers to it, after its last use
    (lifetime planning, `nprof.nki.scopes`) or when its kernel returns."""

    space: Space
    name: str
    dtype: str
    shape: tuple[int, ...]
    partition_axis: int
    byte_offset: int
    bytes_per_partition: int
    builder: ProgramBuilder
    alive: bool = True
    seq: int = 0  # allocation number within its builder (lifetime planning)
    blocks: Any = None  # per-block placement (nprof.nki.blocks.Blocks) under lifetime planning
    born: int = 0  # instruction count when its memory was reserved (earlier writes there were other tiles')
    token: Any = field(default=None, repr=False)  # allocator bookkeeping (weakref.finalize)
    block_elems: int = 0  # PSUM: element stride between blocks (packed into banks); 0 = packed
    part0: int = 0  # first partition (direct allocation may place a tile at partition 32/64/96)


Dim = tuple[int, int, int]  # (partition step, element step, size)
_HBM = Space.HBM  # (a module constant: an enum member's attribute lookup is slow on the hot paths)
_SCALAR_DIMS: tuple[Dim, ...] = ((0, 1, 1),)  # the operand of a rank-0 view
_NO_FREE = ((1, 1),)
_SIZE = operator.itemgetter(2)  # a Dim's size  # the free pattern of an operand without free axes
Check = tuple[int, tuple[int, ...], int, str]  # 0 <= const + sum(coef_k * i_k) < size, else error naming label


class NkiTensor(ViewIndexing, ViewReshapes, TileOperators):
    """A view of an HBM tensor or an on-chip tile (see module doc)."""

    __slots__ = ("__weakref__", "_base", "_checks", "_dims", "_e0", "_p0")

    def __init__(self, base: HbmBase | OnChip, p0: int, e0: int, dims: tuple[Dim, ...], checks: tuple[Check, ...]):
        self._base = base
        self._p0 = p0
        self._e0 = e0
        self._dims = dims
        self._checks = checks

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def root(cls, base: HbmBase | OnChip) -> NkiTensor:
        shape = base.shape
        part = base.partition_axis if isinstance(base, OnChip) else -1
        dims: list[Dim] = [(0, 0, 0)] * len(shape)
        stride = 1
        for axis in reversed(range(len(shape))):
            if axis == part:
                dims[axis] = (1, 0, shape[axis])
                if isinstance(base, OnChip) and base.space is Space.PSUM and axis > 0:
                    stride = max(stride, _block_elems(base))  # blocks before the partition axis: bank-aligned
            else:
                dims[axis] = (0, stride, shape[axis])
                stride *= shape[axis]
        return cls(base, 0, 0, tuple(dims), ())

    # -- user-visible properties --------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(map(_SIZE, self._dims))  # (itemgetter: no Python-level call on this hot path)

    @property
    def ndim(self) -> int:
        return len(self._dims)

    @property
    def dtype(self) -> np.dtype:
        return NUMPY[self._base.dtype]

    @property
    def name(self) -> str:
        return self._base.name

    @property
    def buffer(self) -> str:
        return str(self._base.space)

    @property
    def space(self) -> Space:
        return self._base.space

    @property
    def dtype_name(self) -> str:
        return self._base.dtype

    @property
    def base(self) -> HbmBase | OnChip:
        return self._base

    @property
    def is_hbm(self) -> bool:
        return self._base.space is _HBM

    def __repr__(self) -> str:
        return f"NkiTensor({self._base.space}:{self._base.name}, shape={self.shape}, dtype={self._base.dtype})"

    def __iter__(self) -> Any:
        raise TypeError("NKI tensors are not iterable; index them with nl.arange or slices inside nl.affine_range")

    def __len__(self) -> int:
        return self.shape[0] if self._dims else 1

    def view(self, dtype: Any) -> NkiTensor:
        """This tensor's bytes reinterpreted as `dtype`, no copy (AWS `NkiTensor.view`; `nprof.nki.dtype_views`)."""
        from nprof.nki.dtype_views import view_as

        return view_as(self, dtype)

    def select(self, dim: int, index: Any) -> Any:
        """One element along `dim`, the dim removed; `index` an int or a one-element SBUF tensor read at run time
        (newer NKI API; `nprof.nki.indirection`)."""
        from nprof.nki.indirection import select

        return select(self, dim, index)

    def vector_select(self, dim: int, vector_offset: Any) -> Any:
        """Rows of this HBM tensor at per-partition runtime offsets (newer NKI API; `nprof.nki.indirection`)."""
        from nprof.nki.indirection import vector_select

        return vector_select(self, dim, vector_offset)

    def indirect(self, index: Any, num_elem: int | None = None) -> Any:
        """Tensor indirection: the columns of this tile at the runtime offsets in `index`, an operand of a compute
        instruction (NeuronCore-v4; `nprof.nki.indirection`)."""
        from nprof.nki.indirection import indirect

        return indirect(self, index, num_elem)

    def ap(self, pattern: Any, offset: int | None = None, scalar_offset: Any = None, vector_offset: Any = None,
           indirect_dim: int = 0, dtype: Any = None) -> NkiTensor:  # fmt: skip
        """An explicit [[stride, count], ...] access pattern over this tensor's storage (AWS `NkiTensor.ap`;
        `nprof.nki.access_patterns`)."""
        from nprof.nki.access_patterns import access_pattern

        return access_pattern(self, pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)

    def reshape(self, shape: tuple[int, ...] | list[int]) -> NkiTensor:
        """A new-shape view of a whole, contiguous HBM tensor (same element count); of an on-chip tile, its free
        axes regrouped (the partition axis kept, free axes contiguous)."""
        shape = tuple(int(s) for s in shape)
        if not self.is_hbm:
            flat = self.flatten_free() if self.ndim >= 1 and self._dims[0][0] == 1 and shape[:1] == self.shape[:1] \
                else None  # fmt: skip
            if flat is None or math.prod(shape) != math.prod(self.shape):
                raise kernel_error(f"cannot reshape tile {self.name!r} {self.shape} into {shape}: a tile keeps its "
                                   "partition axis first and regroups contiguous free axes only")  # fmt: skip
            return flat.unflatten_free(shape[1:]) if len(shape) > 1 else flat
        if self._p0 or self._e0 or self._checks or self.shape != self._base.shape:
            raise kernel_error("reshape is supported on whole HBM tensors only")
        if math.prod(shape) != math.prod(self.shape):
            raise kernel_error(f"cannot reshape {self.shape} into {shape}: element counts differ")
        dims: list[Dim] = []
        stride = 1
        for size in reversed(shape):
            dims.append((0, stride, size))
            stride *= size
        return NkiTensor(self._base, 0, 0, tuple(reversed(dims)), ())

    def _partition_pos(self) -> int:
        """Position of the partition axis among this on-chip view's axes (0 when it is first or absent)."""
        moved = [k for k, (ps, _, size) in enumerate(self._dims) if ps and size > 1]
        if not moved:
            moved = [k for k, (ps, _, _) in enumerate(self._dims) if ps]
        pos = moved[0] if moved else 0
        if pos and any(ps for ps, _, _ in self._dims[:pos]):
            return 0  # not a block layout: leave it to access() to refuse
        return pos

    def _move_to_front(self, pos: int) -> NkiTensor:
        """The same elements with axis `pos` first (a view; bounds checks follow their axes)."""
        order = [pos, *range(pos), *range(pos + 1, self.ndim)]
        dims = tuple(self._dims[k] for k in order)
        checks = tuple((c, tuple(coefs[k] for k in order), size, label) for c, coefs, size, label in self._checks)
        return NkiTensor(self._base, self._p0, self._e0, dims, checks)

    def access_key(self) -> tuple[Any, ...]:
        return (self._p0, self._e0, self._dims)

    @property
    def empty(self) -> bool:
        for _, _, size in self._dims:  # noqa: SIM110 (a plain loop: no generator on this hot path)
            if size == 0:
                return True
        return False

    # -- lowering -----------------------------------------------------------------------------
    def check_bounds(self) -> None:
        """KernelError (at the user's line) if any index of this view falls outside its base."""
        if not self._checks or self.empty:
            return
        for const, coefs, size, label in self._checks:
            lo = hi = const
            for c, (_, _, n) in zip(coefs, self._dims, strict=True):
                ext = c * (n - 1)
                lo += min(0, ext)
                hi += max(0, ext)
            if LOGGING:  # (for the replay, nprof.nki.replay_guard: the same outcome in replayed iterations)
                guard(lo, 0, None) if lo >= 0 else guard(lo, None, 0)
                guard(hi, None, size) if hi < size else guard(hi, size, None)
            if lo < 0 or hi >= size:
                raise kernel_error(
                    f"out-of-bounds access: indices {lo}..{hi} on {label}; narrow the index or pass mask="
                )

    def access(self) -> Access:
        """The ISA operand for this view (bounds checked; partition axis first)."""
        if self._checks:
            self.check_bounds()
        base = self._base
        dims = self._dims or _SCALAR_DIMS
        if base.space is _HBM:
            _, pstride, parts = dims[0]
            free = tuple([(es, size) for _, es, size in dims[1:]]) or _NO_FREE
            return Access(_HBM, base.name, base.dtype, self._e0, parts, free, 0, pstride)
        if not base.alive:
            raise kernel_error(f"tile {base.name!r} is used after the kernel that allocated it returned")
        if base.byte_offset < 0:
            base.builder.materialize(base)
        delta = base.builder.note_use(self)
        ps0, es0, parts = dims[0]
        if parts > 1 and (ps0 != 1 or es0 != 0):
            raise kernel_error(
                f"the first axis of a view of tile {base.name!r} must be its partition axis; "
                "move the partition index first"
            )
        axes: list[tuple[int, int]] = []
        for ps, es, size in dims[1:]:
            if ps and size > 1:
                raise kernel_error(f"tile {base.name!r}: the partition axis can only be the first axis of an operand")
            axes.append((es, size))
        offset = delta + self._e0 * ITEMSIZE[base.dtype]
        return Access(base.space, base.name, base.dtype, offset, parts, tuple(axes) or _NO_FREE, self._p0 + base.part0,
                      1)  # fmt: skip


def partition_first(views: list[NkiTensor]) -> list[NkiTensor]:
    """The operands of one instruction with block axes moved after the partition axis (one consistent order).

    A tile allocated as `(B..., par_dim(P), F...)` and viewed whole (e.g. by `nl.zeros`) has block axes
    before its partition axis; the engines iterate partitions outermost, so every on-chip operand is read
    partition-first. Operands that place the partition axis at different positions of the same logical
    shape would pair different elements: KernelError.
    """
    for v in views:  # the common case: every on-chip operand already starts with its partition axis
        dims = v._dims
        if len(dims) > 1 and v._base.space is not _HBM and not (dims[0][0] and dims[0][2] > 1):
            break
    else:
        return views
    moves = {v._partition_pos() for v in views if not v.is_hbm and v.ndim > 1}
    if moves <= {0}:
        return views
    if len(moves) > 1:
        raise kernel_error(
            "the operands of this instruction put the partition axis at different positions "
            f"{sorted(moves)}; index the block axes with integers so each operand starts with its partition axis"
        )
    (pos,) = moves
    return [v if v.is_hbm or v.ndim <= 1 else v._move_to_front(pos) for v in views]


def psum_block_bytes(shape: tuple[int, ...], partition_axis: int, dtype: str, bank: int) -> int:
    """Byte stride between the blocks of a PSUM tile `(B..., par_dim(P), F...)`: the block size rounded up to a
    power of two, so blocks pack into 2 KiB banks without straddling one (a matmul writes a single bank)."""
    per_block = math.prod(shape[partition_axis + 1 :]) * np.dtype(NUMPY[dtype]).itemsize
    return min(bank, 1 << max(0, per_block - 1).bit_length())


def block_stride_elems(base: OnChip) -> int:
    """Elements between consecutive blocks of a multi-block tile in its view layout (see `root`)."""
    if base.space is Space.PSUM:
        return _block_elems(base)
    return math.prod(base.shape[base.partition_axis + 1 :])


def _block_elems(base: OnChip) -> int:
    bank = base.builder.preset.psum_bank_bytes
    stride = psum_block_bytes(base.shape, base.partition_axis, base.dtype, bank)
    return stride // np.dtype(NUMPY[base.dtype]).itemsize


from nprof.nki.masks import mask_box  # noqa: E402, F401  (re-exported: nprof.nki.tensor.mask_box)
