"""The engine balancer (`nprof.compiler.balance`): which engines may take an instruction, the clock's choice,
and compiled graphs with balancing on against the same graphs with it off (bit-identical outputs)."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space
from nprof.arch.presets import get_preset
from nprof.compiler import balance
from nprof.compiler.balance import EngineClock, candidates

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402


def _acc(name: str, space: Space = Space.SBUF, dtype: str = "float32", n: int = 256) -> Access:
    return Access(space, name, dtype, 0, 128, ((1, n),))


def _ins(opcode: Opcode, *ins: Access, engine: Engine = Engine.VECTOR, deps: tuple[int, ...] = (),
         **attrs: object) -> Instruction:  # fmt: skip
    return Instruction(engine, opcode, (_acc("out"),), ins, tuple(sorted(attrs.items())), deps)  # type: ignore[arg-type]


def test_candidates_follow_the_isa_rules() -> None:
    sb, ps = _acc("a"), _acc("p", Space.PSUM)
    assert set(candidates(_ins(Opcode.TENSOR_COPY, sb))) == {Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD}
    assert set(candidates(_ins(Opcode.TENSOR_COPY, ps))) == {Engine.VECTOR, Engine.SCALAR}  # GpSimdE: no PSUM
    assert set(candidates(_ins(Opcode.TENSOR_TENSOR, sb, sb, op="add"))) == {Engine.VECTOR, Engine.GPSIMD}
    assert set(candidates(_ins(Opcode.TENSOR_TENSOR, ps, sb, op="add"))) == {Engine.VECTOR}
    assert Engine.SCALAR in candidates(_ins(Opcode.TENSOR_SCALAR, sb, op0="multiply", operand0=2.0))
    assert Engine.SCALAR not in candidates(_ins(Opcode.TENSOR_SCALAR, sb, op0="divide", operand0=2.0))
    assert Engine.SCALAR not in candidates(_ins(Opcode.TENSOR_COPY, _acc("i", dtype="int32")))  # fp32 cast
    assert candidates(_ins(Opcode.TENSOR_COPY, sb, engine=Engine.GPSIMD)) == ()  # placed on purpose: stays
    assert candidates(_ins(Opcode.TENSOR_COPY, sb, dynamic=True)) == ()
    assert candidates(_ins(Opcode.TENSOR_REDUCE, sb, op="add")) == ()


def test_the_clock_moves_work_off_a_busy_engine_and_keeps_dependencies() -> None:
    clock = EngineClock(get_preset("trn1"))
    clock.add(0, _ins(Opcode.TENSOR_TENSOR, _acc("a"), _acc("b"), op="divide"))  # VectorE busy ~0.46 us
    copy = _ins(Opcode.TENSOR_COPY, _acc("c"))
    assert clock.choose(copy) is not Engine.VECTOR
    clock.add(1, copy)
    free = EngineClock(get_preset("trn1"))
    assert free.choose(copy) is Engine.SCALAR  # idle engines: ScalarE's clock (1.4 GHz) ends it first
    add = _ins(Opcode.TENSOR_TENSOR, _acc("a"), _acc("b"), op="add")
    assert free.choose(add) is Engine.VECTOR  # a tie (GpSimdE is estimated at VectorE's clock): it stays
    # a dependent instruction cannot start before its producer ends, on any engine
    clock.add(2, _ins(Opcode.TENSOR_COPY, _acc("d"), deps=(0,)))
    assert clock._end[2] > clock._end[0]


def _lowered(fn: object, args: list[torch.Tensor], balanced: bool) -> tuple[list[np.ndarray], list[str]]:
    old = balance.ENABLED
    balance.ENABLED = balanced
    try:
        gm = make_fx(fn, decomposition_table=decompositions())(*args)
        names = [f"in{i}" for i in range(len(args))]
        plan = GraphPlan("balance_test", "inference", names, ["out0"])
        program, slots = lower_graph(gm, plan)
    finally:
        balance.ENABLED = old
    result = simulate(program, pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)}))
    outputs = unpack_outputs(program, result.outputs)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots], [i.engine.value for i in program.instructions]


@pytest.mark.parametrize("seed", range(3))
def test_balanced_graphs_equal_the_unbalanced_ones_bit_for_bit(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    rows, width = (32, 64, 130)[seed], (64, 48, 96)[seed]
    x, y = torch.randn(rows, width, generator=gen), torch.randn(rows, width, generator=gen)
    w = torch.randn(width, width, generator=gen) / width**0.5

    def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        h = torch.softmax((x @ w) * 0.125 + y, dim=1) * y - x
        return (torch.nn.functional.layer_norm(h + torch.relu(y - 0.5), (width,)) * 2.0,)

    on, engines_on = _lowered(fn, [x, y, w], balanced=True)
    off, engines_off = _lowered(fn, [x, y, w], balanced=False)
    np.testing.assert_array_equal(on[0], off[0])
    np.testing.assert_allclose(on[0], fn(x, y, w)[0].numpy(), rtol=1e-4, atol=1e-5)
    assert engines_on != engines_off  # the balancer did move something
