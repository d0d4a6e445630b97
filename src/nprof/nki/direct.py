"""Direct allocation: tiles placed where the kernel says (`nki.compiler.sbuf/psum.alloc/mod_alloc`).

Semantics, from AWS's "NKI Direct Allocation Developer Guide" and the `nki.compiler` API reference (Neuron 2.26):

* A tensor `(B..., par_dim(P), F...)` holds prod(B) logical tiles. `alloc(func)` maps each block index `idx`
  (one int per B axis) to a physical tile: SBUF `func(idx, P, fbytes) -> (start_partition, byte_addr)`, PSUM
  `func(idx, P, fbytes) -> (bank, start_partition, byte_addr)` (`fbytes`: bytes of one logical tile per
  partition). `mod_alloc(...)` is `alloc` with the modulo scheme (`nprof.nki.compiler._direct`); with no
  `num_*_tiles` every block shares one physical tile.
* Checked where the tensor is declared: the start partition follows the ISA rule (P > 64: 0; P > 32: 0 or 64;
  else 0/32/64/96); PSUM tiles start at partition 0 and byte 0 of a bank; an SBUF tile lies within the partition.
  An SBUF tile starting in the top 16 KiB, which the compiler keeps for itself (the `byte_addr` range of the
  2.26 reference), warns (AWS's allocated SD-attention kernel does this at seqlen 4096 in fp32).
* Lifetime conflicts: two logical tiles whose physical memory overlaps must not be alive at once. Reading a
  logical tile after another one wrote over its memory is a KernelError at the read's `file:line` (the guide:
  "tensors [that] have partially overlapping physical memory addresses ... would cause errors if the two tensors
  need to be alive at the same time"); writing over a tile that is never read again is fine.
* nprof's own intermediate tiles (results assigned with `t[...] = op(...)`, broadcast helpers) are kept out of
  every directly allocated range (`Allocator.pin`); a live automatically allocated tile in the way of a direct
  one is refused (NKI does not allow mixing both in one kernel).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.arch.isa import Access, Space
from nprof.nki.blocks import block_span
from nprof.nki.dtypes import NUMPY
from nprof.nki.source import kernel_error, user_location

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor, OnChip

COMPILER_RESERVED_SBUF = 16 * 1024  # bytes per partition the compiler keeps (nki.compiler.sbuf.alloc reference)
Key = tuple[int, int]  # (tile seq, block): one logical tile


def _isa_partition_rule(parts: int, start: int) -> bool:
    """AWS nki.compiler.sbuf.alloc: start partition 0 for P > 64, 0/64 for P > 32, 0/32/64/96 otherwise."""
    allowed = (0,) if parts > 64 else (0, 64) if parts > 32 else (0, 32, 64, 96)
    return start in allowed


@dataclass
class DirectBlocks:
    """Where each logical tile (block) of one directly allocated tile lives: block -> (partition, byte)."""

    base: OnChip
    buffer: Any  # the DirectBuffer
    stride: int  # elements between blocks in the tile's view layout
    nbytes: int  # bytes of one logical tile per partition
    declared: int  # instruction count at the declaration (earlier writes there were other tiles')
    loc: dict[int, tuple[int, int]] = field(default_factory=dict)
    align: int | None = None

    @property
    def born(self) -> _Declared:
        return _Declared(self.declared)

    def locate(self, block: int) -> tuple[int, int]:
        """(start partition, byte offset in the space) of logical tile `block`, checked on first use."""
        hit = self.loc.get(block)
        if hit is None:
            base = self.base
            shape, axis = base.shape, base.partition_axis
            idx = tuple(int(i) for i in np.unravel_index(block, shape[:axis])) if axis else ()
            parts = shape[axis] if shape else 1
            hit = self.buffer.locate(idx, parts, self.nbytes, base.builder.preset)
            _check_place(base, self.buffer.name, idx, hit, parts, self.nbytes)
            if self.loc and hit[0] != base.part0:
                raise kernel_error(
                    f"the logical tiles of {base.name!r} start at different partitions ({base.part0}, {hit[0]}); "
                    "nprof models one start partition per tensor — declare such tiles as separate tensors"
                )
            base.part0 = hit[0]
            self.loc[block] = hit
            base.builder.direct.pin(base, hit, parts, self.nbytes)
        return hit

    def view_stride(self, view: NkiTensor) -> int:
        """Elements of `view`'s dtype between blocks (a view may read the tile in another dtype: `.view`)."""
        return self.stride * int(np.dtype(NUMPY[self.base.dtype]).itemsize) // _itemsize(view)

    def place_view(self, view: NkiTensor, now: int) -> tuple[int, list[int]]:
        """Byte delta so that `delta + e0 * itemsize` addresses the view's logical tiles, and those tiles."""
        stride = self.view_stride(view)
        b0, b1 = block_span(view, stride)
        span = list(range(b0, b1 + 1))
        first = self.locate(b0)
        for k, b in enumerate(span[1:], 1):
            part, byte = self.locate(b)
            if part != first[0] or byte != first[1] + k * stride * _itemsize(view):
                raise kernel_error(
                    f"this view of {view.name!r} spans logical tiles {b0}..{b1} that the direct allocation places "
                    "apart; index one block at a time"
                )
        return first[1] - b0 * stride * _itemsize(view), span

    def free_block(self, block: int) -> None:
        """Direct tiles are never freed by liveness: their memory is the kernel's to manage."""

    def free_all(self) -> None:
        """See `free_block`."""


