"""Strided views of HBM tensors and how the compiler cuts them into tiles.

Contract:
* `View` is a tensor-shaped window (`shape`, element `strides`, `offset`) on one HBM tensor. View ops
  (view/reshape, permute, expand, slice, select, unsqueeze, squeeze) only change this metadata — no data
  moves, exactly as on the host. `View.reshape` returns None when the strides cannot express the new shape
  (the caller then materialises a contiguous copy first).
* `row_tiles(shape, strides_per_operand, col_dims)` enumerates tiles covering `shape`: the partition
  dimension is one of the non-column dims (cut into <= 128 rows), the column dims are the tile's free dims
  (cut along the outermost one if a tile would exceed `FREE_MAX` elements per partition), every other dim is
  an outer loop. Each `TileSpec` turns into an HBM `Access` per operand with `access()`; operands may
  broadcast (stride 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from nprof.arch.isa import Access, Space

FREE_MAX = 2048  # fp32 elements per partition per tile (8 KiB): room for many tiles in 192 KiB
PMAX = 128


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def numel(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


@dataclass(frozen=True)
class View:
    """A strided window on HBM tensor `tensor` (see module doc)."""

    tensor: str
    dtype: str  # program dtype of the tensor
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def whole(tensor: str, dtype: str, shape: Sequence[int]) -> View:
        shape = tuple(int(s) for s in shape)
        return View(tensor, dtype, shape, contiguous_strides(shape), 0)

    @property
    def is_contiguous(self) -> bool:
        return all(
            st == cs
            for st, cs, sz in zip(self.strides, contiguous_strides(self.shape), self.shape, strict=True)
            if sz > 1
        )

    def permute(self, dims: Sequence[int]) -> View:
        dims = [d % len(self.shape) for d in dims] if self.shape else []
        return View(self.tensor, self.dtype, tuple(self.shape[d] for d in dims),
                    tuple(self.strides[d] for d in dims), self.offset)  # fmt: skip

    def expand(self, shape: Sequence[int]) -> View:
        shape = [int(s) for s in shape]
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        out_shape = list(shape[:lead])
        for i, (sz, st) in enumerate(zip(self.shape, self.strides, strict=True)):
            want = shape[lead + i]
            if want == -1 or want == sz:
                out_shape.append(sz)
                strides.append(st)
            else:
                out_shape.append(want)
                strides.append(0)
        return View(self.tensor, self.dtype, tuple(out_shape), tuple(strides), self.offset)

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> View:
        dim %= len(self.shape)
        size = self.shape[dim]
        start = max(0, min(size, start + size if start < 0 else start))
        end = max(start, min(size, end + size if end < 0 else end))
        n = -(-(end - start) // step)
        shape = list(self.shape)
        strides = list(self.strides)
        shape[dim] = n
        strides[dim] = self.strides[dim] * step
        return View(self.tensor, self.dtype, tuple(shape), tuple(strides), self.offset + start * self.strides[dim])

    def select(self, dim: int, index: int) -> View:
        dim %= len(self.shape)
        index = index + self.shape[dim] if index < 0 else index
        shape = self.shape[:dim] + self.shape[dim + 1 :]
        strides = self.strides[:dim] + self.strides[dim + 1 :]
        return View(self.tensor, self.dtype, shape, strides, self.offset + index * self.strides[dim])

    def unsqueeze(self, dim: int) -> View:
        dim = dim % (len(self.shape) + 1)
        return View(self.tensor, self.dtype, (*self.shape[:dim], 1, *self.shape[dim:]),
                    (*self.strides[:dim], 0, *self.strides[dim:]), self.offset)  # fmt: skip

    def squeeze(self, dims: Sequence[int] | None = None) -> View:
        nd = len(self.shape)
        drop = {d % nd for d in dims} if dims is not None else set(range(nd))
        keep = [i for i in range(nd) if not (i in drop and self.shape[i] == 1)]
        return View(self.tensor, self.dtype, tuple(self.shape[i] for i in keep),
                    tuple(self.strides[i] for i in keep), self.offset)  # fmt: skip

    def reshape(self, shape: Sequence[int]) -> View | None:
        shape = [int(s) for s in shape]
        if -1 in shape:
            known = numel([s for s in shape if s != -1])
            shape[shape.index(-1)] = numel(self.shape) // max(known, 1)
        strides = _reshape_strides(self.shape, self.strides, shape)
        if strides is None:
            return None
        return View(self.tensor, self.dtype, tuple(shape), strides, self.offset)


def _reshape_strides(old: Sequence[int], old_strides: Sequence[int], new: Sequence[int]) -> tuple[int, ...] | None:
    """Strides for viewing (old, old_strides) as `new`, or None (torch's computeStride algorithm)."""
    if numel(old) == 0 or numel(old) != numel(new):
        return contiguous_strides(new) if numel(old) == numel(new) else None
    new_strides = [0] * len(new)
    view_d = len(new) - 1
    chunk_base = old_strides[-1] if old_strides else 1
    tensor_numel = 1
    view_numel = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        if d == 0 or (old[d - 1] != 1 and old_strides[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = old_strides[d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


@dataclass(frozen=True)
class TileSpec:
    """One tile: per-operand element offsets, the partition dim and the free dims (per-operand strides)."""

    offsets: tuple[int, ...]
    part_strides: tuple[int, ...]
    partitions: int
    free: tuple[tuple[tuple[int, ...], int], ...]  # (strides per operand, size), outermost first
    # per operand: 0, or P when the operand repeats every P partitions (partition p reads its row p % P: a
    # broadcast operand whose partition run crosses a dim it is broadcast along; `retile(periodic=True)`)
    periods: tuple[int, ...] = ()

    def period(self, i: int) -> int:
        """Operand i's period on the partitions (0: none, every partition its own row)."""
        return self.periods[i] if i < len(self.periods) else 0

    @property
    def free_sizes(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.free)

    def access(self, i: int, view: View) -> Access:
        return Access(
            Space.HBM,
            view.tensor,
            view.dtype,
            view.offset + self.offsets[i],
            self.period(i) or self.partitions,
            tuple((strides[i], size) for strides, size in self.free) or ((0, 1),),
            0,
            self.part_strides[i],
        )


def _simplify(
    shape: Sequence[int], strides: Sequence[Sequence[int]], col_dims: Sequence[int], keep_rows: bool = False
) -> tuple[list[int], list[list[int]], list[bool]]:
    """Drop size-1 dims and merge adjacent dims that are contiguous for every operand (within rows/cols).
    `keep_rows`: a dim of PMAX/2..PMAX rows is not merged with the dims around it when the merge would exceed
    PMAX rows (it stays whole on the partitions: e.g. the channels of [N, C, H*W], as convolutions store
    and batch-norm reductions load them)."""
    dims = [i for i, s in enumerate(shape) if s != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    is_col: list[bool] = []
    for d in dims:
        col = d in col_dims
        if (
            out_shape
            and is_col[-1] == col
            and not (keep_rows and _splits_rows(out_shape[-1], shape[d]))
            and all(st[-1] == s[d] * shape[d] for st, s in zip(out_strides, strides, strict=True))
        ):
            out_shape[-1] *= shape[d]
            for st, s in zip(out_strides, strides, strict=True):
                st[-1] = s[d]
            continue
        out_shape.append(int(shape[d]))
        for st, s in zip(out_strides, strides, strict=True):
            st.append(int(s[d]))
        is_col.append(col)
    return out_shape, out_strides, is_col


def _splits_rows(outer: int, inner: int) -> bool:
    """Would merging `outer` x `inner` hide a dim of PMAX/2..PMAX rows inside more than PMAX rows?"""
    if outer * inner <= PMAX:
        return False
    return PMAX // 2 <= inner <= PMAX or PMAX // 2 <= outer <= PMAX


def row_tiles(
    shape: Sequence[int], strides: Sequence[Sequence[int]], col_dims: Sequence[int] = (), fold: bool = False
) -> Iterator[TileSpec]:
    """Tiles covering `shape` (see module doc). With no `col_dims`, the innermost dims become the free dims;
    with `fold` (elementwise kernels, which do not care which dims a tile's free dims are) the outer loop
    dims also become free dims, innermost first, while a tile stays within `FREE_MAX` elements per
    partition: one DMA per operand moves many rows' worth of small strided tiles (a head-split copy)."""
    nops = len(strides)
    sh, st, is_col = _simplify(shape, strides, col_dims, keep_rows=fold)
    if not sh:
        yield TileSpec((0,) * nops, (0,) * nops, 1, (((0,) * nops, 1),))
        return
    if not col_dims:
        if len(sh) == 1:  # split a lone dim into partitions x free
            n = sh[0]
            p = _natural_rows(shape, n) or max(d for d in range(1, min(PMAX, n) + 1) if n % d == 0)
            if p < 8 and n > PMAX:
                p = 1
            sh = [p, n // p]
            st = [[s[0] * (n // p), s[0]] for s in st]
        is_col = [False] * (len(sh) - 1) + [True]
    rows = [i for i in range(len(sh)) if not is_col[i]]
    cols = [i for i in range(len(sh)) if is_col[i]]
    pdim = max(rows, key=lambda i: (sh[i], i)) if rows else None  # no rows: a single partition
    loops = [i for i in rows if i != pdim]
    # free dims, cut along the outermost one if too big
    free_n = numel([sh[i] for i in cols])
    chunk_dim = None
    chunk = 0
    if free_n > FREE_MAX:
        inner = 1
        for i in reversed(cols):
            if inner * sh[i] > FREE_MAX:
                chunk_dim = i
                chunk = max(1, FREE_MAX // inner)
                break
            inner *= sh[i]
        outer_cols = [i for i in cols if i < chunk_dim]  # type: ignore[operator]
        loops += outer_cols
        cols = [i for i in cols if i >= chunk_dim]  # type: ignore[operator]
    if fold and chunk_dim is None:
        for d in sorted(loops, reverse=True):  # innermost first: a few large tiles instead of many small ones
            if free_n * sh[d] <= FREE_MAX:
                free_n *= sh[d]
                loops.remove(d)
                cols = sorted([*cols, d])
    loop_ranges = [range(sh[i]) for i in loops]
    p_total = sh[pdim] if pdim is not None else 1
    c_total = sh[chunk_dim] if chunk_dim is not None else 1
    for idx in itertools.product(*loop_ranges):
        base = [sum(k * st[o][d] for k, d in zip(idx, loops, strict=True)) for o in range(nops)]
        for p0 in range(0, p_total, PMAX):
            np_ = min(PMAX, p_total - p0)
            for c0 in range(0, c_total, chunk or 1):
                free = []
                off = list(base)
                for o in range(nops):
                    if pdim is not None:
                        off[o] += p0 * st[o][pdim]
                    if chunk_dim is not None:
                        off[o] += c0 * st[o][chunk_dim]
                for d in cols:
                    size = min(chunk, c_total - c0) if d == chunk_dim else sh[d]
                    free.append((tuple(st[o][d] for o in range(nops)), size))
                pst = tuple(st[o][pdim] if pdim is not None else 0 for o in range(nops))
                yield TileSpec(tuple(off), pst, np_, tuple(free))


def _natural_rows(shape: Sequence[int], n: int) -> int:
    """Rows of the natural [rows, last dim] layout of a contiguous `shape` of `n` elements when they fit the
    partitions and the tile is small or uses half the partitions or more (the layout matmul operands and row
    reductions load, so their loads find the tile in SBUF), else 0. A shape ending in a size-1 dim (keepdim
    statistics such as a layer norm's [B, T, 1] rstd) is that many rows of one element."""
    dims = [int(s) for s in shape if s != 1]
    if len(shape) > 1 and shape[-1] == 1 and len(dims) >= 2 and n <= PMAX:
        return n  # keepdim statistics [..., rows, 1]: one value per partition, as the rows they scale load them
    if len(dims) < 2 or dims[-1] > FREE_MAX:
        return 0
    rows = n // dims[-1]
    return rows if rows <= PMAX and (n <= 8192 or rows >= PMAX // 2) else 0


def view_access(
    view: View, pdim: int | None, starts: Sequence[int], sizes: Sequence[int], free_dims: Sequence[int]
) -> Access:
    """The HBM Access of the box `starts`/`sizes` of `view`: dim `pdim` on partitions, `free_dims` as free dims.

    Dims that are neither must have size 1 in the box (their start only moves the offset)."""
    offset = view.offset + sum(s * st for s, st in zip(starts, view.strides, strict=True))
    free = tuple((view.strides[d], sizes[d]) for d in free_dims) or ((0, 1),)
    if pdim is None:
        return Access(Space.HBM, view.tensor, view.dtype, offset, 1, free, 0, 0)
    return Access(Space.HBM, view.tensor, view.dtype, offset, sizes[pdim], free, 0, view.strides[pdim])


def broadcast_rows(
    view: View, partitions: int, start: Sequence[int], sizes: Sequence[int], free_dims: Sequence[int]
) -> Access:
    """Like `view_access` without a partition dim, repeated on `partitions` partitions (DMA broadcast)."""
    a = view_access(view, None, start, sizes, free_dims)
    return Access(a.space, a.tensor, a.dtype, a.offset, partitions, a.free, 0, 0)


def _dims_of_run(
    stride: int, size: int, start: Sequence[int], shape: Sequence[int], cstrides: Sequence[int]
) -> list[int] | None:
    """The dims (outermost first) a run of `size` elements at contiguous stride `stride` walks, from index
    `start`, in a contiguous tensor of `shape`; None when the run is not a box (wraps mid-dim)."""
    inner = next((d for d in reversed(range(len(shape))) if shape[d] > 1 and cstrides[d] == stride), None)
    if inner is None:
        return [] if size == 1 else None
    dims, left = [], size
    for d in range(inner, -1, -1):
        if shape[d] == 1:
            continue
        if left <= 1:
            break
        if left < shape[d]:
            if left and start[d] + left <= shape[d]:
                dims.append(d)
                left = 1
            break
        if left % shape[d] or start[d]:
            return None
        dims.append(d)
        left //= shape[d]
    return list(reversed(dims)) if left == 1 else None


def _run_stride(dims: list[int], shape: Sequence[int], strides: Sequence[int]) -> int | None:
    """One operand's stride along a run over `dims` (merged), or None when its strides do not merge."""
    if not dims:
        return 0
    for outer, inner in itertools.pairwise(dims):
        if strides[outer] != strides[inner] * shape[inner]:
            return None
    return strides[dims[-1]]


def _periodic_stride(dims: list[int], shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int] | None:
    """(stride, period) of an operand along a partition run over `dims` that it cannot follow as one stride
    because it is broadcast (stride 0) along the run's outer dims and follows the inner ones: partition p reads
    row p % period; None when it is not so."""
    for cut in range(1, len(dims)):
        outer, inner = dims[:cut], dims[cut:]
        step = _run_stride(inner, shape, strides)
        if step is not None and step != 0 and all(strides[d] == 0 for d in outer):
            return step, numel(shape[d] for d in inner)
    return None


def retile(
    accesses: Sequence[Access], shape: Sequence[int], strides: Sequence[Sequence[int]], periodic: bool = False
) -> list[TileSpec] | None:
    """TileSpecs over `shape` reproducing `accesses` (patterns on a contiguous tensor of that shape) for
    operands of the given strides (offsets relative to each operand's view), or None when some access is not
    a box of whole runs every operand can follow (then the caller tiles with `row_tiles`). `periodic`: an
    operand may follow the partition run with a period (`TileSpec.periods`: its kernel replicates its rows,
    `kernels.elementwise`)."""
    cstrides = contiguous_strides(shape)
    specs = []
    for a in accesses:
        rem, start = a.offset, []
        for cs in cstrides:
            start.append(rem // cs)
            rem %= cs
        runs = [(a.partition_stride, a.partitions), *a.free]
        per_run = []
        periods = [0] * len(strides)
        for r, (stride, size) in enumerate(runs):
            dims = _dims_of_run(stride, size, start, shape, cstrides) if size > 1 else []
            if dims is None:
                return None
            steps = [_run_stride(dims, shape, st) for st in strides]
            for i, st in enumerate(strides):
                found = _periodic_stride(dims, shape, st) if steps[i] is None and periodic and r == 0 and i else None
                if found is not None:
                    steps[i], periods[i] = found
            if any(s is None for s in steps):
                return None
            per_run.append((tuple(steps), size))
        offsets = tuple(sum(i * s for i, s in zip(start, st, strict=True)) for st in strides)
        (pst, parts), free = per_run[0], per_run[1:]
        specs.append(TileSpec(offsets, pst, parts, tuple(free) or (((0,) * len(strides), 1),),  # type: ignore[arg-type]
                              tuple(periods) if any(periods) else ()))
    return specs
