"""Graph inputs of at most `pmax` rows share one compiler-allocated HBM buffer and move in one DMA.

Contract: every DMA costs a trigger slot (cost model v2: consecutive DMA triggers are `dma_issue_gap_ns`
apart on any queue) and a fixed latency, so a graph reading ten activations of [128, 64] by ten DMAs spends
ten trigger slots before its last operand arrives. The Neuron compiler, not the framework, chooses where a
graph's tensors live in HBM, so the fp32 graph inputs too large for the small-input pack
(`nprof.compiler.packing`) that are R rows of C elements (the last dim; C <= `ROW_COLS_MAX`), R the same
for all (the row count <= `pmax` of two members or more with the most bytes), are laid side by side in one
input `ROWS_NAME` ``[R, W]`` row-major (W the columns, at most `ROWS_WIDTH_MAX`): element (r, c) of the member whose
first column is j at ``r * W + j + c`` (`plan_rows`). The first load of any member (`load_rows`) loads the whole
pack with one DMA of R partitions (one contiguous run each) and the fusion cache (`nprof.compiler.fusion`)
keeps the tile; a member's row block is then a window of it, and any other access of a member (a transposed
load) is a DMA of its own.

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
    """The row pack of the fp32 inputs among `decls` (not in `exclude`) of R rows, R <= `pmax` the row count
    of at least `MIN_MEMBERS` such inputs with the most bytes (one row count: no padding rows to move), in
    declaration order while the width allows; None when fewer than `MIN_MEMBERS` qualify."""
    skip = set(exclude)
    shapes: dict[str, tuple[int, int]] = {}
    for d in decls:
        if d.kind != "input" or d.dtype != "float32" or d.name in skip or not d.shape or d.name.startswith(RNG_PREFIX):
            continue
        cols = int(d.shape[-1])
        rows = d.elements // max(cols, 1)
        if 0 < rows <= pmax and 0 < cols <= ROW_COLS_MAX:
            shapes[d.name] = (rows, cols)
    by_rows: dict[int, int] = {}
    count: dict[int, int] = {}
    for rows, cols in shapes.values():
        by_rows[rows] = by_rows.get(rows, 0) + rows * cols
        count[rows] = count.get(rows, 0) + 1
    by_rows = {r: n for r, n in by_rows.items() if count[r] >= MIN_MEMBERS}
    if not by_rows:
        return None
    best = max(by_rows, key=lambda r: (by_rows[r], r))
    members: dict[str, tuple[int, int, int]] = {}
    width = 0
    for name, (rows, cols) in shapes.items():
        if rows == best and width + cols <= ROWS_WIDTH_MAX:
            members[name] = (width, rows, cols)
            width += cols
    return RowPack(members, best, width) if len(members) >= MIN_MEMBERS else None


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