class _Declared(dict):
    """`born` of every block: the declaration's instruction count (for `nprof.nki.blocks.placed_at`)."""

    def __init__(self, value: int) -> None:
        super().__init__()
        self.value = value

    def get(self, key: Any, default: Any = None) -> int:
        return self.value


def _itemsize(view: NkiTensor) -> int:
    return int(np.dtype(NUMPY[view.dtype_name]).itemsize)


def _check_place(base: OnChip, api: str, idx: tuple[int, ...], hit: tuple[int, int], parts: int, nbytes: int) -> None:
    """KernelError when the physical tile breaks the placement rules (see module doc)."""
    part, byte = hit
    what = f"{api}: logical tile {idx} of {base.name!r}"
    if not _isa_partition_rule(parts, part):
        raise kernel_error(
            f"{what} starts at partition {part}; a {parts}-partition tile must start at "
            f"{'0' if parts > 64 else '0 or 64' if parts > 32 else '0, 32, 64 or 96'}"
        )
    preset = base.builder.preset
    if base.space is Space.PSUM:
        bank_bytes = preset.psum_bank_bytes
        if part != 0 or byte % bank_bytes != 0:
            raise kernel_error(f"{what}: PSUM tiles start at partition 0 and byte 0 of a bank (NKI 2.26)")
        if byte // bank_bytes >= preset.psum_banks:
            raise kernel_error(f"{what} is in bank {byte // bank_bytes}; PSUM has banks 0..{preset.psum_banks - 1}")
        return
    limit = preset.sbuf_partition_bytes - COMPILER_RESERVED_SBUF
    if byte < 0 or byte + nbytes > preset.sbuf_partition_bytes:
        raise kernel_error(
            f"{what} covers bytes {byte}..{byte + nbytes - 1} of each partition, outside the "
            f"{preset.sbuf_partition_bytes}-byte SBUF partition; lower base_addr or use smaller tiles"
        )
    if byte >= limit:  # the reference's byte_addr range; the memory exists, so simulate it and say so
        from nprof.nki.calls import NkiCompatWarning

        warnings.warn(
            f"{user_location() or '<kernel>'}: {what} starts at byte {byte}, in the top "
            f"{COMPILER_RESERVED_SBUF // 1024} KiB of the partition that the Neuron compiler keeps for itself "
            f"(byte_addr must be below {limit}); simulated as given, the compiler may reject it",
            NkiCompatWarning,
            stacklevel=2,
        )


def make_blocks(base: OnChip, buffer: Any, stride_elems: int, now: int) -> DirectBlocks:
    """The placement of a directly allocated tile declared at instruction count `now` (every logical tile is
    placed, checked and pinned now, at its declaration)."""
    item = int(np.dtype(NUMPY[base.dtype]).itemsize)
    nbytes = math.prod(base.shape[base.partition_axis + 1 :]) * item
    blocks = DirectBlocks(base, buffer, stride_elems, nbytes, now)
    base.blocks = blocks
    for b in range(math.prod(base.shape[: base.partition_axis])):  # evaluated for every block, as the compiler does
        blocks.locate(b)
    return blocks


@dataclass
class _Live:
    space: Space
    parts: tuple[int, int]
    bytes_: tuple[int, int]
    name: str


