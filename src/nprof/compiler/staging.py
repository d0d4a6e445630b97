"""Small graph outputs staged in SBUF and stored by one DMA per program (`nprof.compiler.packing`'s other half).

Contract: `OutputStage` (see its doc) collects the stores of small outputs of one dtype into one SBUF tile and
`finish` stores it into one pack tensor; `staged_program` moves every access of a staged output into its
pack and records the layout in the program's meta (`OUT_PACKED_META`, one entry per pack), and
`unpack_outputs` cuts the members back out on the host. Two stages per program: fp32 outputs as columns
of `pmax` partitions (`OUT_PACK_NAME`), and int32 scalars (`num_batches_tracked` counters) in one row of one
partition (`INT_OUT_PACK_NAME`: element 0 of the member of column j at offset j).
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

OUT_PACK_NAME = "packed.outputs"
INT_OUT_PACK_NAME = "packed.int_outputs"
OUT_PACKED_META = "packed_outputs"
STAGE_COLUMNS = 256  # columns of small outputs one program stages (1 KiB per partition of SBUF)
STAGE_MAX = 512  # elements of the largest output staged (4 columns)


class OutputStage:
    """Small graph outputs of `dtype` (at most `max_elements` elements) written as columns — element p on
    partition p, a batch-norm or layer-norm statistic, in chunks of `pmax` elements when longer; a scalar is
    element 0 on partition 0 — are copied into one fp32 SBUF staging tile (member of n elements:
    ceil(n / pmax) columns, chunk k in its column k) instead of being stored by their own DMAs; `finish`
    stores the whole tile with one DMA into the pack `name` (`OUT_PACK_NAME`), ``[pmax, columns]`` row-major
    (element e of the member whose first column is j at (e % pmax) * columns + j + e // pmax: one contiguous
    run per partition). Exact by construction: a read of a staged output from HBM before the end is preceded
    by a store of its columns (`before_append`), an output another instruction writes directly, or reads
    across a chunk boundary, leaves the stage (it keeps its own tensor), and the fusion cache still holds the
    stored tile for later loads."""

    def __init__(self, builder: object, dtype: str = "float32", name: str = OUT_PACK_NAME,
                 pmax: int | None = None, max_elements: int = STAGE_MAX) -> None:  # fmt: skip
        self.builder = weakref.proxy(builder)  # no cycle: the builder is freed by reference counting alone
        self.dtype, self.name = dtype, name  # the outputs' dtype, the pack's name
        self.max_elements = max_elements  # of the largest output staged
        self.pmax: int = pmax if pmax is not None else builder.preset.pmax  # type: ignore[attr-defined]
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
        pmax = self.pmax
        n = 1
        for s in decl.shape if decl is not None else ():
            n *= int(s)
        if (decl is None or decl.kind != "output" or decl.dtype != self.dtype or tile.dtype_name != "float32"
                or a.offset % pmax or a.partitions != min(pmax, n - a.offset)
                or (a.partition_stride != 1 and a.partitions > 1)
                or a.free_elements != 1 or n > self.max_elements or tile.access_key()[0] != 0
                or a.tensor in self.unstageable):  # fmt: skip
            return False
        if a.tensor not in self.columns:
            first = max((j + column_count(self.sizes[m], pmax) for m, j in self.columns.items()), default=0)
            if first + column_count(n, pmax) > STAGE_COLUMNS:
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
        pmax = self.pmax
        for a in (*reads, *outs) if self.max_elements > 1 else ():  # an access of a scalar is in its one chunk
            if (a.space is Space.HBM and a.tensor not in self.unstageable and a.partitions * a.free_elements > 1
                    and chunk_of(a, pmax) is None):  # fmt: skip
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
        pmax = self.pmax
        self.busy = True
        try:
            for k in sorted(self.chunks.get(name, ())):
                rows = min(pmax, n - k * pmax)
                self.builder.dma(window(Access(Space.HBM, name, self.dtype, k * pmax, rows, ((1, 1),), 0, 1)),
                                 self.tile[0:rows, j + k : j + k + 1])  # fmt: skip
        finally:
            self.busy = False
        self.dirty.discard(name)

    def finish(self) -> int:
        """Store every staged output with one DMA (inside a kernel call); the pack's column count (0: none)."""
        from nprof.compiler.kernels.hbm import window

        pmax = self.pmax
        for name in [m for m in self.columns if len(self.chunks.get(m, ())) < column_count(self.sizes[m], pmax)]:
            self._store(name)  # not every chunk staged: the others were written to its own tensor
            del self.columns[name]
        if not self.columns or self.tile is None:
            return 0
        k = max(j + column_count(self.sizes[m], pmax) for m, j in self.columns.items())
        self.builder.hbm_tensor(self.name, (pmax * k,), self.dtype, "output", None)
        self.busy = True
        try:
            self.builder.dma(window(Access(Space.HBM, self.name, self.dtype, 0, pmax, ((1, k),), 0, k)),
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


def column_count(n: int, pmax: int) -> int:
    """The columns of `pmax` rows that hold `n` elements (a partial last column counts)."""
    return -(-n // pmax)


def chunk_of(a: Access, pmax: int) -> int | None:
    """The chunk (elements k * pmax.. of its tensor) holding every element of `a`, or None when `a` spans
    more than one."""
    last = a.offset + (a.partitions - 1) * max(a.partition_stride, 0) + sum((n - 1) * max(s, 0) for s, n in a.free)
    if min(a.partition_stride, *(s for s, _ in a.free)) < 0 or a.offset // pmax != last // pmax:
        return None
    return a.offset // pmax


def staged_program(program: Program, columns: Mapping[str, int], sizes: Mapping[str, int], k: int,
                   pmax: int = 128, name: str = OUT_PACK_NAME) -> Program:  # fmt: skip
    """`program` with every access of a staged output moved into the output pack `name` (element e of the
    member whose first column is j at (e % pmax) * k + j + e // pmax: within one chunk, offsets and strides
    scaled by k), their declarations dropped, the layout added to its meta (`OUT_PACKED_META`: JSON
    ``{pack: [k, [[output, first column, elements], ...]], ...}``)."""

    def acc(a: Access) -> Access:
        if a.space is not Space.HBM or a.tensor not in columns:
            return a
        chunk = chunk_of(a, pmax)
        assert chunk is not None, f"an access of staged output {a.tensor} spans chunks"  # unstaged when read so
        return dataclasses.replace(a, tensor=name, offset=(a.offset % pmax) * k + columns[a.tensor] + chunk,
                                   partition_stride=a.partition_stride * k,
                                   free=tuple((s * k, n) for s, n in a.free))  # fmt: skip

    def moved(ins: Instruction) -> Instruction:
        if not any(a.tensor in columns for a in (*ins.outs, *ins.ins)):
            return ins
        return dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))

    layout = [[name, j, sizes[name]] for name, j in columns.items()]
    tensors = tuple(t for t in program.tensors if t.name not in columns)
    packs = {**json.loads(program.meta.get(OUT_PACKED_META, "{}")), name: [k, layout]}
    meta = {**program.meta, OUT_PACKED_META: json.dumps(packs)}
    return dataclasses.replace(
        program, tensors=tensors, instructions=tuple(map(moved, program.instructions)), meta=meta
    )


def unpack_outputs(program: Program, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`outputs` (device results by program tensor) with every staged output cut from its pack (flat values:
    the runtime reshapes them); unchanged for a program without an output pack."""
    from nprof.compiler.tailstage import unpack_tail

    packs = json.loads(program.meta.get(OUT_PACKED_META, "{}"))
    out = unpack_tail(program, outputs)  # the last stores gathered in one DMA (`nprof.compiler.tailstage`)
    for name, (k, layout) in packs.items():
        table = np.asarray(out.pop(name)).reshape(-1, int(k))
        rows = table.shape[0]
        for member, j, n in layout:  # chunk c of a member in its column j + c
            columns = table[:, int(j) : int(j) + column_count(int(n), rows)]
            out[member] = np.ascontiguousarray(columns.T).reshape(-1)[: int(n)]
    from nprof.compiler.blockstage import unpack_blocks

    return unpack_blocks(program, out)  # outputs stored as row blocks (`nprof.compiler.blockstage`)
