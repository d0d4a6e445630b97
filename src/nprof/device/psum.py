"""PSUM accumulation groups: which zero-fills of PSUM the hardware never runs.

Contract: `elided_memsets(program, offsets, flat, candidates) -> np.ndarray` (bool per instruction) marks every
MEMSET of 0 into PSUM (`is_zero_fill`; `candidates` are the indices of those, ascending) whose first dependent
is a MATMUL accumulating into exactly the same region. Public source: the
NKI matmul tutorial ("The first `nisa.nc_matmul` call overwrites the contents of the `psum_buf`, with
subsequent calls ... accumulating results"): an accumulation group starts by overwriting, so
`nl.zeros(..., buffer=nl.psum)` before it costs nothing. The timing model gives such a memset no duration
and no place on its engine's queue; the matmul still waits for everything the memset waited for (the memset
starts when its own dependencies end). Numerics are unchanged (0 + x = x).
"""

from __future__ import annotations

import numpy as np

from nprof.arch.isa import Instruction, Opcode, Space
from nprof.program.model import Program


def is_zero_fill(ins: Instruction) -> bool:
    """A MEMSET of 0 into one PSUM region."""
    return (
        ins.opcode is Opcode.MEMSET
        and len(ins.outs) == 1
        and ins.outs[0].space is Space.PSUM
        and float(ins.attr("value", 0.0)) == 0.0
    )


def elided_memsets(program: Program, offsets: np.ndarray, flat: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Bool per instruction: a PSUM zero-fill that starts an accumulation group (see module doc)."""
    instrs = program.instructions
    n = len(instrs)
    out = np.zeros(n, bool)
    if not len(candidates):
        return out
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    hit = np.isin(flat, candidates)
    first_user: dict[int, int] = {}
    for d, o in zip(flat[hit].tolist(), owner[hit].tolist(), strict=True):
        if d not in first_user or o < first_user[d]:
            first_user[d] = o
    for m, u in first_user.items():
        user = instrs[u]
        if user.opcode is Opcode.MATMUL and user.attr("accumulate", False) and user.outs[:1] == instrs[m].outs:
            out[m] = True
    return out
