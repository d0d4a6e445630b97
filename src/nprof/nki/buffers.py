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
