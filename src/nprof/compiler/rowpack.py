"""Graph inputs of at most `pmax` rows share one compiler-allocated HBM buffer and move in one DMA.

Contract: every DMA costs a trigger slot (cost model v2: consecutive DMA triggers are `dma_issue_gap_ns`
apart on any queue) and a fixed latency, so a graph reading ten activations of [128, 64] by ten DMAs spends
ten trigger slots before its last operand arrives. The Neuron compiler, not the framework, chooses where a
graph's tensors live in HBM, so the fp32 graph inputs too large for the small-input pack
(`nprof.compiler.packing`) that are R rows of C elements (the last dim; C <= `ROW_COLS_MAX`), R at most the
pack's partitions P (R < P: the member's columns leave P - R partitions unused, at most `PAD_BYTES_MAX` bytes),
are laid side by side in one input `ROWS_NAME` ``[P, W]`` row-major (W the columns, at most
`ROWS_WIDTH_MAX`): element (r, c) of the member whose first column is j at ``r * W + j + c`` (`plan_rows`).
The first load of any member (`load_rows`) loads the whole pack with one DMA of P partitions (one contiguous
run each) and the fusion cache (`nprof.compiler.fusion`) keeps the tile; a member's row block is then a
window of it, and any other access of a member (a transposed load) is a DMA of its own.

`rows_program(program, pack, written)` moves every access of a member that is affine in the pack's layout
(`in_rows`: a row stride a multiple of C, column moves within one row) into the pack, unless the member is
written by the program (`written`: its reads stay on its own tensor, which then stays declared beside the pack);
the layout is recorded in `packing.PACKED_META` under `ROWS_NAME` as ``[member, column, elements, C]`` entries
and `packing.pack_inputs` builds the pack's values from the members' on every call (bit for bit).
What the device does is unchanged in kind: the producer of a saved activation (the forward) stores it with
its own DMA, which may target its place in the backward's pack at the same cost (same partitions, same runs).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from nprof.arch.isa import Access, Instruction, Space
from nprof.nki.tensor import NkiTensor
from nprof.program.model import Program, TensorDecl

ROWS_NAME = "packed.rows"
RNG_PREFIX = "rng."  # program inputs the runtime fills with fresh random numbers on every call: never packed
ROW_COLS_MAX = 2048  # elements of a member's rows
ROWS_WIDTH_MAX = 4096  # columns of the pack (16 KiB per partition of the kept tile)
MIN_MEMBERS = 2
# bytes of padding rows a member of fewer rows than the pack may bring (its rows R < P leave P - R partitions of
# its columns unused, moved all the same): 64 KiB take 0.24 us of the DMA pool's 272 GB/s, a third of the trigger
# slot (`dma_issue_gap_ns`, 0.78 us) its own DMA would take
PAD_BYTES_MAX = 64 * 1024
# bytes of the pack up to which members with padding rows join it: every consumer of a member waits for the whole
# pack. Measured (bench/compile.py, nanoGPT block): the forward's 64-row pack taking the 32-row position embedding
# and mask (139 KiB) 20.4 -> 19.5 us; the backward's 512 KiB pack of 128 rows also taking its 64-row saved
# weights (800 KiB: 4 DMAs fewer) 25.2 -> 27.0 us, as its first consumer waited for it
PADDED_PACK_MAX = 256 * 1024


@dataclass(frozen=True)
class RowPack:
    """The layout of the row pack: member -> (first column, rows, columns); `parts` x `width` elements."""

    members: Mapping[str, tuple[int, int, int]]
    parts: int
    width: int

    def key(self) -> Access:
        """The pattern of the one DMA loading the whole pack (P partitions of W elements)."""
        return Access(Space.HBM, ROWS_NAME, "float32", 0, self.parts, ((1, self.width),), 0, self.width)


def plan_rows(decls: Sequence[TensorDecl], exclude: Iterable[str], pmax: int) -> RowPack | None:
    """The row pack of the fp32 inputs among `decls` (not in `exclude`) of at most `pmax` rows: for a pack of P
    partitions (P one of their row counts), the inputs of P rows and those of fewer rows whose padding rows
    bring at most `PAD_BYTES_MAX` bytes while the pack stays within `PADDED_PACK_MAX`, in declaration order
    while the width allows; the P giving the most elements (the larger P on ties) among those with at least
    `MIN_MEMBERS` members; None when no P has."""
    skip = set(exclude)
    shapes: dict[str, tuple[int, int]] = {}
    for d in decls:
        if d.kind != "input" or d.dtype != "float32" or d.name in skip or not d.shape or d.name.startswith(RNG_PREFIX):
            continue
        cols = int(d.shape[-1])
        rows = d.elements // max(cols, 1)
        if 0 < rows <= pmax and 0 < cols <= ROW_COLS_MAX:
            shapes[d.name] = (rows, cols)
    best: tuple[int, int, dict[str, tuple[int, int, int]]] | None = None
    for parts in sorted({rows for rows, _ in shapes.values()}):
        chosen = [name for name, (rows, cols) in shapes.items() if rows == parts]
        width = sum(shapes[name][1] for name in chosen)
        for name, (rows, cols) in shapes.items():  # then members with padding rows, while the pack stays small
            if rows < parts and (parts - rows) * cols * 4 <= PAD_BYTES_MAX and parts * (width + cols) * 4 <= (
                PADDED_PACK_MAX
            ):
                chosen.append(name)
                width += cols
        members: dict[str, tuple[int, int, int]] = {}
        width = elements = 0
        for name in (name for name in shapes if name in set(chosen)):  # declaration order
            rows, cols = shapes[name]
            if width + cols <= ROWS_WIDTH_MAX:
                members[name] = (width, rows, cols)
                width += cols
                elements += rows * cols
        if len(members) >= MIN_MEMBERS and (best is None or elements >= best[1]):
            best = (parts, elements, members)
    if best is None:
        return None
    parts, _, members = best
    return RowPack(members, parts, max(j + cols for j, _, cols in members.values()))


def in_rows(pack: RowPack, a: Access) -> Access | None:
    """`a` (an HBM access of a member) as the same elements of the pack, or None when that is not one affine
    pattern (a dim stepping across a row boundary, a negative stride)."""
    j, _, cols = pack.members[a.tensor]
    r0, c0 = divmod(a.offset, cols)
    reach = 0

    def moved(stride: int, size: int) -> int | None:
        nonlocal reach
        if size == 1 or stride % cols == 0:
            return stride // cols * pack.width
        if 0 < stride < cols:
            reach += stride * (size - 1)
            return stride
        return None

    pstride = moved(a.partition_stride, a.partitions)
    free = [(moved(s, n), n) for s, n in a.free]
    if a.offset < 0 or pstride is None or any(s is None for s, _ in free) or c0 + reach >= cols:
        return None
    return dataclasses.replace(a, tensor=ROWS_NAME, offset=r0 * pack.width + j + c0, partition_stride=pstride,
                               free=tuple((int(s or 0), n) for s, n in free))  # fmt: skip


def load_rows(builder: object, pack: RowPack, a: Access, written: set[str]) -> NkiTensor | None:
    """The SBUF tile of the member access `a` as a window of the pack's tile (loaded by one DMA on first use,
    kept by the fusion cache of `builder`), or None: the caller loads it with a DMA of its own (an access
    that is no window of the tile, or a member the program writes)."""
    from nprof.compiler.kernels.hbm import window
    from nprof.nki import language as nl

    moved = in_rows(pack, a) if a.tensor not in written else None
    if moved is None:
        return None
    key = pack.key()
    if builder.lookup(key) is None:  # type: ignore[attr-defined]
        tile = nl.load(window(key), dtype=nl.float32)
        builder.flush()  # type: ignore[attr-defined]
        builder.remember(key, tile, stored=False)  # type: ignore[attr-defined]
    return builder.lookup(moved)  # type: ignore[attr-defined]


def rows_program(program: Program, pack: RowPack, written: set[str]) -> Program:
    """`program` with every affine access of a member the program does not write moved into the pack, the
    members no instruction reads any more undeclared, the pack declared when read, the layout in the meta."""
    from nprof.compiler.packing import PACKED_META

    def acc(a: Access) -> Access:
        if a.space is not Space.HBM or a.tensor not in pack.members or a.tensor in written:
            return a
        return in_rows(pack, a) or a

    def moved(ins: Instruction) -> Instruction:
        if not any(a.tensor in pack.members for a in (*ins.outs, *ins.ins)):
            return ins
        return dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))

    instructions = tuple(map(moved, program.instructions))
    read = {a.tensor for ins in instructions for a in (*ins.ins, *ins.outs) if a.space is Space.HBM}
    tensors = tuple(t for t in program.tensors if t.name != ROWS_NAME and (t.name not in pack.members
                                                                          or t.name in read))  # fmt: skip
    if ROWS_NAME not in read:
        return dataclasses.replace(program, tensors=tensors)
    decl = TensorDecl(ROWS_NAME, (pack.parts * pack.width,), "float32", "input")
    packs = {**json.loads(program.meta.get(PACKED_META, "{}")),
             ROWS_NAME: [[name, j, rows * cols, cols] for name, (j, rows, cols) in pack.members.items()]}  # fmt: skip
    meta = {**program.meta, PACKED_META: json.dumps(packs)}
    return dataclasses.replace(program, tensors=(decl, *tensors), instructions=instructions, meta=meta)


def rows_values(layout: Sequence[Sequence[object]], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The flat values of the row pack from its members' (`layout` as recorded by `rows_program`)."""
    entries = [(str(m), int(str(j)), int(str(n)), int(str(c))) for m, j, n, c in layout]
    parts = max(n // c for _, _, n, c in entries)
    width = max(j + c for _, j, _, c in entries)
    grid = np.zeros((parts, width), np.float32)
    for member, j, n, c in entries:
        grid[: n // c, j : j + c] = np.asarray(arrays[member], np.float32).reshape(n // c, c)
    return grid.reshape(-1)
