"""PSUM accumulation groups: which zero-fills of PSUM the hardware never runs.

Contract: `elided_fills(n, fill, acc_matmul, out0, offsets, flat) -> np.ndarray` (bool per instruction) marks
every zero-fill of PSUM (`fill`: a MEMSET of 0 into one PSUM region, `is_zero_fill_attrs` decides the value)
whose first dependent is a MATMUL accumulating (`acc_matmul`) into exactly the same region (`out0`: the code
of each instruction's first written operand, equal codes for equal operands, -1 when none). Public source:
the NKI matmul tutorial ("The first `nisa.nc_matmul` call overwrites the contents of the `psum_buf`, with
subsequent calls ... accumulating results"): an accumulation group starts by overwriting, so
`nl.zeros(..., buffer=nl.psum)` before it costs nothing. The timing model gives such a memset no duration
and no place on its engine's queue; the matmul still waits for everything the memset waited for (the memset
starts when its own dependencies end). Numerics are unchanged (0 + x = x).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def attr(attrs: tuple[tuple[str, Any], ...], name: str, default: Any = None) -> Any:
    """`Instruction.attr` on an attrs tuple: the first value named `name`."""
    for key, value in attrs:
        if key == name:
            return value
    return default


def is_zero_fill_attrs(attrs: tuple[tuple[str, Any], ...]) -> bool:
    """The attrs of a MEMSET that writes 0 (its `value`, default 0.0)."""
    return float(attr(attrs, "value", 0.0)) == 0.0


def elided_fills(
    fill: np.ndarray, acc_matmul: np.ndarray, out0: np.ndarray, offsets: np.ndarray, flat: np.ndarray
) -> np.ndarray:
    """Bool per instruction: a PSUM zero-fill that starts an accumulation group (see module doc)."""
    n = len(fill)
    out = np.zeros(n, bool)
    if not fill.any():
        return out
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    hit = fill[flat]
    # dependency lists are grouped by owner in program order, so a fill's first entry has its first user
    filled, at = np.unique(flat[hit], return_index=True)
    user = owner[hit][at]
    ok = acc_matmul[user] & (out0[user] == out0[filled]) & (out0[filled] >= 0)
    out[filled[ok]] = True
    return out
