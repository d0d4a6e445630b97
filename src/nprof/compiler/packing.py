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

int32 scalar inputs (a batch norm's ``num_batches_tracked`` counter: one per batch norm) are packed the same
way into a third input, `INTS_NAME` (int32, element j = member j, same bits): the first fp32 load of a member
loads them all as one row ``[1, count]`` and later members are elements of that tile. The small outputs'
half (staging in SBUF, one store) is `nprof.compiler.staging`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from nprof.arch.isa import Access, Instruction, Space
from nprof.compiler.rowpack import RNG_PREFIX, ROWS_NAME, rows_values
from nprof.compiler.staging import (  # noqa: F401  (re-exported: the packing API in one place)
    INT_OUT_PACK_NAME,
    OUT_PACK_NAME,
    OUT_PACKED_META,
    OutputStage,
    chunk_of,
    column_count,
    finish_stage,
    staged_program,
    unpack_outputs,
)
from nprof.nki.tensor import NkiTensor
from nprof.program.model import Program, TensorDecl

ENABLED = True  # module switch for tests comparing packed with unpacked lowering
PACK_NAME = "packed.inputs"
COLUMNS_NAME = "packed.columns"
INTS_NAME = "packed.ints"
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
    ints: Mapping[str, int] = dataclasses.field(default_factory=dict)  # int32 scalar member -> its element

    def holds(self, tensor: str) -> bool:
        """Is `tensor` a member (fp32 or int32)?"""
        return tensor in self.members or tensor in self.ints

    def group(self, size: int) -> tuple[int, int]:
        """(first offset, count) of the members of `size` elements (back to back by construction)."""
        offsets = [off for off, n in self.members.values() if n == size]
        return min(offsets), len(offsets)


def plan_pack(decls: Sequence[TensorDecl]) -> Pack | None:
    """The pack of the small fp32 inputs among `decls`, sorted by (size, declaration order), and of the int32
    scalar inputs (declaration order); None when neither has 2 members."""
    if not ENABLED:
        return None
    small = [d for d in decls if d.kind == "input" and d.dtype == "float32" and d.elements <= MAX_MEMBER
             and not d.name.startswith(RNG_PREFIX)]
    ints = [d.name for d in decls if d.kind == "input" and d.dtype == "int32" and d.elements == 1]
    ints = ints if len(ints) >= 2 else []
    small = small if len(small) >= 2 else []
    if not small and not ints:
        return None
    members: dict[str, tuple[int, int]] = {}
    columns: dict[str, int] = {}
    offset = width = 0
    for d in sorted(small, key=lambda d: d.elements):  # stable: declaration order within a size
        members[d.name], columns[d.name] = (offset, d.elements), width
        offset += d.elements
        width += column_count(d.elements, PMAX)
    return Pack(PACK_NAME, members, offset, columns, width, {name: j for j, name in enumerate(ints)})


PMAX = 128  # partitions of the column pack (both presets)


def in_columns(pack: Pack, a: Access) -> Access | None:
    """`a` (an access of a member) as the same elements of the column pack, when it is a column within one
    chunk (partition stride 1, one element per partition); else None."""
    chunk = chunk_of(a, PMAX)
    if a.tensor not in pack.columns or a.partition_stride != 1 or a.free_elements != 1 or chunk is None:
        return None
    return Access(Space.HBM, COLUMNS_NAME, "float32", (a.offset % PMAX) * pack.width + pack.columns[a.tensor] + chunk,
                  a.partitions, ((1, 1),), 0, pack.width)  # fmt: skip


def in_pack(pack: Pack, a: Access) -> Access:
    """`a` (an access of a member) as the same elements of the pack (`INTS_NAME` for an int32 member)."""
    if a.tensor in pack.ints:
        return dataclasses.replace(a, tensor=INTS_NAME, offset=a.offset + pack.ints[a.tensor])
    return dataclasses.replace(a, tensor=pack.name, offset=a.offset + pack.members[a.tensor][0])


def _group_key(pack: Pack, a: Access, pmax: int) -> Access | None:
    """The pattern of the group DMA that serves the member access `a`, or None when `a` is neither a row
    broadcast nor a column of its member (an int32 member: the whole int row, for a one-element access)."""
    if a.tensor in pack.ints:
        one = a.partitions == 1 and a.free_elements == 1 and len(a.shape) == 2
        return Access(Space.HBM, INTS_NAME, "int32", 0, 1, ((1, len(pack.ints)),), 0, 0) if one else None
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
        # an int row converts to fp32 on every load alike: keeping the loaded tile is exact
        builder.remember(key, tile, stored=False, exact=key.tensor == INTS_NAME)  # type: ignore[attr-defined]
    if key.tensor == INTS_NAME:
        j = pack.ints[a.tensor]
        return tile[0:1, j : j + 1]
    if key.partition_stride == 0:
        return _row_window(tile, key, in_pack(pack, a))
    return builder.lookup(in_columns(pack, a))  # type: ignore[attr-defined]


def packed_program(program: Program, pack: Pack) -> Program:
    """`program` with every member access moved into the packs (a column into `COLUMNS_NAME`, an int32 member
    into `INTS_NAME`, any other access into `pack.name`), the members' declarations replaced by the packs'
    (the column and int packs' only when used) and the layouts recorded in its meta (see module doc)."""
    used = {pack.name} if pack.members else set()  # the column and int packs only when read

    def acc(a: Access) -> Access:
        if a.space is not Space.HBM or not pack.holds(a.tensor):
            return a
        moved = in_columns(pack, a) or in_pack(pack, a)
        used.add(moved.tensor)
        return moved

    def moved(ins: Instruction) -> Instruction:
        if not any(pack.holds(a.tensor) for a in (*ins.outs, *ins.ins)):
            return ins
        return dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))

    instructions = tuple(map(moved, program.instructions))
    used |= {a.tensor for ins in instructions for a in ins.ins if a.tensor in (pack.name, COLUMNS_NAME, INTS_NAME)}
    layouts = {pack.name: [[name, off, n] for name, (off, n) in pack.members.items()],
               COLUMNS_NAME: [[name, pack.columns[name], n] for name, (_, n) in pack.members.items()],
               INTS_NAME: [[name, j, 1] for name, j in pack.ints.items()]}  # fmt: skip
    decls = {pack.name: TensorDecl(pack.name, (pack.total,), "float32", "input"),
             COLUMNS_NAME: TensorDecl(COLUMNS_NAME, (PMAX * pack.width,), "float32", "input"),
             INTS_NAME: TensorDecl(INTS_NAME, (len(pack.ints),), "int32", "input")}  # fmt: skip
    tensors = tuple(t for t in program.tensors if not pack.holds(t.name) and t.name not in decls)
    tensors = (*(decls[name] for name in decls if name in used), *tensors)
    meta = {**program.meta, PACKED_META: json.dumps({name: layouts[name] for name in decls if name in used})}
    return dataclasses.replace(program, tensors=tensors, instructions=instructions, meta=meta)


