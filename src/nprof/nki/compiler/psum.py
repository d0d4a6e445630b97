"""`nki.compiler.psum`: PSUM allocation control (see `nprof.nki.compiler`)."""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Space
from nprof.nki.compiler._direct import DirectBuffer, check_callable


def auto_alloc() -> Any:
    """Automatic PSUM allocation: `nl.psum`."""
    from nprof.nki.language import psum

    return psum


def alloc(func: Any) -> DirectBuffer:
    """Direct PSUM allocation: `func(idx, pdim_size, fdim_size) -> (bank, start_partition, byte_addr)`
    (placed as given: `nprof.nki.direct`)."""
    check_callable("nki.compiler.psum.alloc", func)
    return DirectBuffer("nki.compiler.psum.alloc", Space.PSUM, {"func": func})


def mod_alloc(*, base_bank: int, base_addr: int = 0, base_partition: int = 0, num_bank_tiles: Any = (),
              num_par_tiles: Any = (), num_free_tiles: Any = ()) -> Any:  # fmt: skip
    """Direct PSUM allocation rotating over banks from `base_bank` (placed as given: `nprof.nki.direct`)."""
    return DirectBuffer("nki.compiler.psum.mod_alloc", Space.PSUM, {"base_bank": base_bank, "base_addr": base_addr,
                        "base_partition": base_partition, "num_bank_tiles": num_bank_tiles,
                        "num_par_tiles": num_par_tiles, "num_free_tiles": num_free_tiles})  # fmt: skip
