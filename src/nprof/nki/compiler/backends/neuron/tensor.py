"""`nki.compiler.backends.neuron.tensor.local_tile`: the type of on-chip (SBUF/PSUM) tiles.

`isinstance(t, local_tile)` is true for a view of an SBUF or PSUM tile and false for HBM tensors and anything
else. Tiles are made with `nl.ndarray(..., buffer=nl.sbuf|nl.psum)` (calling `local_tile` raises TypeError
saying so). See `nprof.nki.compiler.backends`.
"""

from __future__ import annotations

from typing import Any

from nprof.nki.tensor import NkiTensor


class _LocalTileType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, NkiTensor) and not obj.is_hbm


class local_tile(metaclass=_LocalTileType):  # AWS's name
    """The type of on-chip tiles (see module doc); not constructible."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("local_tile is the type of on-chip tiles; make one with nl.ndarray(shape, dtype, "
                        "buffer=nl.sbuf) (or nl.psum)")  # fmt: skip


__all__ = ["local_tile"]
