"""Masks as NKI defines them: per-axis index ranges, loop-index conditions, and masked results.

`mask_box` turns a `mask=` into the box of indices an instruction processes
(AWS NKI docs, "NKI API Masking": each comparison gives one axis a range; the
compiler emits the instruction on the smaller tile, or skips it). A Python
bool is a condition on loop indices, which tracing has unrolled. `note_mask` /
`masked_box` remember the box a fresh result was computed in, so
`dst[...] = op(..., mask=m)` writes `dst` only there. `skipped_by` is the
all-or-nothing form for instructions that take only loop conditions.
`operand_masked` / `operand_box` are NKI's operand masking of matmul inputs
(`nisa.nc_matmul(lhsT[i_f < 64], rhs[i_f < 256])`: the same docs section).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.nki.index import Predicate
from nprof.nki.source import kernel_error

if TYPE_CHECKING:  # tensor.py re-exports mask_box, so it is imported lazily here
    from nprof.nki.tensor import NkiTensor, OnChip


def mask_box(mask: Predicate | bool, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """The box of indices `mask` keeps within `shape` (NKI masks are per-axis ranges).

    A Python bool (a condition on loop indices, which tracing unrolls: `mask=q_tile >= k_tile`) keeps all
    or nothing; an instruction whose box is empty is not emitted, as the compiler skips it.
    """
    if isinstance(mask, bool | np.bool_):
        return [(0, size if mask else 0) for size in shape]
    if not isinstance(mask, Predicate):
        raise kernel_error(f"mask= must be a comparison of nl.arange expressions, got {type(mask).__name__}")
    try:
        box = mask.box(shape)
    except TypeError as err:
        raise kernel_error(str(err)) from None
    if box is None:
        raise kernel_error(
            "a mask gives each axis a range of valid indices (e.g. i_p < n); this one couples two axes (a triangle, "
            "not a box): apply it with nisa.affine_select(pred, tile, fill) instead"
        )
    return box


_MASKED: weakref.WeakKeyDictionary[OnChip, list[tuple[int, int]]] = weakref.WeakKeyDictionary()
"""Fresh result tiles computed under a mask -> the box they hold (`dst[...] = nl.add(..., mask=m)`)."""


def note_mask(result: NkiTensor, box: list[tuple[int, int]]) -> None:
    """`result` (an instruction's output) was computed only inside `box`; remembered if it is a whole tile."""
    from nprof.nki.tensor import NkiTensor, OnChip

    base = result.base
    if isinstance(base, OnChip) and result.access_key() == NkiTensor.root(base).access_key():
        _MASKED[base] = box


def masked_box(value: NkiTensor) -> list[tuple[int, int]] | None:
    """The box a whole tile was computed in (see `note_mask`), None if it was computed whole.

    NKI lowers `dst[...] = op(..., mask=m)` into one instruction writing `dst` under the mask, so elements of
    `dst` outside the mask keep their values; copying the whole result would overwrite them.
    """
    from nprof.nki.tensor import NkiTensor, OnChip

    if not _MASKED.data:  # type: ignore[attr-defined]  # (CPython's dict inside; no masked result alive: skip the weak-key lookup)
        return None
    base = value.base
    if isinstance(base, OnChip) and base in _MASKED and value.access_key() == NkiTensor.root(base).access_key():
        return _MASKED[base]
    return None


def skipped_by(mask: Any, what: str) -> bool:
    """For instructions whose mask can only select all or nothing (nc_matmul): True when `mask` is False.

    A Python bool is a condition on loop indices (tracing unrolls loops); a per-axis mask of nl.arange terms
    on a matmul is refused — slice its operands instead.
    """
    if mask is None:
        return False
    if isinstance(mask, bool | np.bool_):
        return not mask
    raise kernel_error(f"{what}: mask= takes a condition on loop indices here; slice the operands instead")


_OPERAND: weakref.WeakKeyDictionary[NkiTensor, tuple[tuple[int, ...], list[tuple[int, int]]]] = (
    weakref.WeakKeyDictionary()
)
"""Views made by operand masking (`tile[mask]`) -> (the shape before masking, the box the mask keeps)."""


def operand_masked(view: NkiTensor, mask: Any) -> NkiTensor:
    """`view[mask]`: NKI's operand masking (AWS NKI docs, "NKI API Masking": matmul operands take a mask of
    their own, since stationary and moving free axes are indistinguishable in one `mask=`).

    Returns `view` narrowed to the mask's box and remembers its shape before masking, so that nc_matmul
    computes on the smaller operand and writes only the matching box of its full-shape result. A mask that
    keeps the whole view returns `view` itself.
    """
    if view.is_hbm:
        raise kernel_error(f"{view.name!r}[mask]: operand masking applies to on-chip matmul operands; pass mask= "
                           "to nl.load / nl.store to mask a DMA")  # fmt: skip
    box = mask_box(mask, view.shape)
    if all(b == (0, size) for b, size in zip(box, view.shape, strict=True)):
        return view
    sub = view.restrict(box)
    _OPERAND[sub] = (view.shape, box)
    return sub


def operand_box(view: Any) -> tuple[tuple[int, ...], list[tuple[int, int]]] | None:
    """(shape before masking, box) of a view made by operand masking, None for any other value."""
    if not _OPERAND.data:  # type: ignore[attr-defined]  # (CPython's dict inside; no operand-masked view alive: skip the weak-key lookup)
        return None
    try:
        return _OPERAND.get(view)
    except TypeError:  # unhashable values are never masked operands
        return None


def mark_operand(view: NkiTensor, full: tuple[int, ...], box: list[tuple[int, int]]) -> None:
    """Record `view` as a masked operand (a copy or transpose of one keeps the mask of its input)."""
    _OPERAND[view] = (full, box)
