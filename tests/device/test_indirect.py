"""Instructions with runtime addresses, built by hand: indirect DMA rows, scalar offsets, gathers, shuffles."""

import dataclasses

import numpy as np
import pytest

from nprof.arch import cost
from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset
from nprof.errors import DeviceIndexError
from tests.device.kit import Kit


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_vector_indirect_dma_adds_rows_with_duplicates_and_skips_out_of_range_ones():
    table = _rng(1).normal(size=(12, 5)).astype(np.float32)
    vals = _rng(2).normal(size=(6, 5)).astype(np.float32)
    idx = np.array([3, 3, 11, 0, 12, -1], np.int32)  # 12 and -1 are past the axis: skipped
    k = Kit()
    out = k.hbm("out", (12, 5), kind="output")
    k.dma(out, k.load("table", table))
    v, ix = k.load("vals", vals), k.load("idx", idx.reshape(6, 1), "int32")
    row_pattern = dataclasses.replace(out, partitions=6, partition_stride=0)  # row 0, one per partition
    k.emit(Engine.DMA, Opcode.DMA_DIRECT2D, (row_pattern,), (v, ix), queue=1, indirect="dst", dyn_stride=5,
           dyn_size=12, dyn_lo=0, dyn_hi=0, dyn_axis=0, oob="skip", rmw="add")  # fmt: skip
    expect = table.astype(np.float64)
    for r, i in enumerate(idx):
        if 0 <= i < 12:
            expect[i] += vals[r]
    np.testing.assert_allclose(k.run().outputs["out"], expect, rtol=1e-6)


def test_scalar_offset_moves_an_on_chip_copy_and_is_checked_against_its_axis():
    x = _rng(3).normal(size=(4, 10)).astype(np.float32)
    for offset, ok in ((6, True), (8, False)):
        k = Kit()
        src, off = k.load("x", x), k.load("off", np.array([[offset]], np.int32), "int32")
        dst = k.sbuf("y", 4, 3)
        window = dataclasses.replace(src, free=((1, 3),))  # elements 0..2 of each partition, moved by the offset
        k.emit(Engine.GPSIMD, Opcode.TENSOR_COPY, (dst,), (window, off), dynamic=True, indirect="src",
               dyn_stride=1, dyn_size=10, dyn_lo=0, dyn_hi=2, dyn_axis=1, source="k.py:7")  # fmt: skip
        k.store("y_out", dst)
        if ok:
            np.testing.assert_array_equal(k.run().outputs["y_out"], x[:, offset : offset + 3])
        else:
            with pytest.raises(DeviceIndexError, match=r"k\.py:7: index 10 is out of bounds for axis 1 with size 10"):
                k.run()


def test_local_gather_and_stream_shuffle_semantics():
    src = _rng(4).normal(size=(16, 12)).astype(np.float32)
    index = _rng(5).integers(0, 11, (16, 1)).astype(np.uint16)
    k = Kit()
    s, ix = k.load("src", src), k.load("ix", index, "uint16")
    got = k.sbuf("g", 16, 10)
    k.emit(Engine.GPSIMD, Opcode.LOCAL_GATHER, (got,), (s, ix), elems=2, valid=5)
    shuffled = k.sbuf("sh", 16, 10)
    k.emit(Engine.VECTOR, Opcode.MEMSET, (shuffled,), (), value=7.0)
    k.emit(Engine.VECTOR, Opcode.STREAM_SHUFFLE, (shuffled,), (got,), shuffle=tuple([15 - i for i in range(16)]
           + [255] * 16))  # fmt: skip
    k.store("out", shuffled)
    starts = index[:, 0][:5]
    gathered = np.stack([np.concatenate([src[p, o : o + 2] for o in starts]) for p in range(16)])
    np.testing.assert_array_equal(k.run().outputs["out"], gathered[::-1])


def test_costs_of_indirect_rows_and_local_gather():
    hbm = Access(Space.HBM, "t", "float32", 0, 64, ((1, 512),), 0, 0)  # one row per partition, rows at run time
    sb = Access(Space.SBUF, "s", "float32", 0, 64, ((1, 512),))
    assert cost.dma_chunks(hbm, sb) == 64
    # AWS's local_gather estimate: 64 indices x 4 fp32 elements: C = ((28 + 16) / 16) / min(1, 4) = 2.75
    assert cost.local_gather_cycles(64, 4, 4) == pytest.approx(150 + 256 / 2.75)
    gather = Instruction(Engine.GPSIMD, Opcode.LOCAL_GATHER, (sb,), (sb, sb), attrs(elems=4, valid=64))
    assert cost.instruction_cycles(gather, get_preset("trn1")) == pytest.approx(150 + 256 / 2.75)