def pack_inputs(program: Program, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` (values by graph input name) with the members of every pack of `program` replaced by the
    packs' values (each member's fp32 elements at its offset, int32 in `INTS_NAME`; in the column pack, chunk
    k of a member in column first + k); unchanged for a program without packs."""
    packs = json.loads(program.meta.get(PACKED_META, "{}"))
    if not packs:
        return dict(arrays)
    out = dict(arrays)
    for name, layout in packs.items():
        if name == ROWS_NAME:
            out[name] = rows_values(layout, arrays)
            continue
        if name == COLUMNS_NAME:
            width = max(int(j) + column_count(int(n), PMAX) for _, j, n in layout)
            grid = np.zeros((PMAX, width), np.float32)
            for member, j, n in layout:
                padded = np.zeros(column_count(int(n), PMAX) * PMAX, np.float32)
                padded[: int(n)] = np.asarray(arrays[member], np.float32).reshape(-1)
                grid[:, int(j) : int(j) + column_count(int(n), PMAX)] = padded.reshape(-1, PMAX).T
            out[name] = grid.reshape(-1)
            continue
        total = sum(int(n) for _, _, n in layout)
        dtype = np.int32 if name == INTS_NAME else np.float32
        value = np.zeros(total, dtype)
        for member, off, n in layout:
            value[int(off) : int(off) + int(n)] = np.asarray(arrays[member], dtype).reshape(-1)
        out[name] = value
    declared = {t.name for t in program.tensors}
    for layout in packs.values():
        for member, *_ in layout:
            if member not in declared:  # a member still declared is also read from its own tensor
                out.pop(member, None)
    return out


