"""The memory a tile or tensor lives in, as `buffer=` names it: `nl.sbuf`, `nl.psum`, `nl.shared_hbm`...

Contract: `Buffer(name, space)` is one such value (`repr` `nl.<name>`); `nprof.nki.language` defines the
NKI names, and `nprof.nki.compiler`'s direct-allocation buffers are subclasses that also place each tile.
"""

from __future__ import annotations

from nprof.arch.isa import Space


class Buffer:
    """A `buffer=` value: its NKI name and the memory space it allocates in."""

    def __init__(self, name: str, space: Space) -> None:
        self.name, self.space = name, space

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def _space(buffer: object, what: str) -> Space:
    """The memory space of a `buffer=` value (a Buffer, or its NKI name: "sbuf", "shared_hbm"...)."""
    if isinstance(buffer, Buffer):
        return buffer.space
    named = {"sbuf": Space.SBUF, "psum": Space.PSUM, "hbm": Space.HBM, "shared_hbm": Space.HBM,
             "private_hbm": Space.HBM}  # fmt: skip
    name = getattr(buffer, "value", buffer)  # (an enum member such as MemoryRegion.sbuf: its value)
    if isinstance(name, str) and name in named:
        return named[name]
    raise TypeError(f"nl.{what} takes a buffer (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, nl.private_hbm), "
                    f"got {buffer!r}")  # fmt: skip


def is_hbm(buffer: object) -> bool:
    """Is `buffer` any HBM buffer? (newer NKI API: nl.is_hbm)"""
    return _space(buffer, "is_hbm") is Space.HBM


def is_on_chip(buffer: object) -> bool:
    """Is `buffer` on chip (SBUF or PSUM)? (nl.is_on_chip)"""
    return _space(buffer, "is_on_chip") in (Space.SBUF, Space.PSUM)


def is_psum(buffer: object) -> bool:
    """Is `buffer` PSUM? (nl.is_psum)"""
    return _space(buffer, "is_psum") is Space.PSUM


def is_sbuf(buffer: object) -> bool:
    """Is `buffer` SBUF? (nl.is_sbuf)"""
    return _space(buffer, "is_sbuf") is Space.SBUF
