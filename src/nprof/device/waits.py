"""The wait-for graph of a Plan: what each instruction waits for before it can start, as successor lists.

Contract: `successors(plan) -> WaitGraph` gives, in CSR form (int64 arrays), every
instruction's successors: the instructions that wait for it. An instruction waits for its dependencies, for
the instruction before it on its track (`plan.prev`; a DMA for its *start*: the queue's descriptor stage frees
when the previous transfer starts), and on
TensorE for its partner track: an LDWEIGHTS for the *start* of the MATMUL/TRANSPOSE before it (`pm`, the
shadow weight buffer frees when that matmul starts), a MATMUL/TRANSPOSE for the end of the
LDWEIGHTS/TRANSPOSE before it (`pl`); `plan.pm`/`plan.pl` are n when there is none. `stuck_error` builds the
NprofError for instructions that can never start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from nprof.device.plan import Plan
from nprof.errors import NprofError
from nprof.program.model import Program


class WaitGraph(NamedTuple):
    """Successor lists (CSR) and the number of things each instruction waits for (int64 arrays)."""

    offsets: np.ndarray  # successors waiting for the end of i: succ[offsets[i]:offsets[i + 1]]
    succ: np.ndarray
    s_offsets: np.ndarray  # successors waiting for the start of i: s_succ[s_offsets[i]:s_offsets[i + 1]]
    s_succ: np.ndarray
    wait_count: np.ndarray  # how many waits each instruction has (a successor appears once per wait)


def _csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Successor lists of the edges src -> dst (src < n), grouped by src."""
    order = np.argsort(src, kind="stable")
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=offsets[1:])
    return offsets, dst[order]


def successors(plan: Plan) -> WaitGraph:
    """The wait-for graph of `plan` (see module doc)."""
    n = plan.n
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(plan.deps_offsets))
    idx = np.arange(n, dtype=np.int64)
    pm, pl = plan.pm, plan.pl
    dma = plan.is_dma
    prev = plan.prev
    end_src = np.concatenate([plan.deps_flat, np.where(dma, n, prev), pl])
    end_dst = np.concatenate([owner, idx, idx])
    start_src = np.concatenate([np.where(dma, prev, n), pm])
    start_dst = np.concatenate([idx, idx])
    keep, s_keep = end_src < n, start_src < n
    offsets, succ = _csr(end_src[keep], end_dst[keep], n)
    s_offsets, s_succ = _csr(start_src[s_keep], start_dst[s_keep], n)
    count = np.bincount(end_dst[keep], minlength=n) + np.bincount(start_dst[s_keep], minlength=n)
    return WaitGraph(offsets, succ, s_offsets, s_succ, count.astype(np.int64))


def stuck_error(plan: Plan, program: Program | None, count: Sequence[int] | np.ndarray) -> NprofError:
    """The error for a schedule that cannot proceed: names the first instruction still waiting and why."""
    i = int(np.flatnonzero(np.asarray(count) > 0)[0])
    name = f"program {program.name!r}: " if program is not None else ""
    opcode = plan.sig_opcode[int(plan.code[i])]
    src = plan.source[i].as_py()
    where = f"instruction {i} ({opcode}{', ' + src if src else ''})"
    lo, hi = int(plan.deps_offsets[i]), int(plan.deps_offsets[i + 1])
    blockers = [int(d) for d in plan.deps_flat[lo:hi] if count[int(d)] > 0 or int(d) >= i]
    why = f"it waits for instruction {blockers[0]}, which itself never starts" if blockers else "it never becomes ready"
    return NprofError(
        f"{name}{where} can never start: {why} (a dependency cycle or a semaphore that is never signalled); "
        "fix the program's dependencies"
    )
