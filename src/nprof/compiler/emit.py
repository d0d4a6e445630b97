"""The compiler's instruction emitter: tiles in SBUF/PSUM, strided HBM views, dependencies, metadata.

Contract: an `Emitter` builds one `Program`. Lowering kernels (``nprof.compiler.kernels``) call its
NKI-ISA-shaped methods — ``load``/``store`` (DMA), ``nc_matmul``, ``nc_transpose``, ``activation``,
``tensor_tensor``, ``tensor_scalar``, ``tensor_reduce``, ``tensor_copy``, ``memset``, ``iota``, ``select``,
``affine_select``, ``reciprocal``, ``bn_stats``/``bn_aggr`` — each appending one ISA `Instruction` whose
semantics are exactly those of `nprof.arch.isa`. The emitter:

* allocates tiles from a ring over SBUF (and over the PSUM banks), so consecutive kernels can overlap;
* computes ``deps`` (read-after-write, write-after-read, write-after-write) on overlapping regions: SBUF/PSUM
  per physical allocation, HBM per element range of each tensor;
* spreads DMAs round-robin over the preset's DMA queues, marks DMAs that save an intermediate to HBM as
  ``spill`` and DMAs that read one back as ``reload``;
* stamps every instruction with the current ``scope`` (``layer``, ``hlo_name``, ``source``).

Tiles are always fp32 (the compiler computes in fp32); HBM tensors keep their own dtype and DMAs convert.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Engine, Instruction, Opcode, Scalar, Space, attrs
from nprof.arch.presets import get_preset
from nprof.errors import NprofError
from nprof.program.model import Program, TensorDecl, TensorKind

TILE_DTYPE = "float32"
_ALIGN = 64


@dataclass(frozen=True)
class Tile:
    """An on-chip tile: `partitions` x contiguous free dims, as an Access (plus sub-views)."""

    access: Access

    @property
    def shape(self) -> tuple[int, ...]:
        return self.access.shape

    @property
    def p(self) -> int:
        return self.access.partitions

    def cols(self, start: int, size: int) -> Tile:
        """Columns [start, start+size) of a 2-D tile."""
        a = self.access
        if len(a.free) != 1:
            raise NprofError("internal: cols() needs a 2-D tile")
        stride = a.free[0][0]
        return Tile(
            Access(
                a.space,
                a.tensor,
                a.dtype,
                a.offset + start * stride * 4,
                a.partitions,
                ((stride, size),),
                a.partition_start,
                1,
            )
        )

    def rows(self, start: int, size: int) -> Tile:
        a = self.access
        return Tile(Access(a.space, a.tensor, a.dtype, a.offset, size, a.free, a.partition_start + start, 1))

    def flat(self) -> Tile:
        """The tile seen as [P, N] (its free dims are contiguous)."""
        a = self.access
        return Tile(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((1, a.free_elements),),
                           a.partition_start, 1))  # fmt: skip


@dataclass
class _Region:
    lo: int
    hi: int  # exclusive
    writer: int  # last instruction writing it (-1: none)
    readers: list[int]


class Emitter:
    """Appends instructions for one Program (see module doc)."""

    def __init__(self, name: str, preset: str = "trn1") -> None:
        self.name = name
        self.preset = get_preset(preset)
        self.tensors: dict[str, TensorDecl] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.instructions: list[Instruction] = []
        self._layer: str | None = None
        self._hlo: str | None = None
        self._source: str | None = None
        self._sb_next = 0
        self._sb_high = 0
        self._ps_next = 0
        self._alloc_id = 0
        self._queue = 0
        self._onchip: dict[Space, list[_Region]] = {Space.SBUF: [], Space.PSUM: []}
        self._tile_region: dict[str, _Region] = {}
        self._hbm: dict[str, list[_Region]] = {}
        self._pins: list[tuple[int, int]] = []
        self._psum_pins: set[int] = set()
        self._pin_of: dict[str, tuple[Space, int, int]] = {}

    # ----- HBM tensors and scopes -----
    def hbm_tensor(
        self, name: str, shape: Sequence[int], dtype: str, kind: TensorKind, value: np.ndarray | None = None
    ) -> TensorDecl:
        if name in self.tensors:
            raise NprofError(f"internal: tensor {name!r} declared twice")
        decl = TensorDecl(name, tuple(int(s) for s in shape), dtype, kind)
        self.tensors[name] = decl
        if value is not None:
            self.constants[name] = np.ascontiguousarray(value).reshape(decl.shape)
        return decl

    @contextmanager
    def scope(self, layer: str | None, hlo_name: str | None, source: str | None) -> Iterator[None]:
        saved = (self._layer, self._hlo, self._source)
        self._layer, self._hlo, self._source = layer, hlo_name, source
        try:
            yield
        finally:
            self._layer, self._hlo, self._source = saved

    # ----- on-chip allocation -----
    def sbuf(self, partitions: int, *free: int, pin: bool = False) -> Tile:
        """A new SBUF tile. Unpinned tiles live until the allocation ring wraps (one kernel iteration);
        pinned ones (accumulators, tiles reused across iterations) until `release_pins`."""
        return self._alloc(Space.SBUF, partitions, free, pin)

    def release_pins(self) -> None:
        self._pins = []
        self._psum_pins = set()
        self._pin_of = {}

    def unpin(self, tile: Tile) -> None:
        pin = self._pin_of.pop(tile.access.tensor, None)
        if pin is None:
            return
        space, lo, hi = pin
        if space is Space.SBUF:
            self._pins.remove((lo, hi))
        else:
            self._psum_pins.discard(lo)

    def psum(self, partitions: int, *free: int, pin: bool = False) -> Tile:
        return self._alloc(Space.PSUM, partitions, free, pin)

    def _alloc(self, space: Space, partitions: int, free: Sequence[int], pin: bool = False) -> Tile:
        n = int(np.prod(free)) if free else 1
        if not 1 <= partitions <= self.preset.pmax:
            raise NprofError(f"internal: tile of {partitions} partitions")
        size = -(-n * ITEMSIZE[TILE_DTYPE] // _ALIGN) * _ALIGN
        if space is Space.SBUF:
            cap = self.preset.sbuf_partition_bytes
            if size > cap:
                raise NprofError(f"internal: tile of {size} bytes per partition exceeds SBUF")
            offset = self._sb_next
            for _ in range(len(self._pins) + 2):
                if offset + size > cap:
                    offset = 0
                clash = next((hi for lo, hi in self._pins if lo < offset + size and offset < hi), None)
                if clash is None:
                    break
                offset = clash
            else:
                raise NprofError("internal: SBUF exhausted by pinned tiles")
            if pin:
                self._pins.append((offset, offset + size))
                self._pin_of[f"sb{self._alloc_id + 1}"] = (space, offset, offset + size)
            self._sb_next = offset + size
            self._sb_high = max(self._sb_high, self._sb_next)
        else:
            bank = self.preset.psum_bank_bytes
            if size > bank:
                raise NprofError(f"internal: PSUM tile of {size} bytes exceeds a bank")
            banks = self.preset.psum_banks
            if len(self._psum_pins) >= banks:
                raise NprofError("internal: every PSUM bank is pinned")
            while self._ps_next in self._psum_pins:
                self._ps_next = (self._ps_next + 1) % banks
            offset = self._ps_next * bank
            if pin:
                self._psum_pins.add(self._ps_next)
                self._pin_of[f"ps{self._alloc_id + 1}"] = (space, self._ps_next, self._ps_next)
            self._ps_next = (self._ps_next + 1) % banks
            size = bank
        self._alloc_id += 1
        name = f"{'sb' if space is Space.SBUF else 'ps'}{self._alloc_id}"
        # the new allocation inherits the hazards of every older one it overlaps
        region = _Region(offset, offset + size, -1, [])
        keep: list[_Region] = []
        for old in self._onchip[space]:
            if old.lo < region.hi and region.lo < old.hi:
                region.readers.extend(old.readers)
                if old.writer >= 0:
                    region.readers.append(old.writer)
            else:
                keep.append(old)
        keep.append(region)
        self._onchip[space] = keep
        self._tile_region[name] = region
        strides = []
        acc = 1
        for s in reversed(free):
            strides.append(acc)
            acc *= s
        free_ap = tuple(zip(reversed(strides), free, strict=True)) if free else ((1, 1),)
        return Tile(Access(space, name, TILE_DTYPE, offset, partitions, free_ap))

    # ----- dependency tracking -----
    def _deps(self, outs: Sequence[Access], ins: Sequence[Access]) -> tuple[int, ...]:
        deps: set[int] = set()
        for a in ins:
            for r in self._regions(a):
                if r.writer >= 0:
                    deps.add(r.writer)
        for a in outs:
            for r in self._regions(a):
                if r.writer >= 0:
                    deps.add(r.writer)
                deps.update(r.readers)
        return tuple(sorted(deps))

    def _regions(self, a: Access) -> list[_Region]:
        if a.space is Space.HBM:
            lo, hi = _hbm_range(a)
            return [r for r in self._hbm.get(a.tensor, []) if r.lo < hi and lo < r.hi]
        return [self._tile_region[a.tensor]]

    def _record(self, idx: int, outs: Sequence[Access], ins: Sequence[Access]) -> None:
        for a in ins:
            if a.space is Space.HBM:
                lo, hi = _hbm_range(a)
                self._hbm.setdefault(a.tensor, []).append(_Region(lo, hi, -1, [idx]))
            else:
                self._tile_region[a.tensor].readers.append(idx)
        for a in outs:
            if a.space is Space.HBM:
                lo, hi = _hbm_range(a)
                regions = [r for r in self._hbm.get(a.tensor, []) if not (lo <= r.lo and r.hi <= hi)]
                regions.append(_Region(lo, hi, idx, []))
                self._hbm[a.tensor] = regions
            else:
                region = self._tile_region[a.tensor]
                region.writer = idx
                region.readers = []

    def _emit(
        self,
        engine: Engine,
        opcode: Opcode,
        outs: Sequence[Access],
        ins: Sequence[Access],
        attributes: tuple[tuple[str, Scalar], ...] = (),
        queue: int = -1,
    ) -> int:
        idx = len(self.instructions)
        deps = self._deps(outs, ins)
        self.instructions.append(
            Instruction(
                engine, opcode, tuple(outs), tuple(ins), attributes, deps, queue, self._source, self._layer, self._hlo
            )
        )
        self._record(idx, outs, ins)
        return idx

    # ----- DMA -----
    def dma(self, dst: Access, src: Access) -> int:
        spill = dst.space is Space.HBM and self.tensors[dst.tensor].kind == "internal"
        reload = src.space is Space.HBM and self.tensors[src.tensor].kind == "internal"
        queue = self._queue
        self._queue = (self._queue + 1) % self.preset.dma_queues
        a = attrs(spill=True if spill else None, reload=True if reload else None)
        return self._emit(Engine.DMA, Opcode.DMA_DIRECT2D, (dst,), (src,), a, queue)

    def load(self, src: Access, tile: Tile | None = None) -> Tile:
        """DMA an HBM access pattern [P, *free] into a (new) SBUF tile of the same shape."""
        if tile is None:
            tile = self.sbuf(src.partitions, *(s for _, s in src.free))
        self.dma(tile.access, src)
        return tile

    def store(self, dst: Access, tile: Tile) -> None:
        self.dma(dst, tile.access)

    # ----- compute -----
    def nc_matmul(self, out: Tile, stationary: Tile, moving: Tile, accumulate: bool) -> None:
        last = next((i for i in reversed(self.instructions) if i.opcode is Opcode.MATMUL), None)
        if last is None or last.ins[0] != stationary.access:
            self._emit(Engine.TENSOR, Opcode.LDWEIGHTS, (), (stationary.access,))
        self._emit(Engine.TENSOR, Opcode.MATMUL, (out.access,), (stationary.access, moving.access),
                   attrs(accumulate=accumulate))  # fmt: skip

    def nc_transpose(self, out: Tile, src: Tile) -> None:
        self._emit(Engine.TENSOR, Opcode.TRANSPOSE, (out.access,), (src.access,))

    def activation(
        self,
        out: Tile,
        src: Tile,
        func: str,
        *,
        scale: float | Tile = 1.0,
        bias: float | Tile = 0.0,
        reduce_op: str | None = None,
        reduce_out: Tile | None = None,
    ) -> None:
        ins = [src.access]
        if isinstance(bias, Tile) or isinstance(scale, Tile):
            ins.append(bias.access if isinstance(bias, Tile) else self._const_col(src.p, float(bias)).access)
        if isinstance(scale, Tile):
            ins.append(scale.access)
        outs = [out.access] + ([reduce_out.access] if reduce_out is not None else [])
        a = attrs(
            func=func,
            scale=None if isinstance(scale, Tile) else float(scale),
            bias=None if isinstance(bias, Tile) else float(bias),
            reduce_op=reduce_op,
        )
        self._emit(Engine.SCALAR, Opcode.ACTIVATE, outs, ins, a)

    def _const_col(self, partitions: int, value: float) -> Tile:
        t = self.sbuf(partitions, 1)
        self.memset(t, value)
        return t

    def tensor_tensor(self, out: Tile, a: Tile, b: Tile, op: str, engine: Engine = Engine.VECTOR) -> None:
        self._emit(engine, Opcode.TENSOR_TENSOR, (out.access,), (a.access, b.access), attrs(op=op))

    def tensor_scalar(
        self,
        out: Tile,
        src: Tile,
        op0: str,
        operand0: float | Tile,
        *,
        reverse0: bool = False,
        op1: str | None = None,
        operand1: float | Tile | None = None,
        reverse1: bool = False,
        engine: Engine = Engine.VECTOR,
    ) -> None:
        ins = [src.access]
        per_partition = isinstance(operand0, Tile) or isinstance(operand1, Tile)
        if per_partition:
            o0 = operand0 if isinstance(operand0, Tile) else self._const_col(src.p, float(operand0))
            ins.append(o0.access)
            if op1 is not None:
                o1 = operand1 if isinstance(operand1, Tile) else self._const_col(src.p, float(operand1 or 0.0))
                ins.append(o1.access)
        a = attrs(
            op0=op0,
            operand0=None if per_partition else float(operand0),  # type: ignore[arg-type]
            reverse0=reverse0 or None,
            op1=op1,
            operand1=None if per_partition or op1 is None else float(operand1),  # type: ignore[arg-type]
            reverse1=reverse1 or None,
        )
        self._emit(engine, Opcode.TENSOR_SCALAR, (out.access,), ins, a)

    def tensor_reduce(self, out: Tile, src: Tile, op: str, axes: tuple[int, ...], negate: bool = False) -> None:
        a = attrs(op=op, axes=axes, negate=negate or None)
        self._emit(Engine.VECTOR, Opcode.TENSOR_REDUCE, (out.access,), (src.access,), a)

    def tensor_copy(self, out: Tile, src: Tile, engine: Engine = Engine.VECTOR) -> None:
        self._emit(engine, Opcode.TENSOR_COPY, (out.access,), (src.access,))

    def memset(self, out: Tile, value: float, engine: Engine = Engine.VECTOR) -> None:
        self._emit(engine, Opcode.MEMSET, (out.access,), (), attrs(value=float(value)))

    def iota(self, out: Tile, base: int, channel_multiplier: int, steps: tuple[int, ...]) -> None:
        a = attrs(base=int(base), channel_multiplier=int(channel_multiplier), steps=steps)
        self._emit(Engine.GPSIMD, Opcode.IOTA, (out.access,), (), a)

    def affine_select(
        self, out: Tile, src: Tile, offset: int, channel_multiplier: int, steps: tuple[int, ...], cmp: str, fill: float
    ) -> None:
        a = attrs(offset=offset, channel_multiplier=channel_multiplier, steps=steps, cmp=cmp, fill=float(fill))
        self._emit(Engine.GPSIMD, Opcode.AFFINE_SELECT, (out.access,), (src.access,), a)

    def select(self, out: Tile, cond: Tile, a: Tile, b: Tile) -> None:
        self._emit(Engine.VECTOR, Opcode.SELECT, (out.access,), (cond.access, a.access, b.access))

    def reciprocal(self, out: Tile, src: Tile) -> None:
        self._emit(Engine.VECTOR, Opcode.RECIPROCAL, (out.access,), (src.access,))

    def bn_stats(self, out: Tile, src: Tile) -> None:
        self._emit(Engine.VECTOR, Opcode.BN_STATS, (out.access,), (src.access,))

    def bn_aggr(self, out: Tile, src: Tile) -> None:
        self._emit(Engine.VECTOR, Opcode.BN_AGGR, (out.access,), (src.access,))

    def collective(self, opcode: Opcode, out: Access, src: Access, op: str | None = None) -> None:
        """A collective on the CC-cores across all workers: HBM `src` (this rank's part) -> HBM `out`."""
        self._emit(Engine.CC, opcode, (out,), (src,), attrs(op=op, group=()))

    # ----- result -----
    def build(self, meta: dict[str, str] | None = None) -> Program:
        program = Program(
            name=self.name,
            preset=self.preset.name,
            tensors=tuple(self.tensors.values()),
            instructions=tuple(self.instructions),
            constants=dict(self.constants),
            sbuf_bytes=self._sb_high,
            psum_bytes=self.preset.psum_partition_bytes if self._alloc_id else 0,
            meta=dict(meta or {}),
        )
        program.validate()
        return program


def _hbm_range(a: Access) -> tuple[int, int]:
    lo = a.offset
    hi = a.offset + (a.partitions - 1) * a.partition_stride + sum((size - 1) * stride for stride, size in a.free)
    return min(lo, hi), max(lo, hi) + 1
