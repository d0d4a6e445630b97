"""Removal of the stores nothing reads: the last pass over a fused program.

Contract: with the fusion cache (`nprof.compiler.fusion`) a consumer reads its operand from SBUF, so the
DMA that stored an intermediate ("internal" HBM tensor) may have no reader left. `dead_stores(program)`
(applied by `nprof.compiler.emit.Emitter.build`) removes the DMAs that write internal HBM tensors no
instruction reads, with the dependencies on them and the tensors' declarations; `remap_deps` renumbers
dependencies for a program from which instructions were removed.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from nprof.arch.isa import Opcode, Space
from nprof.program.model import Program


def dead_stores(program: Program) -> Program:
    """`program` without the DMAs writing internal HBM tensors that no instruction reads (see module doc)."""
    internal = {t.name for t in program.tensors if t.kind == "internal"}
    read = {a.tensor for ins in program.instructions for a in ins.ins if a.space is Space.HBM}
    dead = internal - read
    if not dead:
        return program
    instrs = program.instructions
    keep = [
        not (ins.opcode is Opcode.DMA_DIRECT2D and ins.outs and ins.outs[0].space is Space.HBM
             and ins.outs[0].tensor in dead)
        for ins in instrs
    ]  # fmt: skip
    deps = remap_deps([ins.deps for ins in instrs], keep)
    kept = [
        ins if new is ins.deps else dataclasses.replace(ins, deps=new)
        for ins, k, new in zip(instrs, keep, deps, strict=True)
        if k
    ]
    tensors = tuple(t for t in program.tensors if t.name not in dead)
    return dataclasses.replace(program, instructions=tuple(kept), tensors=tensors)


def remap_deps(deps: list[tuple[int, ...]], keep: list[bool]) -> list[tuple[int, ...]]:
    """Each instruction's deps renumbered for the program holding only the kept instructions (deps on removed
    ones dropped); an instruction whose deps do not change gets its own tuple back (the same object). Vectorised:
    one pass over all deps in numpy, not a Python loop per dependency."""
    n = len(deps)
    kept = np.asarray(keep, bool)
    new_index = np.cumsum(kept) - 1
    new_index[~kept] = -1
    lens = np.fromiter((len(d) for d in deps), np.int64, n)
    flat = np.fromiter(itertools.chain.from_iterable(deps), np.int64, int(lens.sum()))
    mapped = new_index[flat]
    seg = np.repeat(np.arange(n), lens)
    valid = mapped >= 0
    new_lens = np.bincount(seg[valid], minlength=n)
    changed = (np.bincount(seg, weights=(mapped != flat), minlength=n) > 0).tolist()
    values = mapped[valid].tolist()
    ends = np.cumsum(new_lens).tolist()
    starts = [0, *ends][:n]
    return [tuple(values[a:b]) if c else d for d, c, a, b in zip(deps, changed, starts, ends, strict=True)]
