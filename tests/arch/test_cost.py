"""The cost table of docs/hardware.md, by hand."""

from __future__ import annotations

import pytest

from nprof.arch import cost
from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset

T1 = get_preset("trn1")
T2 = get_preset("trn2")


def sb(p: int, n: int, dtype: str = "float32", space: Space = Space.SBUF, stride: int = 1) -> Access:
    return Access(space, "t", dtype, 0, p, ((stride, n),))


def ins(engine: Engine, opcode: Opcode, outs=(), inputs=(), **kw) -> Instruction:  # type: ignore[no-untyped-def]
    return Instruction(engine, opcode, tuple(outs), tuple(inputs), attrs(**kw))


def test_matmul_cycles() -> None:
    assert cost.matmul_cycles(128, 512, "bfloat16", T1) == 512
    assert cost.matmul_cycles(128, 16, "bfloat16", T1) == 64  # min(64, N_stationary) floor
    assert cost.matmul_cycles(32, 16, "bfloat16", T1) == 32
    assert cost.matmul_cycles(128, 512, "float32", T1) == 2048
    assert cost.matmul_cycles(128, 512, "float8_e4m3", T2, "float8_e5m2") == 256
    assert cost.matmul_cycles(128, 512, "float8_e4m3", T1) == 512


def test_tensor_engine_cycles() -> None:
    assert cost.ldweights_cycles(128, "bfloat16", T1) == 32
    assert cost.ldweights_cycles(128, "float32", T1) == 128
    assert cost.transpose_cycles(128, 32) == 128
    assert cost.transpose_cycles(16, 512) == 64


def test_vector_scalar_gpsimd_cycles() -> None:
    assert cost.activation_cycles(512, T1) == 512
    assert cost.activation_cycles(10, T1) == 64
    assert cost.activation_cycles(512, T1, reduce=True) == 576
    assert cost.tensor_tensor_cycles(512, True, T1) == 512
    assert cost.tensor_tensor_cycles(512, False, T1) == 1024
    assert cost.tensor_reduce_cycles(512, "bfloat16", "add", T1) == 256
    assert cost.tensor_reduce_cycles(512, "float32", "add", T1) == 512
    assert cost.tensor_reduce_cycles(100, "bfloat16", "max", T1) == 64
    assert cost.reciprocal_cycles(100, T1) == 800
    assert cost.bn_aggr_cycles(300, T1) == 1300
    assert cost.gpsimd_index_cycles(512) == 662
    assert cost.dynamic_copy_cycles(100) == 600


def test_tensor_tensor_fast_path_rules() -> None:
    f32 = ins(Engine.VECTOR, Opcode.TENSOR_TENSOR, [sb(128, 512)], [sb(128, 512), sb(128, 512)], op="add")
    mixed = ins(
        Engine.VECTOR, Opcode.TENSOR_TENSOR, [sb(128, 512)], [sb(128, 512, space=Space.PSUM), sb(128, 512)], op="max"
    )
    bf = [sb(128, 512, "bfloat16")] * 3
    bf16_add = ins(Engine.VECTOR, Opcode.TENSOR_TENSOR, bf[:1], bf[1:], op="add")
    bf16_div = ins(Engine.VECTOR, Opcode.TENSOR_TENSOR, bf[:1], bf[1:], op="divide")
    strided = [sb(128, 256, "bfloat16", stride=2)] * 3
    bf16_strided = ins(Engine.VECTOR, Opcode.TENSOR_TENSOR, strided[:1], strided[1:], op="add")
    assert cost.instruction_cycles(f32, T1) == 1024
    assert cost.instruction_cycles(mixed, T1) == 512
    assert cost.instruction_cycles(bf16_add, T1) == 512
    assert cost.instruction_cycles(bf16_div, T1) == 1024
    assert cost.instruction_cycles(bf16_strided, T1) == 512  # 2N with N=256


def test_instruction_cycles_dispatch() -> None:
    act = ins(Engine.SCALAR, Opcode.ACTIVATE, [sb(128, 512)], [sb(128, 512)], func="exp")
    act_red = ins(Engine.SCALAR, Opcode.ACTIVATE, [sb(128, 512), sb(128, 1)], [sb(128, 512)], func="exp",
                  reduce_op="add")  # fmt: skip
    memset0 = ins(Engine.VECTOR, Opcode.MEMSET, [sb(128, 512, "bfloat16")], value=0.0)
    memset1 = ins(Engine.VECTOR, Opcode.MEMSET, [sb(128, 512, "bfloat16")], value=1.0)
    iota = ins(Engine.GPSIMD, Opcode.IOTA, [sb(128, 64, "int32")], steps=(1,))
    bn = ins(Engine.VECTOR, Opcode.BN_AGGR, [sb(128, 2)], [sb(128, 30)])
    assert cost.instruction_cycles(act, T1) == 512
    assert cost.instruction_cycles(act_red, T1) == 576
    assert cost.instruction_cycles(memset0, T1) == 256
    assert cost.instruction_cycles(memset1, T1) == 512
    assert cost.instruction_cycles(iota, T1) == 214
    assert cost.instruction_cycles(bn, T1) == 130
    assert cost.instruction_ns(act, T1) == pytest.approx(365.714, abs=1e-3)


def test_dma_costs() -> None:
    h = Access(Space.HBM, "x", "float32", 0, 128, ((1, 512),), 0, 512)
    s = sb(128, 512)
    assert cost.contiguous_run(h) == 128 * 512  # the whole HBM block is one run
    assert cost.contiguous_run(s) == 512  # SBUF runs stop at the partition
    assert cost.dma_chunks(h, s) == 128
    col = Access(Space.HBM, "x", "float32", 0, 128, ((128, 4),), 0, 1)  # a transposing read: 1-element runs
    assert cost.dma_chunks(col, sb(128, 4)) == 512
    # one engine per 8 partitions (NKI DMA overview): A[4, 4096] moves on one engine
    assert [cost.dma_engines(p, T1) for p in (128, 64, 9, 8, 3)] == [16, 8, 2, 1, 1]
    assert cost.dma_pool_bandwidth(T1) == 16 * 17e9  # 272 GB/s of engines < 410 GB/s of HBM
    assert cost.dma_pool_bandwidth(T2) == 2.9e12 / 8  # 16 x 23 = 368 GB/s > 362.5 GB/s of HBM
    assert cost.dma_transfer_ns(262144, 128, T1) == pytest.approx((262144 + 128 * 256) / 272)
    assert cost.dma_transfer_ns(4096, 1, T1) == pytest.approx((4096 + 256) / 17)
    dma = Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (s,), (h,), queue=0)
    assert cost.instruction_ns(dma, T1) == pytest.approx(1300 + (262144 + 128 * 256) / 272)  # latency + transfer


def test_dependency_latency() -> None:
    assert cost.dependency_latency_ns(Engine.SCALAR, T1) == pytest.approx(60 / 1.4)
    assert cost.dependency_latency_ns(Engine.VECTOR, T1) == pytest.approx(60 / 1.12)
    assert cost.dependency_latency_ns(Engine.DMA, T1) == 1300.0
