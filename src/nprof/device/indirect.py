"""Numerics of instructions addressed with runtime values: indirect DMAs, dynamic copies, gathers, shuffles.

Semantics are those of `nprof.arch.isa` ("Runtime addresses", GATHER,
LOCAL_GATHER, STREAM_SHUFFLE). Offsets are read from SBUF when the
instruction runs, so they are checked then: an index outside its axis raises
`IndirectIndexError` (an `IndexError`; the simulator reports it as
`nprof.errors.DeviceIndexError`, an NprofError that is also an IndexError),
unless the instruction says `oob` "skip".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Instruction, Opcode, Space
from nprof.device.memory import Memory, convert, numpy_dtype

_FLOAT_READ = np.float64  # values are moved through float64: exact for every integer and float dtype


class IndirectIndexError(IndexError):
    """A runtime index is outside its axis (the message says which and how to fix it). `nki_message` is the
    line NKI's simulator gives for an HBM access (numpy's, on the flattened tensor: "index A is out of bounds
    for axis 0 with size N", A the first element's flat address), or None."""

    def __init__(self, message: str, nki_message: str | None = None) -> None:
        super().__init__(message)
        self.nki_message = nki_message


def _indices(mem: Memory, acc: Access) -> np.ndarray:
    """The integer values of an index Access, flattened (int64)."""
    return np.rint(mem.read(acc).astype(np.float64).reshape(-1)).astype(np.int64)


def _valid_rows(ins: Instruction, vals: np.ndarray, mem: Memory | None = None) -> np.ndarray:
    """Per index value: does the shifted pattern stay on its axis? IndirectIndexError unless oob is skip
    (with `mem`, its `nki_message` names the first bad element's flat address in the HBM side)."""
    size, lo, hi = int(ins.attr("dyn_size", 0)), int(ins.attr("dyn_lo", 0)), int(ins.attr("dyn_hi", 0))
    ok = (vals + lo >= 0) & (vals + hi < size)
    if not ok.all() and ins.attr("oob", "error") != "skip":
        k = int(np.argmin(ok))
        bad = int(vals[k] + (lo if vals[k] + lo < 0 else hi))
        where = f" (partition {k})" if vals.size > 1 else ""
        raise IndirectIndexError(
            f"index {bad}{where} is out of bounds for axis {ins.attr('dyn_axis', 0)} with size {size}; fix the "
            "indices or let the DMA skip them (nisa.dma_copy(..., oob_mode=nisa.oob_mode.skip))",
            _nki_message(ins, mem, vals, k) if mem is not None else None,
        )
    return ok


def _nki_message(ins: Instruction, mem: Memory, vals: np.ndarray, k: int) -> str | None:
    """NKI's simulator's line for a bad index `vals[k]` of an HBM gather/scatter (None on chip)."""
    hbm = ins.ins[0] if ins.attr("indirect") == "src" else ins.outs[0]
    flat = mem.hbm.get(hbm.tensor)
    if hbm.space is not Space.HBM or flat is None:
        return None
    base = _addresses(hbm)
    first = int((base[k] if vals.size > 1 else base).min()) + int(ins.attr("dyn_stride", 0)) * int(vals[k])
    return f"index {first} is out of bounds for axis 0 with size {flat.size}"


def _shift(acc: Access, elements: int) -> Access:
    """`acc` moved by `elements` elements (HBM: in the flat tensor; on chip: within each partition)."""
    step = elements if acc.space is Space.HBM else elements * ITEMSIZE[acc.dtype]
    return dataclasses.replace(acc, offset=acc.offset + step)


def _move(mem: Memory, dst: Access, src: Access, rmw: str | None) -> None:
    """dst = src (or dst += src), dtype converted."""
    value = mem.read(src).astype(_FLOAT_READ).reshape(dst.shape)
    if rmw == "add":
        value = mem.read(dst).astype(_FLOAT_READ) + value
    mem.write(dst, value)


def _addresses(acc: Access) -> np.ndarray:
    """Flat element index of every element of an HBM Access, in its logical shape (int64)."""
    steps = [(acc.partition_stride, acc.partitions), *acc.free]
    addr = np.full(acc.shape, acc.offset, np.int64)
    for axis, (stride, size) in enumerate(steps):
        shape = [1] * len(steps)
        shape[axis] = size
        addr += (np.arange(size, dtype=np.int64) * stride).reshape(shape)
    return addr


def _flat(mem: Memory, acc: Access) -> np.ndarray:
    flat = mem.hbm.get(acc.tensor)
    if flat is None or flat.dtype != numpy_dtype(acc.dtype):
        raise ValueError(f"indirect access to {acc.tensor!r} needs the tensor's own dtype")
    return flat


def _scatter_add(flat: np.ndarray, addr: np.ndarray, values: np.ndarray, dtype: str) -> None:
    """flat[addr] += values, duplicates accumulating, in float64 then converted."""
    uniq, inverse = np.unique(addr, return_inverse=True)
    sums = np.zeros(uniq.size, np.float64)
    np.add.at(sums, inverse.reshape(-1), values.reshape(-1))
    flat[uniq] = convert(flat[uniq].astype(np.float64) + sums, dtype)


