"""Small graph inputs share one compiler-allocated HBM buffer and move in one DMA per group.

Contract: the Neuron compiler, not the framework, chooses where a graph's tensors live in HBM. Here the
small fp32 graph inputs (biases, norm weights, batch-norm statistics, saved per-row statistics: at most
`MAX_MEMBER` elements each) are packed into one input tensor `PACK_NAME`, sorted by size so that members of
equal size sit back to back (`plan_pack`). Every DMA costs a trigger slot (cost model v2: consecutive DMA
triggers are `dma_issue_gap_ns` apart on any queue) and a fixed latency, so one DMA per small tensor
dominates small graphs; with the pack, the first kernel loading a member (`load_member`) loads its whole
group in one DMA and keeps the tile in SBUF (`nprof.compiler.fusion`), and later members of the group are
windows of that tile:

* a row broadcast (partition stride 0, the same row on every partition: a bias or norm weight added to
  rows) loads the group as one tile ``[partitions asked, group elements]`` (stride-0 partitions; the group
  is the whole pack when it has at most `ROW_GROUP_MAX` elements, else the members of the asked size);
* a column (partition stride 1, one element per partition, within one chunk of `pmax` elements: a
  per-channel scale, read 128 channels at a time) comes from a second input, `COLUMNS_NAME`
  ``[pmax, width]`` row-major, where every member has ceil(elements / pmax) columns (chunk k of the member
  whose first column is j in column j + k, element e at row e % pmax): one DMA of one contiguous run per
  partition loads every member's columns (member-major, a column would be one DMA chunk per element).

`packed_program(program, pack)` then rewrites every access of a member into the pack (same elements, at the
member's offset), drops the members' declarations and records the layout in the program's meta
(`PACKED_META`: JSON ``{pack: [[member, offset, elements], ...]}``); `pack_inputs(program, arrays)` builds the
pack's values from the members' (the runtime does it on every call): numerics are unchanged, bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from nprof.arch.isa import Access, Instruction, Space
from nprof.nki.tensor import NkiTensor
from nprof.program.model import Program, TensorDecl

ENABLED = True  # module switch for tests comparing packed with unpacked lowering
PACK_NAME = "packed.inputs"
COLUMNS_NAME = "packed.columns"
PACKED_META = "packed_inputs"
MAX_MEMBER = 512  # elements: graph inputs up to this size are packed
ROW_GROUP_MAX = 4096  # elements per partition a row-broadcast group tile may take (16 KiB fp32)


@dataclass(frozen=True)
class Pack:
    """The layout of the packed inputs: member -> (offset, elements), and the groups of equal size."""

    name: str
    members: Mapping[str, tuple[int, int]]
    total: int
    columns: Mapping[str, int] = dataclasses.field(default_factory=dict)  # member -> its first column
    width: int = 0  # columns of `COLUMNS_NAME`

    def group(self, size: int) -> tuple[int, int]:
        """(first offset, count) of the members of `size` elements (back to back by construction)."""
        offsets = [off for off, n in self.members.values() if n == size]
        return min(offsets), len(offsets)


def plan_pack(decls: Sequence[TensorDecl]) -> Pack | None:
    """The pack of the small fp32 inputs among `decls`, sorted by (size, declaration order); None for < 2."""
    if not ENABLED:
        return None
    small = [d for d in decls if d.kind == "input" and d.dtype == "float32" and d.elements <= MAX_MEMBER]
    if len(small) < 2:
        return None
    members: dict[str, tuple[int, int]] = {}
    columns: dict[str, int] = {}
    offset = width = 0
    for d in sorted(small, key=lambda d: d.elements):  # stable: declaration order within a size
        members[d.name], columns[d.name] = (offset, d.elements), width
        offset += d.elements
        width += _chunks(d.elements, PMAX)
    return Pack(PACK_NAME, members, offset, columns, width)


PMAX = 128  # partitions of the column pack (both presets)


def in_columns(pack: Pack, a: Access) -> Access | None:
    """`a` (an access of a member) as the same elements of the column pack, when it is a column within one
    chunk (partition stride 1, one element per partition); else None."""
    chunk = _chunk_of(a, PMAX)
    if a.partition_stride != 1 or a.free_elements != 1 or chunk is None:
        return None
    return Access(Space.HBM, COLUMNS_NAME, "float32", (a.offset % PMAX) * pack.width + pack.columns[a.tensor] + chunk,
                  a.partitions, ((1, 1),), 0, pack.width)  # fmt: skip


def in_pack(pack: Pack, a: Access) -> Access:
    """`a` (an access of a member) as the same elements of the pack."""
    return dataclasses.replace(a, tensor=pack.name, offset=a.offset + pack.members[a.tensor][0])


def _group_key(pack: Pack, a: Access, pmax: int) -> Access | None:
    """The pattern of the group DMA that serves the member access `a`, or None when `a` is neither a row
    broadcast nor a column of its member."""
    size = pack.members[a.tensor][1]
    first, count = pack.group(size)
    if a.partition_stride == 0 and a.partitions > 1:  # as many partitions as asked: a later, wider ask reloads
        if pack.total <= ROW_GROUP_MAX:
            return Access(Space.HBM, pack.name, "float32", 0, a.partitions, ((1, pack.total),), 0, 0)
        return Access(Space.HBM, pack.name, "float32", first, a.partitions, ((1, size * count),), 0, 0)
    if pmax == PMAX and in_columns(pack, a) is not None:
        return Access(Space.HBM, COLUMNS_NAME, "float32", 0, PMAX, ((1, pack.width),), 0, pack.width)
    return None


def _row_window(tile: NkiTensor, key: Access, a: Access) -> NkiTensor | None:
    """The view of the row-broadcast group tile `tile` (pattern `key`) holding the broadcast access `a` (in
    pack coordinates): every partition of `a` reads the same elements, found in one row of the tile."""
    from nprof.compiler.subtile import KeptPattern

    if a.partitions > key.partitions:
        return None
    one = dataclasses.replace(a, partitions=1, partition_stride=0)
    row = KeptPattern(dataclasses.replace(key, partitions=1), tile[0:1]).view(one)
    if row is None:
        return None
    p0, e0, dims = row.access_key()
    view = NkiTensor(row.base, p0, e0, ((1, 0, a.partitions), *dims[1:]), ())
    return view if view.flatten_free() is not None else None  # kernels take loaded tiles as contiguous


def load_member(builder: object, pack: Pack, a: Access) -> NkiTensor | None:
    """The SBUF tile of the member access `a` served from its group tile (loaded by one DMA on first use and
    kept by the fusion cache of `builder`), or None when `a` is not a group pattern (the caller loads it
    alone, from the pack)."""
    from nprof.nki import language as nl

    key = _group_key(pack, a, builder.preset.pmax)  # type: ignore[attr-defined]
    if key is None:
        return None
    tile = builder.lookup(key)  # type: ignore[attr-defined]
    if tile is None:
        from nprof.compiler.kernels.hbm import window

        tile = nl.load(window(key), dtype=nl.float32)
        builder.flush()  # type: ignore[attr-defined]
        builder.remember(key, tile, stored=False)  # type: ignore[attr-defined]
    if key.partition_stride == 0:
        return _row_window(tile, key, in_pack(pack, a))
    return builder.lookup(in_columns(pack, a))  # type: ignore[attr-defined]


def packed_program(program: Program, pack: Pack) -> Program:
    """`program` with every member access moved into the packs (a column into `COLUMNS_NAME`, any other access
    into `pack.name`), the members' declarations replaced by the packs' (the column pack's only when read)
    and the layouts recorded in its meta (see module doc)."""
    used = {pack.name}  # the column pack only when read

    def acc(a: Access) -> Access:
        if a.space is not Space.HBM or a.tensor not in pack.members:
            return a
        moved = in_columns(pack, a) or in_pack(pack, a)
        used.add(moved.tensor)
        return moved

    def moved(ins: Instruction) -> Instruction:
        if not any(a.tensor in pack.members for a in (*ins.outs, *ins.ins)):
            return ins
        return dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))

    instructions = tuple(map(moved, program.instructions))
    used |= {a.tensor for ins in instructions for a in ins.ins if a.tensor in (pack.name, COLUMNS_NAME)}
    layouts = {pack.name: [[name, off, n] for name, (off, n) in pack.members.items()],
               COLUMNS_NAME: [[name, pack.columns[name], n] for name, (_, n) in pack.members.items()]}  # fmt: skip
    decls = {pack.name: TensorDecl(pack.name, (pack.total,), "float32", "input"),
             COLUMNS_NAME: TensorDecl(COLUMNS_NAME, (PMAX * pack.width,), "float32", "input")}  # fmt: skip
    tensors = tuple(t for t in program.tensors if t.name not in pack.members and t.name not in decls)
    tensors = (*(decls[name] for name in decls if name in used), *tensors)
    meta = {**program.meta, PACKED_META: json.dumps({name: layouts[name] for name in decls if name in used})}
    return dataclasses.replace(program, tensors=tensors, instructions=instructions, meta=meta)


def pack_inputs(program: Program, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` (values by graph input name) with the members of every pack of `program` replaced by the
    packs' values (each member's fp32 elements at its offset; in the column pack, chunk k of a member in
    column first + k); unchanged for a program without packs."""
    packs = json.loads(program.meta.get(PACKED_META, "{}"))
    if not packs:
        return dict(arrays)
    out = dict(arrays)
    for name, layout in packs.items():
        if name == COLUMNS_NAME:
            width = max(int(j) + _chunks(int(n), PMAX) for _, j, n in layout)
            grid = np.zeros((PMAX, width), np.float32)
            for member, j, n in layout:
                padded = np.zeros(_chunks(int(n), PMAX) * PMAX, np.float32)
                padded[: int(n)] = np.asarray(arrays[member], np.float32).reshape(-1)
                grid[:, int(j) : int(j) + _chunks(int(n), PMAX)] = padded.reshape(-1, PMAX).T
            out[name] = grid.reshape(-1)
            continue
        total = sum(int(n) for _, _, n in layout)
        value = np.zeros(total, np.float32)
        for member, off, n in layout:
            value[int(off) : int(off) + int(n)] = np.asarray(arrays[member], np.float32).reshape(-1)
        out[name] = value
    for layout in packs.values():
        for member, _, _ in layout:
            out.pop(member, None)
    return out


OUT_PACK_NAME = "packed.outputs"
OUT_PACKED_META = "packed_outputs"
STAGE_COLUMNS = 256  # columns of small outputs one program stages (1 KiB per partition of SBUF)
STAGE_MAX = 512  # elements of the largest output staged (4 columns)


class OutputStage:
    """Small fp32 graph outputs (at most `STAGE_MAX` elements) written as columns — element p on partition p,
    a batch-norm or layer-norm statistic, in chunks of `pmax` elements when longer — are copied into one SBUF
    staging tile (member of n elements: ceil(n / pmax) columns, chunk k in its column k) instead of being
    stored by their own DMAs; `finish` stores the whole tile with one DMA into `OUT_PACK_NAME`
    ``[pmax, columns]`` row-major (element e of the member whose first column is j at
    (e % pmax) * columns + j + e // pmax: one contiguous run per partition). Exact by construction: a read of
    a staged output from HBM before the end is preceded by a store of its columns (`before_append`), an
    output another instruction writes directly, or reads across a chunk boundary, leaves the stage (it keeps
    its own tensor), and the fusion cache still holds the stored tile for later loads."""

    def __init__(self, builder: object) -> None:
        self.builder = weakref.proxy(builder)  # no cycle: the builder is freed by reference counting alone
        self.tile: NkiTensor | None = None
        self.columns: dict[str, int] = {}  # staged output -> its column
        self.sizes: dict[str, int] = {}
        self.dirty: set[str] = set()  # staged since their last store to HBM
        self.chunks: dict[str, set[int]] = {}  # staged output -> its chunks staged so far
        self.unstageable: set[str] = set()  # outputs an instruction reached across a chunk boundary
        self.busy = False  # emitting a store of the stage: no interception

    def owns(self, base: object) -> bool:
        return self.tile is not None and base is self.tile.base

    def stage(self, a: Access, tile: NkiTensor) -> bool:
        """Stage the store of `tile` to `a` when `a` is one whole chunk (`pmax` elements from a multiple of
        `pmax`, or the rest) of a small fp32 output as a column; False: the caller stores it with a DMA."""
        from nprof.nki import isa as nisa
        from nprof.nki import language as nl

        decl = self.builder.tensors().get(a.tensor)
        pmax = self.builder.preset.pmax
        n = 1
        for s in decl.shape if decl is not None else ():
            n *= int(s)
        if (decl is None or decl.kind != "output" or decl.dtype != "float32" or tile.dtype_name != "float32"
                or a.offset % pmax or a.partitions != min(pmax, n - a.offset) or a.partition_stride != 1
                or a.free_elements != 1 or n > STAGE_MAX or tile.access_key()[0] != 0
                or a.tensor in self.unstageable):  # fmt: skip
            return False
        if a.tensor not in self.columns:
            first = max((j + _chunks(self.sizes[m], pmax) for m, j in self.columns.items()), default=0)
            if first + _chunks(n, pmax) > STAGE_COLUMNS:
                return False
            if self.tile is None:
                self.tile = nl.ndarray((pmax, STAGE_COLUMNS), dtype=nl.float32, buffer=nl.sbuf)
            self.columns[a.tensor], self.sizes[a.tensor] = first, n
        j = self.columns[a.tensor] + a.offset // pmax
        self.chunks.setdefault(a.tensor, set()).add(a.offset // pmax)
        assert self.tile is not None  # made above with the first staged column
        flat = tile.flatten_free()
        nisa.tensor_copy(flat if flat is not None else tile, dst=self.tile[0 : a.partitions, j : j + 1])
        self.dirty.add(a.tensor)
        return True

    def before_append(self, outs: Sequence[Access], reads: Sequence[Access]) -> None:
        """Called before every instruction: store a staged output it reads (and unstage it when the read
        crosses a chunk boundary); unstage one it writes."""
        if self.busy:
            return
        pmax = self.builder.preset.pmax
        for a in (*reads, *outs):
            if (a.space is Space.HBM and a.tensor not in self.unstageable and a.partitions * a.free_elements > 1
                    and _chunk_of(a, pmax) is None):  # fmt: skip
                self.unstageable.add(a.tensor)  # its accesses could not move into the pack
        if not self.columns:
            return
        for a in reads:
            if a.space is Space.HBM and a.tensor in self.columns:
                if a.tensor in self.dirty:
                    self._store(a.tensor)
                if a.tensor in self.unstageable:
                    del self.columns[a.tensor]
        for a in outs:
            if a.space is Space.HBM and a.tensor in self.columns:
                self._store(a.tensor)  # what it does not overwrite must hold the staged value
                del self.columns[a.tensor]

    def _store(self, name: str) -> None:
        """Store the staged chunks of `name` to its own tensor, one DMA per chunk."""
        from nprof.compiler.kernels.hbm import window

        assert self.tile is not None
        j, n = self.columns[name], self.sizes[name]
        pmax = self.builder.preset.pmax
        self.busy = True
        try:
            for k in sorted(self.chunks.get(name, ())):
                rows = min(pmax, n - k * pmax)
                self.builder.dma(window(Access(Space.HBM, name, "float32", k * pmax, rows, ((1, 1),), 0, 1)),
                                 self.tile[0:rows, j + k : j + k + 1])  # fmt: skip
        finally:
            self.busy = False
        self.dirty.discard(name)

    def finish(self) -> int:
        """Store every staged output with one DMA (inside a kernel call); the pack's column count (0: none)."""
        from nprof.compiler.kernels.hbm import window

        pmax = self.builder.preset.pmax
        for name in [m for m in self.columns if len(self.chunks.get(m, ())) < _chunks(self.sizes[m], pmax)]:
            self._store(name)  # not every chunk staged: the others were written to its own tensor
            del self.columns[name]
        if not self.columns or self.tile is None:
            return 0
        k = max(j + _chunks(self.sizes[m], pmax) for m, j in self.columns.items())
        self.builder.hbm_tensor(OUT_PACK_NAME, (pmax * k,), "float32", "output", None)
        self.busy = True
        try:
            self.builder.dma(window(Access(Space.HBM, OUT_PACK_NAME, "float32", 0, pmax, ((1, k),), 0, k)),
                             self.tile[:, 0:k])  # fmt: skip
        finally:
            self.busy = False
        return k


def finish_stage(stage: OutputStage) -> int:
    """`stage.finish()` as a kernel for `ProgramBuilder.call` (a plain function: the NKI tracer caches the
    kernels it is given, and a bound method would keep the stage, its tile and so the builder alive)."""
    try:
        return stage.finish()
    finally:
        stage.tile = None


def _chunks(n: int, pmax: int) -> int:
    return -(-n // pmax)


def _chunk_of(a: Access, pmax: int) -> int | None:
    """The chunk (elements k * pmax.. of its tensor) holding every element of `a`, or None when `a` spans
    more than one."""
    last = a.offset + (a.partitions - 1) * max(a.partition_stride, 0) + sum((n - 1) * max(s, 0) for s, n in a.free)
    if min(a.partition_stride, *(s for s, _ in a.free)) < 0 or a.offset // pmax != last // pmax:
        return None
    return a.offset // pmax


def staged_program(program: Program, columns: Mapping[str, int], sizes: Mapping[str, int], k: int,
                   pmax: int = 128) -> Program:  # fmt: skip
    """`program` with every access of a staged output moved into the output pack (element e of the member
    whose first column is j at (e % pmax) * k + j + e // pmax: within one chunk, offsets and strides scaled
    by k), their declarations dropped, the layout in its meta (`OUT_PACKED_META`: JSON
    ``{pack: [k, [[output, first column, elements], ...]]}``)."""

    def acc(a: Access) -> Access:
        if a.space is not Space.HBM or a.tensor not in columns:
            return a
        chunk = _chunk_of(a, pmax)
        assert chunk is not None, f"an access of staged output {a.tensor} spans chunks"  # unstaged when read so
        return dataclasses.replace(a, tensor=OUT_PACK_NAME, offset=(a.offset % pmax) * k + columns[a.tensor] + chunk,
                                   partition_stride=a.partition_stride * k,
                                   free=tuple((s * k, n) for s, n in a.free))  # fmt: skip

    def moved(ins: Instruction) -> Instruction:
        if not any(a.tensor in columns for a in (*ins.outs, *ins.ins)):
            return ins
        return dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))

    layout = [[name, j, sizes[name]] for name, j in columns.items()]
    tensors = tuple(t for t in program.tensors if t.name not in columns)
    meta = {**program.meta, OUT_PACKED_META: json.dumps({OUT_PACK_NAME: [k, layout]})}
    return dataclasses.replace(
        program, tensors=tensors, instructions=tuple(map(moved, program.instructions)), meta=meta
    )


def unpack_outputs(program: Program, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`outputs` (device results by program tensor) with every staged output cut from its pack (flat values:
    the runtime reshapes them); unchanged for a program without an output pack."""
    packs = json.loads(program.meta.get(OUT_PACKED_META, "{}"))
    out = dict(outputs)
    for name, (k, layout) in packs.items():
        table = np.asarray(out.pop(name)).reshape(-1, int(k))
        rows = table.shape[0]
        for member, j, n in layout:  # chunk c of a member in its column j + c
            columns = table[:, int(j) : int(j) + _chunks(int(n), rows)]
            out[member] = np.ascontiguousarray(columns.T).reshape(-1)[: int(n)]
    from nprof.compiler.blockstage import unpack_blocks

    return unpack_blocks(program, out)  # outputs stored as row blocks (`nprof.compiler.blockstage`)
