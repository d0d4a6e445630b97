"""Affine index expressions (`nl.arange`, `nl.mgrid`) and the masks built from them.

An `IndexExpr` is `const + sum(coef_k * i_k)` where `i_k` ranges over
`0..size_k-1` along broadcast dimension `k` (numpy broadcasting rules,
right-aligned): `nl.arange(128)[:, None]` varies along dim 0 of a 2-D index,
`nl.arange(512)[None, :]` along dim 1. Adding, subtracting and multiplying by
integers keeps an expression affine; anything else raises `TypeError`.

Comparing an expression with an integer or another expression gives a
`Predicate` (conjunction with `&`), used as `mask=`. `Predicate.box(shape)`
turns it into per-dimension half-open ranges when every condition involves a
single dimension (the only masks the hardware applies for free).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nprof.nki.replay_guard import LOGGING, guard

_CMPS = ("lt", "le", "gt", "ge", "eq", "ne")


@dataclass(frozen=True)
class IndexExpr:
    """`const + sum(coef * i_dim)` over a broadcast shape of `ndim` dims; `terms` maps dim -> (coef, size)."""

    ndim: int
    const: int
    terms: tuple[tuple[int, int, int], ...]  # (dim, coef, size), sorted by dim

    @property
    def shape(self) -> tuple[int, ...]:
        sizes = [1] * self.ndim
        for dim, _, size in self.terms:
            sizes[dim] = size
        return tuple(sizes)

    def term_map(self, ndim: int | None = None) -> dict[int, tuple[int, int]]:
        """dim -> (coef, size), right-aligned to `ndim` dims (default: own ndim)."""
        shift = (ndim if ndim is not None else self.ndim) - self.ndim
        if shift < 0:
            raise TypeError(f"index expression with {self.ndim} dims used where {ndim} are expected")
        return {dim + shift: (coef, size) for dim, coef, size in self.terms}

    def bounds(self) -> tuple[int, int]:
        """(min, max) value over the whole index range."""
        lo = hi = self.const
        for _, coef, size in self.terms:
            ext = coef * (size - 1)
            lo += min(0, ext)
            hi += max(0, ext)
        return lo, hi

    # -- arithmetic ---------------------------------------------------------------------------
    def _combine(self, other: IndexExpr, sign: int) -> IndexExpr:
        ndim = max(self.ndim, other.ndim)
        merged: dict[int, tuple[int, int]] = dict(self.term_map(ndim))
        for dim, (coef, size) in other.term_map(ndim).items():
            if dim in merged:
                c0, s0 = merged[dim]
                if s0 != size:
                    raise TypeError(f"index expressions of sizes {s0} and {size} cannot broadcast along dim {dim}")
                merged[dim] = (c0 + sign * coef, size)
            else:
                merged[dim] = (sign * coef, size)
        terms = tuple((d, c, s) for d, (c, s) in sorted(merged.items()) if c != 0 or s > 1)
        return IndexExpr(ndim, self.const + sign * other.const, terms)

    def __add__(self, other: Any) -> IndexExpr:
        if isinstance(other, IndexExpr):
            return self._combine(other, 1)
        if _is_int(other):
            return IndexExpr(self.ndim, self.const + int(other), self.terms)
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Any) -> IndexExpr:
        if isinstance(other, IndexExpr):
            return self._combine(other, -1)
        if _is_int(other):
            return IndexExpr(self.ndim, self.const - int(other), self.terms)
        return NotImplemented

    def __rsub__(self, other: Any) -> IndexExpr:
        if _is_int(other):
            return (-self) + int(other)
        return NotImplemented

    def __neg__(self) -> IndexExpr:
        return IndexExpr(self.ndim, -self.const, tuple((d, -c, s) for d, c, s in self.terms))

    def __mul__(self, other: Any) -> IndexExpr:
        if _is_int(other):
            k = int(other)
            return IndexExpr(self.ndim, self.const * k, tuple((d, c * k, s) for d, c, s in self.terms))
        if isinstance(other, IndexExpr):
            raise TypeError("the product of two index expressions is not affine; multiply by an integer instead")
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> IndexExpr:
        raise TypeError("'//' on index expressions is not affine; build the index from separate nl.arange terms")

    def __mod__(self, other: Any) -> IndexExpr:
        raise TypeError("'%' on index expressions is not affine; build the index from separate nl.arange terms")

    def __getitem__(self, items: Any) -> IndexExpr:
        if not isinstance(items, tuple):
            items = (items,)
        dims_in = iter(range(self.ndim))
        mapping: dict[int, int] = {}
        out = 0
        for item in items:
            if item is None:
                out += 1
            elif isinstance(item, slice) and item == slice(None):
                mapping[next(dims_in)] = out
                out += 1
            else:
                raise TypeError("index expressions accept only ':' and None (new axis) when indexed")
        for dim in dims_in:
            mapping[dim] = out
            out += 1
        return IndexExpr(out, self.const, tuple((mapping[d], c, s) for d, c, s in self.terms))

    # -- comparisons -> masks -----------------------------------------------------------------
    def _cmp(self, other: Any, op: str) -> Predicate:
        from nprof.nki.mask_and import conjoin

        if isinstance(other, IndexExpr):
            return conjoin(Predicate(((self - other, op, 0),)))
        if _is_int(other):
            return conjoin(Predicate(((self, op, int(other)),)))
        return NotImplemented

    def __lt__(self, other: Any) -> Predicate:
        return self._cmp(other, "lt")

    def __le__(self, other: Any) -> Predicate:
        return self._cmp(other, "le")

    def __gt__(self, other: Any) -> Predicate:
        return self._cmp(other, "gt")

    def __ge__(self, other: Any) -> Predicate:
        return self._cmp(other, "ge")

    def __eq__(self, other: Any) -> Predicate:  # type: ignore[override]
        return self._cmp(other, "eq")

    def __ne__(self, other: Any) -> Predicate:  # type: ignore[override]
        return self._cmp(other, "ne")

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("an index expression has no truth value; use it in a mask= or as an index")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) or (hasattr(value, "__index__") and not isinstance(value, float | IndexExpr))


@dataclass(frozen=True)
class Predicate:
    """A conjunction of `expr <cmp> rhs` conditions (a mask)."""

    conds: tuple[tuple[IndexExpr, str, int], ...]

    def __and__(self, other: Any) -> Predicate:
        if isinstance(other, Predicate):
            return Predicate(self.conds + other.conds)
        if isinstance(other, bool) or type(other).__name__ == "bool_":  # a condition on loop indices
            return self if other else Predicate(((IndexExpr(0, 1, ()), "lt", 0),))  # 1 < 0: nothing
        return NotImplemented

    __rand__ = __and__

    def __or__(self, other: Any) -> Predicate:
        raise TypeError("masks can only be combined with '&' (a union of boxes is not one instruction)")

    def __invert__(self) -> Predicate:
        raise TypeError("masks cannot be negated; write the opposite comparison instead")

    def __bool__(self) -> bool:
        from nprof.nki.mask_and import truth

        return truth(self)  # the left side of `m1 and m2` (nprof.nki.mask_and), else TypeError

    def box(self, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
        """Per-dim [lo, hi) satisfying every condition within `shape`; None if a condition couples two dims in a
        way that depends on the index (a triangle is not a box)."""
        ndim = len(shape)
        box = [(0, size) for size in shape]
        for expr, op, rhs in self.conds:
            terms = expr.term_map(ndim)
            live = {d: c for d, (c, _) in terms.items() if c != 0}
            if len(live) > 1:  # couples axes: fine when it holds everywhere or nowhere in the box
                always = _coupled(expr, rhs, op, box, ndim)
                if always is None:
                    return None
                if not always:
                    box = [(0, 0)] * ndim
                continue
            d_const = expr.const - rhs
            for cmp in ("le", "ge") if op == "eq" else (op,):
                if cmp == "ne":
                    return None
                if not live:
                    if not _holds(d_const, cmp):
                        box = [(0, 0)] * ndim
                    continue
                ((dim, coef),) = live.items()
                lo, hi = box[dim]
                nlo, nhi = _solve(coef, d_const, cmp)
                box[dim] = (max(lo, nlo), min(hi, nhi))
        return [(lo, max(lo, hi)) for lo, hi in box]


def _coupled(expr: IndexExpr, rhs: int, op: str, box: list[tuple[int, int]], ndim: int) -> bool | None:
    """True / False when `expr <op> rhs` holds at every / no index of `box`; None when it depends on the index."""
    lo = hi = expr.const - rhs
    for dim, (coef, _) in expr.term_map(ndim).items():
        a, b = box[dim]
        if b <= a:
            return False
        lo += min(coef * a, coef * (b - 1))
        hi += max(coef * a, coef * (b - 1))
    if op == "ne":
        return True if (lo > 0 or hi < 0) else (False if lo == hi == 0 else None)
    if op == "eq":
        return False if (lo > 0 or hi < 0) else (True if lo == hi == 0 else None)
    if _holds(lo, op) and _holds(hi, op):
        return True
    if not _holds(lo, op) and not _holds(hi, op):
        return False
    return None


def _holds(value: int, cmp: str) -> bool:
    return {"lt": value < 0, "le": value <= 0, "gt": value > 0, "ge": value >= 0, "eq": value == 0}[cmp]


def _solve(c: int, d: int, cmp: str) -> tuple[int, int]:
    """Range [lo, hi) of integers i with `c*i + d <cmp> 0` (c != 0), unbounded sides as +-2**62."""
    inf = 2**62
    if cmp == "le":  # c*i + d - 1 < 0
        cmp, d = "lt", d - 1
    elif cmp == "gt":  # -c*i - d < 0
        cmp, c, d = "lt", -c, -d
    elif cmp == "ge":  # -c*i - d <= 0 -> -c*i - d - 1 < 0
        cmp, c, d = "lt", -c, -d - 1
    # c*i + d < 0
    if c > 0:
        return -inf, -(d // c)  # i < -d/c  -> hi = ceil(-d/c) = -floor(d/c)
    # c < 0: i > -d/c = d/|c| -> lo = floor(d/|c|) + 1
    return d // (-c) + 1, inf


def arange(start: int, stop: int | None = None, step: int = 1) -> IndexExpr:
    """A 1-D index expression over `range(start, stop, step)` (or `range(start)`)."""
    if stop is None:
        start, stop = 0, start
    size = len(range(int(start), int(stop), int(step)))
    if LOGGING:
        guard_range(int(start), int(stop), int(step), size)
    if size <= 0:
        raise ValueError(f"nl.arange({start}, {stop}, {step}) is empty")
    return IndexExpr(1, int(start), ((0, int(step), size),))


class MGrid(tuple):
    """Result of `nl.mgrid[...]`: a tuple of index expressions with `.p`, `.x`, `.y`, `.z` aliases (in order)."""

    @property
    def p(self) -> IndexExpr:
        return self[0]

    @property
    def x(self) -> IndexExpr:
        return self[1]

    @property
    def y(self) -> IndexExpr:
        return self[2]

    @property
    def z(self) -> IndexExpr:
        return self[3]


class _MGridMaker:
    def __getitem__(self, items: Any) -> MGrid:
        if not isinstance(items, tuple):
            items = (items,)
        n = len(items)
        exprs = []
        for k, item in enumerate(items):
            if not isinstance(item, slice) or item.stop is None:
                raise TypeError("nl.mgrid takes slices with explicit stops, e.g. nl.mgrid[0:128, 0:512]")
            r = range(item.start or 0, item.stop, item.step or 1)
            if LOGGING:
                guard_range(r.start, r.stop, r.step, len(r))
            exprs.append(IndexExpr(n, r.start, ((k, r.step, len(r)),)))
        return MGrid(exprs)


mgrid = _MGridMaker()


def guard_range(start: int, stop: int, step: int, size: int) -> None:
    """For the replay (nprof.nki.replay_guard): `len(range(start, stop, step)) == size` holds, `step` fixed."""
    guard(step, step, step + 1)
    span, a = (stop - start, step) if step > 0 else (start - stop, -step)
    if size:
        guard(span, (size - 1) * a + 1, size * a + 1)
    else:
        guard(span, None, 1)
