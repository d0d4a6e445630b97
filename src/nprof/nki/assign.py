"""Item assignment and in-place operators of tiles: `t[...] = value`, `acc += x` (shared by `nl`, `nisa` and the
tile operators; re-exported by `nprof.nki.compute`).

`t[...] = value` is one of: a pending matmul retargeted into `t` (PSUM), a
pending load DMAed straight into `t`, `nl.loop_reduce`'s accumulation, a
memset of a scalar, a DMA to or from HBM, or a VectorE copy (broadcasting a
[P, 1] or [1, F] value, storing a rank-1 reduction into a [P, 1] view). A
result computed under `mask=` writes only the mask's box. `acc += x` with a
fresh matmul accumulates into PSUM in place; otherwise the operation writes
into `acc`.
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Engine, Opcode, Space
from nprof.nki import trace
from nprof.nki.compute import binary, broadcast_operand, emit, is_scalar, tile
from nprof.nki.masks import masked_box
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor


def inplace(op: str, target: NkiTensor, other: Any) -> NkiTensor:
    """`target <op>= other`: PSUM `+=` of a fresh matmul accumulates in place; else an op into target."""
    builder = trace.current()
    if op == "add" and builder.is_pending(other, "matmul") and not target.is_hbm:
        builder.commit_matmul(matmul_target(target, other), accumulate=True)
        return target
    if target.is_hbm:
        raise kernel_error("cannot update an HBM tensor in place; compute in a tile and nl.store it")
    binary(op, target, other, out=target)
    return target


def matmul_target(view: NkiTensor, result: NkiTensor) -> NkiTensor:
    """Where a pending matmul's `result` lands in `view`: the box its masked operands computed (operand
    masking leaves the rest of the destination as it was), else all of `view`."""
    box = masked_box(result) if result.shape == view.shape else None
    return view if box is None else view.restrict(box)


def assign(view: NkiTensor, value: Any) -> None:
    """`view[...] = value`: copy, matmul retarget, memset of a scalar, or DMA to/from HBM."""
    if hasattr(view, "assign_from"):  # a view indexed with runtime values (nprof.nki.indirect)
        view.assign_from(value)
        return
    builder = trace.current()
    if isinstance(value, NkiTensor) and value.base is view.base and value.access_key() == view.access_key():
        return  # `t[...] += x` already updated t in place
    if builder.is_pending(value, "matmul") and not view.is_hbm:
        builder.commit_matmul(matmul_target(view, value), accumulate=False)
        return
    if hasattr(value, "assign_into"):  # nl.loop_reduce: the destination is op's other input
        value.assign_into(view)
        return
    if (
        builder.is_pending(value, "load")
        and view.space is Space.SBUF
        and value.shape == view.shape
        and value.dtype_name == view.dtype_name
    ):
        builder.commit_load(view)  # `tile[...] = nl.load(...)`: the DMA writes the tile directly
        return
    if is_scalar(value):
        if view.is_hbm:
            raise kernel_error("cannot assign a scalar to an HBM tensor; memset a tile and nl.store it")
        engine = Engine.VECTOR if view.space is Space.PSUM else Engine.GPSIMD  # GpSimdE has no PSUM port
        emit(engine, Opcode.MEMSET, [view], [], value=float(value))
        return
    if not isinstance(value, NkiTensor):
        raise kernel_error(f"cannot assign a {type(value).__name__} to a tile")
    if view.is_hbm or value.is_hbm:
        if value.shape != view.shape:
            raise kernel_error(f"cannot assign shape {value.shape} to {view.shape}")
        builder.dma(view, value)
        return
    value = tile(value)
    box = masked_box(value) if value.shape == view.shape else None
    if box is not None:  # a result computed under mask=: only its box is written (NKI masks the assignment)
        view, value = view.restrict(box), value.restrict(box)
    if value.ndim < view.ndim:  # a rank-1 [P] result (a reduction) stored into a [P, 1] view
        value = value.pad_free(view.ndim)
    elif value.ndim > view.ndim and all(s == 1 for s in value.shape[view.ndim :]):  # [P, 1] into a [P] view
        view = view.pad_free(value.ndim)
    if value.shape != view.shape:
        value = broadcast_operand(value, view.shape)
    emit(Engine.VECTOR, Opcode.TENSOR_COPY, [view], [value])
