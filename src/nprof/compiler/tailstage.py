"""The last output stores of a program gathered in SBUF and stored by one DMA.

Contract: every DMA takes a trigger slot (cost model: consecutive triggers `dma_issue_gap_ns` apart, on any
queue), and a graph's outputs (a forward's saved activations and result, a backward's gradients) are stored
one DMA each as their kernels finish, so at the end of a graph the last stores queue up behind each other:
the nanoGPT block's forward ends its compute at 16.4 us and its fourth-last store is triggered then, its
last at 18.0 us (19.4 us run). `stage_tail(program)` replaces the last K plain output stores (program order)
by one copy each (VectorE, GpSimdE or ScalarE in turn, at the store's place and with its dependencies) into
a staging tile above the program's SBUF high-water mark, and one DMA of that tile (after the last copy)
into a new output `TAIL_NAME` ``[P, W]``: the member of store k takes the columns j_k .. j_k + F_k (F_k the
store's elements per partition) on the store's own partitions. Of K = 0 (the program unchanged) and the
candidate K, the one the device's timing model runs fastest is kept (the unchanged program on ties). The
layout goes to the program's meta under `TAIL_META` (JSON ``[P, W, [[output, j, dst, p0, P_k], ...]]``, dst the
store's HBM access: offset, partition stride, partitions, free dims; p0 and P_k its SBUF partitions; a DMA moves
element k of its source, row-major, to element k of its destination) and `unpack_tail` writes each member's values
into its output (by the store's own access pattern) before the other output packs are cut
(`nprof.compiler.staging.unpack_outputs`).

A store is staged only when nothing depends on it: no later instruction reads or overwrites what it wrote
and no later instruction overwrites its SBUF source (the tracer records those conflicts as dependencies,
`nprof.nki.deps`), its source is an SBUF window and both sides are fp32 (the copy moves the bits
unchanged). Then the copy reads the same values the store read, nothing reads the output on the device,
the staging tile is written by the copies only (above every allocation), and the host writes each member
to exactly the elements its store wrote, last (it was their last writer): outputs are bit for bit the same.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space
from nprof.arch.presets import get_preset
from nprof.program.model import Program, TensorDecl

ENABLED = True  # module switch (tests compare with the unstaged program)
TAIL_NAME = "packed.tail"
TAIL_META = "packed_tail"
TAIL_SBUF = "sbuf_tail"
MAX_MEMBERS = 16  # the largest K tried
ALIGN = 64  # bytes: the staging tile's first byte in each partition
COPY_ENGINES = (Engine.VECTOR, Engine.GPSIMD, Engine.SCALAR)


def _stageable(ins: Instruction, outputs: set[str]) -> bool:
    if ins.opcode is not Opcode.DMA_DIRECT2D or ins.attrs or len(ins.ins) != 1 or len(ins.outs) != 1:
        return False
    src, dst = ins.ins[0], ins.outs[0]
    return (src.space is Space.SBUF and dst.space is Space.HBM and dst.tensor in outputs
            and src.dtype == "float32" and dst.dtype == "float32")  # fmt: skip


def candidates(program: Program) -> list[int]:
    """Indices of the stores that may be staged (see module doc), in program order."""
    outputs = {t.name for t in program.tensors if t.kind == "output"}
    used = {d for ins in program.instructions for d in ins.deps}
    return [i for i, ins in enumerate(program.instructions) if i not in used and _stageable(ins, outputs)]


def staged(program: Program, members: Sequence[int], top: int | None = None) -> Program | None:
    """`program` with the stores `members` (indices, ascending) staged into `TAIL_NAME`; None when the staging
    tile does not fit in SBUF. `top`: `high_water(program)` when known."""
    preset = get_preset(program.preset)
    instructions = program.instructions
    base = -(-(high_water(program) if top is None else top) // ALIGN) * ALIGN
    columns: dict[int, int] = {}
    width = 0
    for i in members:
        columns[i] = width
        width += instructions[i].ins[0].free_elements
    parts = max(instructions[i].ins[0].partition_start + instructions[i].ins[0].partitions for i in members)
    if base + 4 * width > preset.sbuf_partition_bytes:
        return None
    out: list[Instruction] = []
    new_index: dict[int, int] = {}
    member_set, last = set(members), members[-1]
    copies: list[int] = []
    for i, ins in enumerate(instructions):
        deps = tuple(new_index[d] for d in ins.deps)
        if i in member_set:
            src = ins.ins[0]
            dst = Access(Space.SBUF, TAIL_SBUF, "float32", base + 4 * columns[i], src.partitions,
                         ((1, src.free_elements),), src.partition_start)  # fmt: skip
            engine = COPY_ENGINES[len(copies) % len(COPY_ENGINES)]
            copies.append(len(out))
            out.append(Instruction(engine, Opcode.TENSOR_COPY, (dst,), (src,), (), deps, -1, ins.source, ins.layer,
                                   ins.hlo_name))  # fmt: skip
            if i == last:
                whole_src = Access(Space.SBUF, TAIL_SBUF, "float32", base, parts, ((1, width),), 0)
                whole_dst = Access(Space.HBM, TAIL_NAME, "float32", 0, parts, ((1, width),), 0, width)
                out.append(Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (whole_dst,), (whole_src,), (),
                                       tuple(copies), ins.queue, ins.source, None, None))  # fmt: skip
            continue
        new_index[i] = len(out)
        out.append(ins if deps == ins.deps else dataclasses.replace(ins, deps=deps))
    layout = [parts, width, [[instructions[i].outs[0].tensor, columns[i], _pattern(instructions[i].outs[0]),
                              instructions[i].ins[0].partition_start, instructions[i].ins[0].partitions]
                             for i in members]]  # fmt: skip
    meta = {**program.meta, TAIL_META: json.dumps(layout), "allocations": _allocations(program, base, width, parts)}
    tensors = (*program.tensors, TensorDecl(TAIL_NAME, (parts * width,), "float32", "output"))
    return dataclasses.replace(program, tensors=tensors, instructions=tuple(out), meta=meta,
                               sbuf_bytes=base + 4 * width)  # fmt: skip


def high_water(program: Program) -> int:
    """Bytes per partition below the end of every SBUF byte any instruction touches (and every recorded
    allocation): the staging tile goes above it."""
    from nprof.arch.isa import ITEMSIZE

    top = program.sbuf_bytes
    for entry in json.loads(program.meta.get("allocations", "[]")):
        if entry[0] == "sbuf":
            top = max(top, int(entry[2]) + int(entry[3]))
    for ins in program.instructions:
        for a in (*ins.outs, *ins.ins):
            if a.space is Space.SBUF:
                size = ITEMSIZE[a.dtype]
                reach = sum((n - 1) * stride for stride, n in a.free if stride > 0)
                top = max(top, a.offset + (reach + 1) * size)
    return top


def _pattern(a: Access) -> list[object]:
    return [a.offset, a.partition_stride, a.partitions, [list(d) for d in a.free]]


def _allocations(program: Program, base: int, width: int, parts: int) -> str:
    table = json.loads(program.meta.get("allocations", "[]"))
    table.append(["sbuf", TAIL_SBUF, base, 4 * width, parts, "tailstage.py"])
    return json.dumps(table)


def stage_tail(program: Program) -> Program:
    """Of `program` and its versions with the last K stageable stores staged (K = 2 .. `MAX_MEMBERS`, within the
    timing budget of `prefetch.SEARCH_WORK`), the one the device's timing model runs fastest; `program` itself on
    ties (see module doc)."""
    from nprof.compiler.listsched import makespan
    from nprof.compiler.prefetch import SEARCH_EVALS, SEARCH_WORK

    if not ENABLED or TAIL_NAME in {t.name for t in program.tensors}:
        return program
    if any(ins.engine is Engine.CC for ins in program.instructions):
        return program  # collectives: their timing needs the other ranks
    found = candidates(program)
    if len(found) < 2:
        return program
    preset = get_preset(program.preset)
    best, best_ns = program, makespan(program, preset)
    top = high_water(program)
    budget = min(SEARCH_EVALS, SEARCH_WORK // max(len(program.instructions), 1))
    for k in range(2, min(MAX_MEMBERS, len(found), budget) + 1):
        candidate = staged(program, found[-k:], top)
        if candidate is None:
            break
        ns = makespan(candidate, preset)
        if ns < best_ns:
            best, best_ns = candidate, ns
    return best


def _indices(pattern: Sequence[Any]) -> np.ndarray:
    """Flat HBM element indices [partitions, elements] of a store's access pattern `_pattern`."""
    offset, pstride, partitions, free = pattern
    parts = int(partitions)
    idx = int(offset) + np.arange(parts, dtype=np.int64).reshape(parts, 1) * int(pstride)
    for stride, size in free:
        steps = np.arange(int(size), dtype=np.int64) * int(stride)
        idx = (idx[:, :, None] + steps[None, None, :]).reshape(parts, -1)
    return idx


def unpack_tail(program: Program, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`outputs` with every staged store's values written into its output (flat values) and the tail pack
    dropped; unchanged for a program without one."""
    out = dict(outputs)
    text = program.meta.get(TAIL_META)
    if not text or TAIL_NAME not in out:
        return out
    parts, width, layout = json.loads(text)
    table = np.asarray(out.pop(TAIL_NAME)).reshape(int(parts), int(width))
    for name, j, pattern, p0, parts_src in layout:
        idx = _indices(pattern).reshape(-1)  # the store's elements in transfer order
        cols = idx.size // int(parts_src)
        flat = np.array(out[name], copy=True).reshape(-1)
        flat[idx] = table[int(p0) : int(p0) + int(parts_src), int(j) : int(j) + cols].reshape(-1)
        out[name] = flat.reshape(np.shape(out[name]))
    return out
