"""`nki.compiler.sbuf`: SBUF allocation control (see `nprof.nki.compiler`)."""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Space
from nprof.nki.compiler._direct import DirectBuffer, check_callable


def auto_alloc() -> Any:
    """Automatic SBUF allocation: `nl.sbuf`."""
    from nprof.nki.language import sbuf

    return sbuf


def alloc(func: Any) -> DirectBuffer:
    """Direct SBUF allocation: `func(idx, pdim_size, fdim_size) -> (start_partition, byte_addr)`
    (placed as given: `nprof.nki.direct`)."""
    check_callable("nki.compiler.sbuf.alloc", func)
    return DirectBuffer("nki.compiler.sbuf.alloc", Space.SBUF, {"func": func})


def mod_alloc(*, base_addr: int, base_partition: int = 0, num_par_tiles: Any = (), num_free_tiles: Any = ()) -> Any:
    """Direct SBUF allocation rotating over tiles from `base_addr` (placed as given: `nprof.nki.direct`)."""
    return DirectBuffer("nki.compiler.sbuf.mod_alloc", Space.SBUF, {"base_addr": base_addr,
                        "base_partition": base_partition, "num_par_tiles": num_par_tiles,
                        "num_free_tiles": num_free_tiles})  # fmt: skip