def _vector_rows(ins: Instruction, mem: Memory, vals: np.ndarray) -> None:
    """An HBM gather (indirect src) or scatter (indirect dst) of one row per partition."""
    src, dst = ins.ins[0], ins.outs[0]
    hbm = src if ins.attr("indirect") == "src" else dst
    if vals.size != hbm.partitions:
        raise ValueError(f"{vals.size} indices for an access of {hbm.partitions} partitions")
    rows = np.nonzero(_valid_rows(ins, vals, mem))[0]
    stride = int(ins.attr("dyn_stride", 0))
    addr = _addresses(hbm) + (stride * vals).reshape((-1,) + (1,) * (len(hbm.shape) - 1))
    addr = addr[rows]
    flat = _flat(mem, hbm)
    if addr.size and (addr.min() < 0 or addr.max() >= flat.size):
        raise IndirectIndexError(f"{hbm.tensor}: elements {addr.min()}..{addr.max()} outside 0..{flat.size - 1}")
    if hbm is src:
        out = mem.view(dst)
        value = flat[addr].astype(_FLOAT_READ)
        if ins.attr("rmw") == "add":
            value = out[rows].astype(_FLOAT_READ) + value
        out[rows] = convert(value, dst.dtype)
        return
    value = mem.read(src).astype(_FLOAT_READ).reshape(dst.shape)[rows]
    if ins.attr("rmw") == "add":
        _scatter_add(flat, addr, value, dst.dtype)
    else:
        flat[addr] = convert(value, dst.dtype)


def indirect_copy(ins: Instruction, mem: Memory) -> None:
    """A DMA_DIRECT2D or TENSOR_COPY with runtime offsets (attrs `indirect`) and/or adding into its destination
    (attrs `rmw`); see `nprof.arch.isa`."""
    if len(ins.ins) == 1:
        _move(mem, ins.outs[0], ins.ins[0], ins.attr("rmw"))
        return
    vals = _indices(mem, ins.ins[-1])
    if vals.size > 1:
        _vector_rows(ins, mem, vals)
        return
    if not _valid_rows(ins, vals, mem)[0]:
        return  # oob skip: nothing moves
    src, dst = ins.ins[0], ins.outs[0]
    delta = int(ins.attr("dyn_stride", 0)) * int(vals[0])
    if ins.attr("indirect") == "src":
        src = _shift(src, delta)
    else:
        dst = _shift(dst, delta)
    _move(mem, dst, src, ins.attr("rmw"))


def _gather(ins: Instruction, mem: Memory) -> None:
    data = mem.read(ins.ins[0])
    data = data.reshape(data.shape[0], -1)
    idx = _indices(mem, ins.ins[1]).reshape(data.shape[0], -1)
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[1]):
        bad = int(idx.max() if idx.max() >= data.shape[1] else idx.min())
        raise IndirectIndexError(
            f"gather index {bad} is out of bounds for {data.shape[1]} elements per partition; fix the indices"
        )
    mem.write(ins.outs[0], np.take_along_axis(data, idx, axis=1).reshape(ins.outs[0].shape))


def _local_gather(ins: Instruction, mem: Memory) -> None:
    data = mem.read(ins.ins[0])
    data = data.reshape(data.shape[0], -1)
    index = _indices(mem, ins.ins[1]).reshape(data.shape[0], -1)
    elems, valid = int(ins.attr("elems", 1)), int(ins.attr("valid", 0))
    out = np.empty((data.shape[0], valid, elems), data.dtype)
    for g in range(0, data.shape[0], 16):
        starts = index[g : g + 16].reshape(-1, order="F")[:valid]
        cols = starts[:, None] + np.arange(elems)[None, :]
        if cols.size and (cols.min() < 0 or cols.max() >= data.shape[1]):
            raise IndirectIndexError(
                f"local_gather index {int(starts.max())} reads past the {data.shape[1]} elements of partitions "
                f"{g}..{g + 15}; fix the indices"
            )
        out[g : g + 16] = data[g : g + 16][:, cols]
    mem.write(ins.outs[0], out.reshape(ins.outs[0].shape))


def _stream_shuffle(ins: Instruction, mem: Memory) -> None:
    src = mem.read(ins.ins[0])
    dst_acc = ins.outs[0]
    out = mem.read(dst_acc)
    src = src.reshape(src.shape[0], -1)
    out2 = out.reshape(out.shape[0], -1)
    shuffle = tuple(int(s) for s in ins.attr("shuffle", ()))
    for row in range(out2.shape[0]):
        q, i = divmod(row, 32)
        k = shuffle[i] if i < len(shuffle) else 255
        if k == 255:
            continue
        if q * 32 + k >= src.shape[0]:
            raise ValueError(f"shuffle row {row} reads source partition {q * 32 + k} of {src.shape[0]}")
        out2[row] = src[q * 32 + k]
    mem.write(dst_acc, out2.reshape(out.shape))


INDIRECT_HANDLERS: dict[Opcode, Callable[[Instruction, Memory], None]] = {
    Opcode.GATHER: _gather,
    Opcode.LOCAL_GATHER: _local_gather,
    Opcode.STREAM_SHUFFLE: _stream_shuffle,
}
