"""Direct-allocation buffers of `nki.compiler.sbuf` / `nki.compiler.psum` (see `nprof.nki.compiler`)."""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Space
from nprof.nki.language import _Buffer


class DirectBuffer(_Buffer):
    """A `buffer=` asking for direct allocation; nprof places the tile with its allocator and warns."""

    def __init__(self, api: str, space: Space, request: dict[str, Any]) -> None:
        super().__init__(api, space)
        self.request = request

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.request.items())})"


def check_callable(api: str, func: Any) -> None:
    if not callable(func):
        raise TypeError(f"{api}(func) takes a callable mapping a block index to an address, got {func!r}")
