"""Virtual registers of the newer NKI API: `nisa.register_alloc`, `register_move`, `register_load`, `register_store`.

AWS's API reference (nki.isa, newer than Neuron 2.26): a virtual register is a
32-bit scalar register of an engine sequencer, allocated with
`register_alloc(x=None)` (uninitialised, or set to the immediate integer `x`),
set with `register_move(dst, src)` (an integer constant or another register),
loaded from a one-element HBM/SBUF tensor with `register_load(dst, src)` and
stored to one with `register_store(dst, src)`. Under a tracing frontend (which
nprof is) a register's value is not known while the kernel is built, so using
one in Python control flow or converting it with `int()` / `range()` is a
`TypeError`, as the reference states for NKI's tracer.

Model (stated): a register is a hidden one-element int32 SBUF tile, and each
register operation one small instruction on it: a GpSimdE memset for an
immediate, a VectorE copy between a register and an SBUF tensor or another
register, one DMA to or from HBM. Operations on immediates and registers only
(`register_alloc(x)`, `register_move`) are engine-sequencer operations that
"do not access SBUF, PSUM, or HBM" (the reference): tagged `register`, they take
no engine time (`nprof.arch.cost`). Loads and stores read or write memory and
cost their copy or DMA (no published figure for a sequencer's scalar access).
Registers hold integers: loading from
or storing to a floating-point tensor is refused (the reference gives no
conversion).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from nprof.arch.isa import Engine, Opcode, Space
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor

_INT = ("int32", "uint32", "int16", "uint16", "int8", "uint8")
_TRACED = (
    "a virtual register's value is not known while the kernel is traced (NKI's tracer raises TypeError too); "
    "use it as a register argument, not in Python control flow"
)


class VirtualRegister:
    """A virtual register (see module doc); `tile` is the one-element int32 SBUF tile that models it."""

    __slots__ = ("tile",)

    def __init__(self, tile: NkiTensor) -> None:
        self.tile = tile

    def __repr__(self) -> str:
        return f"VirtualRegister({self.tile.name})"

    def __bool__(self) -> bool:
        raise TypeError(_TRACED)

    def __int__(self) -> int:
        raise TypeError(_TRACED)

    def __index__(self) -> int:
        raise TypeError(_TRACED)


def _register(x: Any, what: str) -> VirtualRegister:
    if not isinstance(x, VirtualRegister):
        raise kernel_error(f"{what} must be a virtual register (nisa.register_alloc()), got {type(x).__name__}")
    return x


def _immediate(x: Any, what: str) -> int:
    """`x` as a 32-bit integer constant; KernelError for anything else."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise kernel_error(f"{what} must be an integer constant or a virtual register, got {x!r}")
    if not -(2**31) <= int(x) < 2**31:
        raise kernel_error(f"{what} {x} does not fit a 32-bit register (int32 here)")
    return int(x)


def _scalar_tensor(t: Any, what: str) -> NkiTensor:
    """`t` checked as a one-element integer tensor (HBM or SBUF)."""
    if not isinstance(t, NkiTensor):
        raise kernel_error(f"{what} must be a tensor with exactly one element, got {type(t).__name__}")
    if math.prod(t.shape) != 1:
        raise kernel_error(f"{what} must have exactly one element (shape [1] or [1, 1]), got shape {t.shape}")
    if t.dtype_name not in _INT:
        raise kernel_error(f"{what} is {t.dtype_name}: registers hold integers; use an integer tensor (int32)")
    if t.space is Space.PSUM:
        raise kernel_error(f"{what} is in PSUM: registers load from and store to HBM or SBUF")
    return t


def _move(dst: NkiTensor, src: NkiTensor, register: bool = False) -> None:
    """One instruction copying a one-element tensor into another (DMA when either is in HBM; `register`: a
    register-to-register move, no engine time)."""
    src2, dst2 = src.reshape((1, 1)) if src.ndim != 2 else src, dst.reshape((1, 1)) if dst.ndim != 2 else dst
    if src.is_hbm or dst.is_hbm:
        _trace.current().dma(dst2, src2)
    else:
        _c.emit(Engine.VECTOR, Opcode.TENSOR_COPY, [dst2], [_c.tile(src2)], register=register or None)


def register_alloc(x: int | None = None) -> VirtualRegister:
    """A new virtual register, uninitialised or set to the integer `x` (one memset; see module doc)."""
    reg = VirtualRegister(_c.new_tile((1, 1), "int32"))
    if x is not None:
        _c.emit(Engine.GPSIMD, Opcode.MEMSET, [reg.tile], [], value=float(_immediate(x, "register_alloc(x)")),
                register=True)  # fmt: skip
    return reg


def register_move(dst: Any, src: Any) -> None:
    """dst = src: an integer constant (a memset) or another register's value (a copy)."""
    reg = _register(dst, "register_move dst")
    if isinstance(src, VirtualRegister):
        _move(reg.tile, src.tile, register=True)
    else:
        _c.emit(Engine.GPSIMD, Opcode.MEMSET, [reg.tile], [], value=float(_immediate(src, "register_move src")),
                register=True)  # fmt: skip


def register_load(dst: Any, src: Any) -> None:
    """dst = the integer held by `src`, a one-element HBM or SBUF tensor."""
    _move(_register(dst, "register_load dst").tile, _scalar_tensor(src, "register_load src"))


def register_store(dst: Any, src: Any) -> None:
    """Write the register `src`'s value into `dst`, a one-element HBM or SBUF integer tensor."""
    _move(_scalar_tensor(dst, "register_store dst"), _register(src, "register_store src").tile)