class DirectState:
    """Per builder: which logical tile owns each directly allocated range, for the lifetime-conflict check."""

    def __init__(self, builder: Any) -> None:
        self.builder = builder
        self.tiles: dict[str, OnChip] = {}  # tile name -> base (only directly allocated tiles)
        self.by_seq: dict[int, OnChip] = {}
        self.live: dict[Key, _Live] = {}
        self.clobbered: dict[Key, str] = {}  # logical tile -> who overwrote it (name and line)
        self.recent: dict[tuple[str, int, int], list[Key]] = {}  # (tile, byte offset, partition) -> logical tiles
        self.writes: dict[int, set[Key]] = {}  # instruction index -> logical tiles it wrote

    def pin(self, base: OnChip, hit: tuple[int, int], parts: int, nbytes: int) -> None:
        """Keep nprof's automatic allocator out of a physical tile (KernelError if a live auto tile is there)."""
        self.tiles[base.name] = base
        self.by_seq[base.seq] = base
        allocator = self.builder._sbuf if base.space is Space.SBUF else self.builder._psum
        clash = allocator.pin(hit[1], nbytes)
        if clash:
            raise kernel_error(
                f"{base.blocks.buffer.name} places {base.name!r} at bytes {hit[1]}..{hit[1] + nbytes - 1}, where a "
                "tile placed by automatic allocation is still alive; NKI does not mix direct and automatic allocation "
                "in one kernel — allocate every tile of this kernel with nki.compiler"
            )

    def noted(self, view: NkiTensor, delta: int, span: list[int]) -> None:
        """`view` of a direct tile is about to become an instruction operand (called from `note_use`): remember
        which logical tiles its Access stands for (aliasing logical tiles share one Access; the latest use wins,
        and every operand is noted right before its instruction is appended)."""
        base = view.base
        offset = delta + view._e0 * _itemsize(view)
        self.recent[(base.name, offset, view._p0 + base.part0)] = [(base.seq, b) for b in span]  # type: ignore[union-attr]

    def wrote(self, index: int, acc: Access) -> bool:
        """Did instruction `index` write the logical tile(s) that `acc` (just built) addresses? A matmul `+=`
        into a logical tile that did not write its memory last starts a new accumulation group."""
        return bool(self.writes.get(index, set()).intersection(self._keys(acc)))

    def check(self, index: int, outs: tuple[Access, ...], ins: tuple[Access, ...], source: str | None) -> None:
        """Reads of overwritten logical tiles raise; writes take ownership of their range (see module doc)."""
        for acc in ins:
            for key in self._keys(acc):
                who = self.clobbered.get(key)
                if who is not None:
                    name = repr(self.by_seq[key[0]].name)
                    raise kernel_error(
                        f"lifetime conflict in direct allocation: {name} (logical tile {key[1]}) is read here, but "
                        f"{who} wrote over its memory since; tiles alive at the same time need disjoint addresses — "
                        "change base_addr/base_bank or give the tensor more physical tiles (num_free_tiles / "
                        "num_bank_tiles)"
                    )
        for acc in outs:
            keys = self._keys(acc)
            if keys:
                self._write(acc, keys, source)
                self.writes.setdefault(index, set()).update(keys)
        if len(self.recent) > 4096:  # the latest entry per operand is what matters (see `noted`)
            self.recent.clear()

    def _keys(self, acc: Access) -> list[Key]:
        if acc.space is Space.HBM or acc.tensor not in self.tiles:
            return []
        return self.recent.get((acc.tensor, acc.offset, acc.partition_start), [])

    def _write(self, acc: Access, keys: list[Key], source: str | None) -> None:
        lo, hi = _byte_range(acc)
        parts = (acc.partition_start, acc.partition_start + acc.partitions)
        base = self.by_seq[keys[0][0]]
        for key, entry in list(self.live.items()):
            if key in keys or entry.space is not acc.space:
                continue
            if (
                entry.parts[0] < parts[1]
                and parts[0] < entry.parts[1]
                and entry.bytes_[0] < hi
                and lo < entry.bytes_[1]
            ):
                del self.live[key]
                self.clobbered[key] = f"{base.name!r} ({source or 'unknown line'})"
        blocks: DirectBlocks = base.blocks
        nparts = base.shape[base.partition_axis] if base.shape else 1
        for key in keys:
            self.clobbered.pop(key, None)
            if key not in self.live:
                part, byte = blocks.locate(key[1])
                self.live[key] = _Live(acc.space, (part, part + nparts), (byte, byte + blocks.nbytes), base.name)


def _byte_range(acc: Access) -> tuple[int, int]:
    """[lo, hi) bytes per partition an on-chip Access touches."""
    from nprof.arch.isa import ITEMSIZE

    size = ITEMSIZE[acc.dtype]
    lo = hi = 0
    for stride, n in acc.free:
        if n > 0:
            ext = stride * (n - 1)
            lo, hi = lo + min(0, ext), hi + max(0, ext)
    return acc.offset + lo * size, acc.offset + hi * size + size
