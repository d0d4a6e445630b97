"""Direct-allocation buffers of `nki.compiler.sbuf` / `nki.compiler.psum` (placement: `nprof.nki.direct`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nprof.arch.isa import Space
from nprof.nki.buffers import Buffer
from nprof.nki.source import kernel_error


class DirectBuffer(Buffer):
    """A `buffer=` placing each logical tile where `locate` says (see `nprof.nki.direct`)."""

    def __init__(self, api: str, space: Space, request: dict[str, Any]) -> None:
        super().__init__(api, space)
        self.request = request

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.request.items())})"

    def locate(self, idx: tuple[int, ...], parts: int, fbytes: int, preset: Any) -> tuple[int, int]:
        """(start partition, byte offset in SBUF/PSUM per partition) of logical tile `idx`."""
        r = self.request
        if "func" in r:
            got = r["func"](idx=idx, pdim_size=parts, fdim_size=fbytes)  # by keyword: partial(f, bank_map=...) works
            want = 3 if self.space is Space.PSUM else 2
            if not isinstance(got, tuple | list) or len(got) != want:
                what = "(bank, start_partition, byte_addr)" if want == 3 else "(start_partition, byte_addr)"
                raise kernel_error(f"{self.name}: the allocation function returned {got!r}; it must return {what}")
            vals = [int(v) for v in got]
        else:
            part = modulo(r["base_partition"], r["num_par_tiles"], parts)(idx)
            addr = modulo(r["base_addr"], r["num_free_tiles"], fbytes)(idx)
            vals = (
                [modulo(r["base_bank"], r["num_bank_tiles"], 1)(idx), part, addr] if "base_bank" in r else [part, addr]
            )
        if self.space is Space.PSUM:
            bank, part, addr = vals
            if addr != 0:
                raise kernel_error(f"{self.name}: byte_addr must be 0 in a PSUM bank (NKI 2.26), got {addr}")
            return part, bank * preset.psum_bank_bytes
        return vals[0], vals[1]


def modulo(base: int, tiles: Any, scale: int) -> Callable[[tuple[int, ...]], int]:
    """The modulo scheme of `mod_alloc` (AWS nki.compiler reference): block index `idx` taken modulo `tiles`
    (one count per leading block axis; empty means every axis 1), linearized row-major over `tiles`, times
    `scale`, plus `base`."""
    shape = tuple(int(t) for t in (tiles if isinstance(tiles, tuple | list) else (tiles,)))

    def at(idx: tuple[int, ...]) -> int:
        counts = shape or (1,) * len(idx)
        folded = [i % n for i, n in zip(idx, counts, strict=False)]
        return int(base) + scale * sum(i * math.prod(counts[d + 1 :]) for d, i in enumerate(folded))

    return at


def check_callable(api: str, func: Any) -> None:
    if not callable(func):
        raise TypeError(f"{api}(func) takes a callable mapping a block index to an address, got {func!r}")
