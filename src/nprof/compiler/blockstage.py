"""Graph outputs stored as row blocks leave the program in one DMA.

Contract: a graph's outputs (a training forward's saved activations, a backward's weight and bias gradients)
are each stored by their own DMAs, and every DMA costs a trigger slot (cost model v2: consecutive triggers
are `dma_issue_gap_ns` apart) and a fixed latency. `BlockStage` copies each store of a *row block* of an fp32
output instead into one SBUF staging tile ``[BLOCK_ROWS_MAX, BLOCK_STAGE_MAX]`` and `finish` stores the used part of it
with one DMA into the output `BLOCKS_NAME`. The layout: an output of shape [..., C] is R = n / C rows of C
elements (at most `BLOCK_MEMBER_MAX` elements, C at most `BLOCK_ROW_MAX`); row r sits on partition r % pmax
in the member's columns j + (r // pmax) * C .. + C. A row block is an access of rows r0..r0 + p on one
partition block (r0 % pmax + p <= pmax), partition stride C, and one contiguous run of L <= C - c0 elements
from column c0 of each row (a one-partition run within a row: a bias gradient). With W the used width and
P the partitions used, element (r, c) of a member is element (r % pmax) * W + j + (r // pmax) * C + c of the
pack; `blocks_program` moves every access of a member there (row blocks stay affine), drops the members'
declarations and records the layout in the program's meta under `BLOCKS_META` (JSON ``[P, W, [[output, j,
R, C], ...]]``); `unpack_blocks` cuts the members out of the pack.

Exact by construction: a read of a staged member from HBM before the end is preceded by DMAs storing its
staged blocks to its own tensor (moved into the pack like every other access); an instruction reading or
writing a member with an access that is not a row block, or writing it at all, first stores its staged blocks
and unstages it (it keeps its own tensor); a member not wholly staged by the end is unstaged the same way.
Intermediates are staged too (an intermediate may turn out to be all of a graph output, `Emitter.promote`);
one still internal at the end is unstaged.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from nprof.arch.isa import Access, Instruction, Space
from nprof.nki.tensor import NkiTensor
from nprof.program.model import Program

BLOCKS_NAME = "packed.blocks"
BLOCKS_META = "packed_blocks"
BLOCK_MEMBER_MAX = 65536  # elements of the largest output staged
BLOCK_ROW_MAX = 2048  # elements of its rows
BLOCK_STAGE_MAX = 2048  # columns of the staging tile (8 KiB per partition)
# rows of the largest output staged. Measured (bench/compile.py): staging whole activations too makes the one
# last DMA carry them all after the compute instead of overlapping it (nanoGPT forward 41.6 -> 42.7 us,
# backward 61.1 -> 65.9 us, MNIST MLP forward 8.8 -> 9.0 us), so only one-row outputs (bias and norm-weight
# gradients) are staged; the general layout stays for rows up to this bound.
BLOCK_ROWS_MAX = 1


@dataclasses.dataclass(frozen=True)
class Member:
    """A staged output: its first column and its rows of `cols` elements."""

    column: int
    rows: int
    cols: int


def _member_shape(shape: Sequence[int]) -> tuple[int, int]:
    n = int(np.prod(shape)) if shape else 1
    cols = int(shape[-1]) if shape else 1
    return n // max(cols, 1), cols


def block_of(a: Access, m: Member, pmax: int) -> tuple[int, int, int] | None:
    """(partition, column offset in the staging tile relative to the member's first column, run length) of the
    row block `a` of member `m`, or None when `a` is not a row block (see module doc)."""
    runs = a.free if a.free else ((1, 1),)
    if len(runs) != 1:
        return None
    (stride, length) = runs[0]
    r0, c0 = divmod(a.offset, m.cols)
    if (stride != 1 and length > 1) or c0 + length > m.cols or a.offset < 0:
        return None
    if a.partitions > 1 and (a.partition_stride != m.cols or r0 % pmax + a.partitions > pmax):
        return None
    if r0 + a.partitions > m.rows:
        return None
    return r0 % pmax, (r0 // pmax) * m.cols + c0, length


class BlockStage:
    """The staging tile of one program (see module doc)."""

    def __init__(self, builder: object) -> None:
        self.builder = weakref.proxy(builder)  # no reference cycle with the builder
        self.tile: NkiTensor | None = None
        self.members: dict[str, Member] = {}
        self.blocks: dict[str, set[tuple[int, int, int, int]]] = {}  # member -> staged (partition, column, rows, L)
        self.staged: dict[str, int] = {}  # member -> elements staged
        self.dirty: set[str] = set()
        self.unstageable: set[str] = set()
        self.width = 0
        self.busy = False

    def owns(self, base: object) -> bool:
        return self.tile is not None and base is self.tile.base

    def stage(self, a: Access, tile: NkiTensor) -> bool:
        """Stage the store of `tile` to `a` when `a` is a row block of an fp32 output (or intermediate) that fits;
        False: the caller stores it with a DMA."""
        from nprof.nki import isa as nisa
        from nprof.nki import language as nl

        decl = self.builder.tensors().get(a.tensor)
        if (decl is None or not (decl.kind == "output" or a.tensor in self.builder.promotable)
                or decl.dtype != "float32" or a.space is not Space.HBM or tile.dtype_name != "float32"
                or a.tensor in self.unstageable or a.tensor.startswith("packed.")):  # fmt: skip
            return False
        pmax = self.builder.preset.pmax
        m = self.members.get(a.tensor)
        if m is None:
            rows, cols = _member_shape(decl.shape)
            width = -(-rows // pmax) * cols
            if (rows > BLOCK_ROWS_MAX or rows * cols > BLOCK_MEMBER_MAX or cols > BLOCK_ROW_MAX
                    or self.width + width > BLOCK_STAGE_MAX):  # fmt: skip
                return False
            m = Member(self.width, rows, cols)
        block = block_of(a, m, pmax)
        flat = tile.flatten_free()
        if block is None or flat is None or flat.shape != (a.partitions, block[2]):
            return False
        if a.tensor not in self.members:
            self.members[a.tensor] = m
            self.width += -(-m.rows // pmax) * m.cols
        if self.tile is None:
            self.tile = nl.ndarray((min(pmax, BLOCK_ROWS_MAX), BLOCK_STAGE_MAX), dtype=nl.float32, buffer=nl.sbuf)
        p, c, length = block
        j = m.column + c
        nisa.tensor_copy(flat, dst=self.tile[p : p + a.partitions, j : j + length])
        self.blocks.setdefault(a.tensor, set()).add((p, c, a.partitions, length))
        self.staged[a.tensor] = self.staged.get(a.tensor, 0) + a.partitions * length
        self.dirty.add(a.tensor)
        return True

    def before_append(self, outs: Sequence[Access], reads: Sequence[Access]) -> None:
        """Called before every instruction: store a staged member it reads; store and unstage a member it
        writes, or reads with an access that is not a row block."""
        if self.busy or not self.members:
            return
        pmax = self.builder.preset.pmax
        for a in reads:
            m = self.members.get(a.tensor) if a.space is Space.HBM else None
            if m is None:
                continue
            if a.tensor in self.dirty:
                self._store(a.tensor)
            if block_of(a, m, pmax) is None:
                self._unstage(a.tensor)
        for a in outs:
            if a.space is Space.HBM and a.tensor in self.members:
                if a.tensor in self.dirty:
                    self._store(a.tensor)
                self._unstage(a.tensor)

    def _unstage(self, name: str) -> None:
        del self.members[name]
        self.unstageable.add(name)
        self.dirty.discard(name)

    def _store(self, name: str) -> None:
        """Store the staged blocks of `name` to its own tensor, one DMA per block."""
        from nprof.compiler.kernels.hbm import window

        assert self.tile is not None
        m, pmax = self.members[name], self.builder.preset.pmax
        self.busy = True
        try:
            for p, c, parts, length in sorted(self.blocks.get(name, ())):
                r0 = (c // m.cols) * pmax + p
                dst = Access(Space.HBM, name, "float32", r0 * m.cols + c % m.cols, parts, ((1, length),), 0, m.cols)
                j = m.column + c
                self.builder.dma(window(dst), self.tile[p : p + parts, j : j + length])
        finally:
            self.busy = False
        self.dirty.discard(name)

    def finish(self) -> tuple[int, int]:
        """Store every wholly staged output with one DMA (inside a kernel call): (partitions, width) of the
        pack, (0, 0) when nothing is staged."""
        from nprof.compiler.kernels.hbm import window

        for name in list(self.members):
            m = self.members[name]
            if self.builder.tensors()[name].kind != "output" or self.staged.get(name, 0) != m.rows * m.cols:
                if name in self.dirty:
                    self._store(name)
                self._unstage(name)
        if not self.members or self.tile is None:
            return 0, 0
        pmax = self.builder.preset.pmax
        width = max(m.column + -(-m.rows // pmax) * m.cols for m in self.members.values())
        parts = max(min(m.rows, pmax) for m in self.members.values())
        self.builder.hbm_tensor(BLOCKS_NAME, (parts * width,), "float32", "output", None)
        self.busy = True
        try:
            self.builder.dma(window(Access(Space.HBM, BLOCKS_NAME, "float32", 0, parts, ((1, width),), 0, width)),
                             self.tile[0:parts, 0:width])  # fmt: skip
        finally:
            self.busy = False
        return parts, width


def finish_blocks(stage: BlockStage) -> tuple[int, int]:
    """`stage.finish()` as a kernel for `ProgramBuilder.call` (a plain function, as `packing.finish_stage`)."""
    try:
        return stage.finish()
    finally:
        stage.tile = None


def blocks_program(program: Program, members: Mapping[str, Member], parts: int, width: int,
                   pmax: int = 128) -> Program:  # fmt: skip
    """`program` with every access of a staged member moved into `BLOCKS_NAME`, the members' declarations
    dropped and the layout in its meta (see module doc)."""

    def acc(a: Access) -> Access:
        m = members.get(a.tensor) if a.space is Space.HBM else None
        if m is None:
            return a
        block = block_of(a, m, pmax)
        assert block is not None, f"an access of staged output {a.tensor} is not a row block"  # unstaged if so
        p, c, _ = block
        return dataclasses.replace(a, tensor=BLOCKS_NAME, offset=p * width + m.column + c,
                                   partition_stride=width if a.partitions > 1 else a.partition_stride)  # fmt: skip

    def moved(ins: Instruction) -> Instruction:
        if not any(a.tensor in members for a in (*ins.outs, *ins.ins)):
            return ins
        return dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))

    layout = [parts, width, [[name, m.column, m.rows, m.cols] for name, m in members.items()]]
    tensors = tuple(t for t in program.tensors if t.name not in members)
    meta = {**program.meta, BLOCKS_META: json.dumps(layout)}
    return dataclasses.replace(
        program, tensors=tensors, instructions=tuple(map(moved, program.instructions)), meta=meta
    )


def unpack_blocks(program: Program, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`outputs` with every staged output cut from the block pack (flat values); unchanged without one."""
    out = dict(outputs)
    text = program.meta.get(BLOCKS_META)
    if not text or BLOCKS_NAME not in out:
        return out
    parts, width, layout = json.loads(text)
    table = np.asarray(out.pop(BLOCKS_NAME)).reshape(int(parts), int(width))
    for name, j, rows, cols in layout:
        blocks = -(-int(rows) // int(parts)) if int(rows) > int(parts) else 1
        stack = [table[:, j + b * cols : j + (b + 1) * cols] for b in range(blocks)]
        out[name] = np.concatenate(stack, axis=0)[: int(rows)].reshape(-1).copy()
    return out
