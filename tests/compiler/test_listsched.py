"""The list scheduler's program order (`nprof.compiler.listsched`): a topological order of the dependencies
that keeps TensorE and the DMAs in program order, moves ready work ahead of work that waits, and computes the
same values bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space
from nprof.arch.presets import get_preset
from nprof.compiler import listsched
from nprof.compiler.listsched import list_schedule
from nprof.device import simulate
from nprof.program.model import Program, TensorDecl


def _sbuf(name: str, cols: int) -> Access:
    return Access(Space.SBUF, name, "float32", 0, 128, ((1, cols),))


def _hbm(name: str, cols: int) -> Access:
    return Access(Space.HBM, name, "float32", 0, 128, ((1, cols),), 0, cols)


def _random_program(seed: int, n: int = 60) -> Program:
    """Instructions on random engines with random backward dependencies (timing only: placeholder operands)."""
    rng = random.Random(seed)
    engines = [Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.TENSOR, Engine.DMA]
    ins = []
    for i in range(n):
        engine = rng.choice(engines)
        deps = tuple(sorted(rng.sample(range(i), min(i, rng.randint(0, 3)))))
        out, src = _sbuf(f"t{i}", rng.choice((8, 64, 512))), _sbuf(f"s{i}", 8)
        if engine is Engine.DMA:
            ins.append(Instruction(engine, Opcode.DMA_DIRECT2D, (out,), (_hbm("x", 8),), queue=i % 4, deps=deps))
        elif engine is Engine.TENSOR:
            ins.append(Instruction(engine, Opcode.TRANSPOSE, (out,), (src,), deps=deps))
        else:
            ins.append(Instruction(engine, Opcode.TENSOR_COPY, (out,), (src,), deps=deps))
    return Program("r", "trn1", (TensorDecl("x", (128 * 8,), "float32", "input"),), tuple(ins))


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_topological_and_keeps_in_order_engines(seed: int) -> None:
    """On random programs, with either priority: every instruction once, after all its dependencies (the same
    instructions as before), and TensorE instructions in their program order among themselves."""
    program = _random_program(seed)
    before = program.instructions
    order = listsched.schedule_order(before, get_preset("trn1"), by_path=seed % 2 == 1, queues=seed % 4 < 2)
    assert sorted(order) == list(range(len(before)))
    place = {old: new for new, old in enumerate(order)}
    for i, ins in enumerate(before):
        assert all(place[d] < place[i] for d in ins.deps)
    kept = [i for i in order if before[i].engine is Engine.TENSOR]
    assert kept == sorted(kept)
    after = listsched.reordered(program, order).instructions
    for new, old in enumerate(order):
        assert after[new].outs == before[old].outs
        assert sorted(order[d] for d in after[new].deps) == list(before[old].deps)


def test_ready_work_overtakes_work_that_waits_on_its_engine() -> None:
    """GpSimdE's second instruction waits for a long VectorE one; its third depends on nothing and moves ahead
    of it (the conv weight preparation behind a batch-norm chain), and the program ends sooner."""
    ins = (
        Instruction(Engine.VECTOR, Opcode.TENSOR_COPY, (_sbuf("a", 4096),), (_sbuf("x", 4096),)),
        Instruction(Engine.GPSIMD, Opcode.TENSOR_COPY, (_sbuf("b", 8),), (_sbuf("a", 8),), deps=(0,)),
        Instruction(Engine.GPSIMD, Opcode.TENSOR_COPY, (_sbuf("c", 4096),), (_sbuf("y", 4096),)),
    )
    program = Program("p", "trn1", (), ins)
    moved = list_schedule(program)
    gpsimd = [i.outs[0].tensor for i in moved.instructions if i.engine is Engine.GPSIMD]
    assert gpsimd == ["c", "b"]
    assert simulate(moved).profile.info.total_time_ns < simulate(program).profile.info.total_time_ns


@pytest.mark.parametrize("seed", range(6))
def test_the_chosen_order_is_never_slower_than_the_kernel_order(seed: int) -> None:
    program = _random_program(seed)
    chosen = list_schedule(program)
    ns = [simulate(p, numerics=False).profile.info.total_time_ns for p in (chosen, program)]
    assert ns[0] is not None and ns[1] is not None and ns[0] <= ns[1]


def test_a_reload_is_triggered_when_ready_not_behind_later_loads() -> None:
    """Program order: loads that wait for a long VectorE copy come before a store and its reload. The device
    triggers ready DMAs in order of readiness; the scheduler's clock does too, so the reload's consumer on
    GpSimdE is estimated ready early and goes ahead of the late loads' consumer (in program order it would
    wait behind the late loads)."""
    a, b, dma = _sbuf("a", 8), _sbuf("b", 8), Opcode.DMA_DIRECT2D
    ins = [
        Instruction(Engine.DMA, dma, (a,), (_hbm("x", 8),), queue=0),
        Instruction(Engine.VECTOR, Opcode.TENSOR_COPY, (_sbuf("big", 32768),), (_sbuf("src", 32768),)),
        *(
            Instruction(Engine.DMA, dma, (_sbuf(f"l{k}", 64),), (_hbm(f"z{k}", 64),), queue=1 + k, deps=(1,))
            for k in range(3)
        ),
        Instruction(Engine.DMA, dma, (_hbm("y", 8),), (a,), queue=4, deps=(0,)),
        Instruction(Engine.DMA, dma, (b,), (_hbm("y", 8),), queue=5, deps=(5,)),
        Instruction(Engine.GPSIMD, Opcode.TENSOR_COPY, (_sbuf("late", 64),), (_sbuf("l2", 64),), deps=(4,)),
        Instruction(Engine.GPSIMD, Opcode.TENSOR_COPY, (_sbuf("early", 8),), (b,), deps=(6,)),
    ]
    order = listsched.schedule_order(tuple(ins), get_preset("trn1"))
    assert order.index(8) < order.index(7)
    assert order.index(6) < order.index(2)  # the reload is triggered before the loads that wait


def test_the_switch_keeps_the_kernel_order() -> None:
    old = listsched.ENABLED
    listsched.ENABLED = False
    try:
        program = _random_program(1)
        assert list_schedule(program) is program
    finally:
        listsched.ENABLED = old


def test_a_scheduled_cnn_computes_the_values_of_the_kernel_order() -> None:
    """A conv-BN-ReLU-conv graph lowered with and without the scheduler: identical outputs, bit for bit, and
    the scheduler did move instructions."""
    torch = pytest.importorskip("torch")
    from torch.fx.experimental.proxy_tensor import make_fx

    from nprof.compiler.backend import decompositions
    from nprof.compiler.lower import GraphPlan, lower_graph
    from nprof.compiler.packing import pack_inputs, unpack_outputs

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, 16, 16, generator=gen)
    w1, w2 = torch.randn(16, 16, 3, 3, generator=gen) / 12.0, torch.randn(16, 16, 3, 3, generator=gen) / 12.0

    def fn(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.nn.functional.conv2d(x, w1, padding=1)
        h = torch.relu(torch.nn.functional.batch_norm(h, None, None, training=True))
        return (torch.nn.functional.conv2d(h, w2, padding=1),)

    def run(enabled: bool) -> tuple[np.ndarray, Program]:
        old = listsched.ENABLED
        listsched.ENABLED = enabled
        try:
            gm = make_fx(fn, decomposition_table=decompositions())(x, w1, w2)
            names = ["in0", "in1", "in2"]
            program, slots = lower_graph(gm, GraphPlan("listsched_test", "inference", names, ["out0"]))
        finally:
            listsched.ENABLED = old
        program.validate()
        feed = {n: a.numpy() for n, a in zip(names, (x, w1, w2), strict=True)}
        result = simulate(program, pack_inputs(program, feed))
        return np.asarray(unpack_outputs(program, result.outputs)[slots[0].name]).reshape(slots[0].shape), program

    (on, p_on), (off, p_off) = run(True), run(False)
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, fn(x, w1, w2)[0].numpy(), rtol=1e-4, atol=1e-4)
    assert [i.outs for i in p_on.instructions] != [i.outs for i in p_off.instructions]


def test_a_queue_takes_one_dma_per_fixed_latency() -> None:
    """Two loads on queue 0, then one on queue 1, all ready at once: the device starts a queue's transfers a
    fixed latency (1.3 us) apart but triggers any two DMAs only the issue gap (781 ns) apart, so the load on
    queue 1 goes second."""
    dma = Opcode.DMA_DIRECT2D
    ins = tuple(
        Instruction(Engine.DMA, dma, (_sbuf(f"l{k}", 64),), (_hbm(f"z{k}", 64),), queue=q)
        for k, q in enumerate((0, 0, 1))
    )
    assert listsched.schedule_order(ins, get_preset("trn1")) == [0, 2, 1]
