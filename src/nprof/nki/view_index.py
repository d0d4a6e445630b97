"""Indexing of kernel tensors: `t[items]` composed into a new strided view (`ViewIndexing`, a mixin of NkiTensor).

Integers, slices, `None`, `...`, `nl.arange` expressions (affine maps of
several index variables), `tile[mask]` (operand masking) and runtime values
(`nprof.nki.indirect`) all build a view of the same base: per new axis a
(partition step, element step, size) triple, composed exactly with the view
being indexed (`_compose`). Indices that may fall outside the base under a
`mask=` are kept as bounds checks, evaluated when the view is used. The common
index (in-range ints and unit-step slices) takes `_index_plain`, which builds
the same view as the general path (tests/nki/test_index_fast_path.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nprof.arch.isa import Space
from nprof.nki.index import IndexExpr, Predicate, guard_range
from nprof.nki.replay_guard import LOGGING, fail, guard
from nprof.nki.source import kernel_error

if TYPE_CHECKING:
    from nprof.nki.tensor import Check, NkiTensor

_HBM = Space.HBM  # (a module constant: an enum member's attribute lookup is slow on the hot paths)


class ViewIndexing:
    """`__getitem__` / `index` of kernel tensors (see module doc)."""

    __slots__ = ()
    _base: Any
    _p0: int
    _e0: int
    _dims: Any
    _checks: Any
    shape: Any
    ndim: Any
    is_hbm: Any
    pad_free: Any
    name: Any

    def index(self, items: Any) -> NkiTensor:
        """The view `self[items]` (ints, slices, None, Ellipsis, `nl.arange` expressions, a mask, runtime values)."""
        if items.__class__ is tuple:
            plain = self._index_plain(items)
            if plain is not None:
                return plain
        elif isinstance(items, Predicate):  # `tile[mask]`: operand masking of a matmul input (nprof.nki.masks)
            from nprof.nki.masks import operand_masked

            return operand_masked(self, items)  # type: ignore[arg-type]  # (a mixin of NkiTensor)
        if not isinstance(items, tuple):
            items = (items,)
            plain = self._index_plain(items)
            if plain is not None:
                return plain
        if any(item is Ellipsis for item in items):
            k = items.index(Ellipsis)
            fill = self.ndim - (len(items) - 1 - sum(1 for i in items if i is None))
            items = items[:k] + (slice(None),) * fill + items[k + 1 :]
        real = [item for item in items if item is not None]
        if len(real) == 2 and self.ndim == 1 and not self.is_hbm:  # a [P] tile (e.g. `buf[:, i]`) read as [P, 1]
            return self.pad_free(2).index(items)
        if len(real) > self.ndim:
            raise kernel_error(f"too many indices ({len(real)}) for {self.name!r} of shape {self.shape}")
        items = items + (slice(None),) * (self.ndim - len(real))
        if any(isinstance(item, IndexExpr) for item in items):
            return self._index_affine(items)
        return self._index_basic(items)

    __getitem__ = index

    def _index_plain(self, items: tuple[Any, ...]) -> NkiTensor | None:
        """The fast path of `_index_basic` for the common index: in-range ints and unit-step slices within the
        axis, on a view without pending bounds checks; None for anything else (the general path decides)."""
        if self._checks or len(items) > len(self._dims):
            return None
        p0, e0 = self._p0, self._e0
        keep_partition = self._base.space is not _HBM
        dims = []
        for (ps, es, size), item in zip(self._dims, items, strict=False):
            if type(item) is slice:
                start, stop = item.start, item.stop
                start = 0 if start is None else start
                stop = size if stop is None else stop
                if (
                    (item.step is not None and item.step != 1)
                    or type(start) is not int
                    or type(stop) is not int
                    or not 0 <= start < stop <= size
                ):
                    return None
                dims.append((ps, es, stop - start))
            elif type(item) is int and 0 <= item < size:
                start = item
                if ps == 1 and keep_partition:  # the partition axis stays, as a size-1 axis
                    dims.append((ps, es, 1))
            else:
                return None
            p0 += start * ps
            e0 += start * es
        dims.extend(self._dims[len(items) :])
        if LOGGING:  # (loop iterations logged for replay: the branch taken, nprof.nki.replay_guard)
            _guard_plain(self._dims, items)
        return self.__class__(self._base, p0, e0, tuple(dims), ())  # type: ignore[call-arg,return-value]

    def _compose(
        self, per_dim: list[tuple[int, tuple[int, ...]]], sizes: tuple[int, ...], new: list[Check]
    ) -> NkiTensor:
        """Compose with one affine map per current dim: (const, coef per new dim)."""
        p0, e0 = self._p0, self._e0
        n = len(sizes)
        pst = [0] * n
        est = [0] * n
        for (ps, es, _), (const, coefs) in zip(self._dims, per_dim, strict=True):
            p0 += const * ps
            e0 += const * es
            for k, c in enumerate(coefs):
                if c:
                    pst[k] += c * ps
                    est[k] += c * es
        checks = []
        for const, coefs, size, label in self._checks:
            nc = const
            ncoefs = [0] * n
            for j, cj in enumerate(coefs):
                if cj:
                    nc += cj * per_dim[j][0]
                    for k, c in enumerate(per_dim[j][1]):
                        ncoefs[k] += cj * c
            checks.append((nc, tuple(ncoefs), size, label))
        checks.extend(new)
        dims = tuple(zip(pst, est, sizes, strict=True))  # (C-level: no generator on this hot path)
        return self.__class__(self._base, p0, e0, dims, tuple(checks))  # type: ignore[call-arg,return-value]

    def _label(self, axis: int) -> str:
        return f"axis {axis} (size {self._dims[axis][2]}) of {self._base.name!r}"

    def _index_basic(self, items: tuple[Any, ...]) -> NkiTensor:
        per_dim: list[tuple[int, list[int]]] = []
        sizes: list[int] = []
        beyond: list[tuple[int, int, int, int, str]] = []  # slices past the end, checked at use (after mask=)
        axis = 0
        for item in items:
            if item is None:
                sizes.append(1)
                continue
            size = self._dims[axis][2]
            partition = self._dims[axis][0] == 1 and self._base.space is not _HBM
            if isinstance(item, slice):
                start, stop, step = _slice_range(item, size, self, axis)  # type: ignore[arg-type]
                length = len(range(start, stop, step))
                if stop > size:  # NKI: a slice past the end is valid when a mask= narrows the access
                    beyond.append((start, len(sizes), step, size, self._label(axis)))
                per_dim.append((start, [len(sizes), step]))
                sizes.append(length)
            else:
                try:
                    i = int(item)
                except TypeError:
                    return self._index_runtime(items, item)
                if LOGGING:
                    guard(i, -size, 0) if i < 0 else guard(i, 0, size)
                if i < 0:
                    i += size
                if not 0 <= i < size:
                    raise kernel_error(f"index {int(item)} is out of bounds for {self._label(axis)}")
                if partition:  # keep the partition axis as a size-1 axis
                    per_dim.append((i, [len(sizes), 1]))
                    sizes.append(1)
                else:
                    per_dim.append((i, [-1, 0]))
            axis += 1
        n = len(sizes)
        resolved = []
        for const, (k, c) in per_dim:
            coefs = [0] * n
            if k >= 0:
                coefs[k] = c
            resolved.append((const, tuple(coefs)))
        checks = [(start, tuple(step if k == dim else 0 for k in range(n)), size, label)
                  for start, dim, step, size, label in beyond]  # fmt: skip
        return self._compose(resolved, tuple(sizes), checks)

    def _index_affine(self, items: tuple[Any, ...]) -> NkiTensor:
        if any(item is None for item in items):
            raise kernel_error("cannot mix None (new axis) with nl.arange indices; add the axis to the arange instead")
        exprs = [item for item in items if isinstance(item, IndexExpr)]
        n = max(e.ndim for e in exprs)
        sizes = [1] * n
        per_dim: list[tuple[int, tuple[int, ...]]] = []
        new: list[Check] = []
        for axis, item in enumerate(items):
            if isinstance(item, slice):
                if item != slice(None) or self._dims[axis][2] != 1:
                    raise kernel_error(
                        "cannot mix slices with nl.arange indices; index every axis with an nl.arange expression"
                    )
                per_dim.append((0, (0,) * n))
                continue
            if not isinstance(item, IndexExpr):
                try:
                    item = IndexExpr(0, int(item), ())
                except TypeError:
                    return self._index_runtime(items, item)
            coefs = [0] * n
            for dim, (coef, size) in item.term_map(n).items():
                if sizes[dim] not in (1, size) and coef:
                    raise kernel_error(f"index expressions of sizes {sizes[dim]} and {size} do not broadcast")
                sizes[dim] = max(sizes[dim], size)
                coefs[dim] = coef
            per_dim.append((item.const, tuple(coefs)))
            new.append((item.const, tuple(coefs), self._dims[axis][2], self._label(axis)))
        return self._compose(per_dim, tuple(sizes), new)

    def _index_runtime(self, items: tuple[Any, ...], item: Any) -> Any:
        """`self[items]` where `item` is not static: an IndirectView if it is read at run time
        (`nprof.nki.indirect`), else a KernelError."""
        from nprof.nki import indirect

        if not indirect.is_dynamic(item):
            raise kernel_error(f"unsupported index {item!r} for {self._base.name!r}")
        return indirect.index_dynamic(self, items)  # type: ignore[arg-type]


def _slice_range(item: slice, size: int, view: NkiTensor, axis: int) -> tuple[int, int, int]:
    """(start, stop, step) of `item` on axis `axis` (of size `size`) of `view`; KernelError naming the axis when
    it is out of bounds or empty (a stop past the end is kept: a mask may narrow it)."""
    step = 1 if item.step is None else int(item.step)
    if step == 0:
        raise kernel_error("slice step cannot be zero")
    if step < 0:
        fail("a slice with a negative step")  # (clamped by `slice.indices`: not followed by the replay)
        return item.indices(size)
    start = 0 if item.start is None else int(item.start)
    stop = size if item.stop is None else int(item.stop)
    if LOGGING:  # (the side of 0 each bound is on: a negative one counts from the end)
        guard(start, None, 0) if start < 0 else guard(start, 0, None)
        guard(stop, None, 0) if stop < 0 else guard(stop, 0, None)
    if start < 0:
        start += size
    if stop < 0:
        stop += size
    if start < 0 or start >= size or start > stop:
        raise kernel_error(
            f"slice {item.start}:{item.stop} is out of bounds for {view._label(axis)}; use a shorter slice or an "
            "index with mask="
        )
    if start == stop:
        raise kernel_error(f"slice {item.start}:{item.stop} on {view._label(axis)} is empty")
    if LOGGING:  # (within the axis, or past its end: checked at use; its length)
        guard(start, 0, size)
        guard(stop, None, size + 1) if stop <= size else guard(stop, size + 1, None)
        guard_range(start, stop, step, len(range(start, stop, step)))
    return start, stop, step


def _guard_plain(dims: Any, items: tuple[Any, ...]) -> None:
    """The branch `_index_plain` took, for the replay (nprof.nki.replay_guard): each int within its axis, each
    slice within its axis and of its length."""
    for (_, _, size), item in zip(dims, items, strict=False):
        if type(item) is slice:
            start, stop = item.start, item.stop  # (None: the axis' own bound, the same in every iteration)
            if start is not None:
                guard(start, 0, size)
            if stop is not None:
                guard(stop, 1, size + 1)
            if start is not None or stop is not None:
                width = (size if stop is None else stop) - (0 if start is None else start)
                guard(width, width, width + 1)
        else:
            guard(item, 0, size)
