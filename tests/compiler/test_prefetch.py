"""Input loads hoisted to the front of a program (`nprof.compiler.prefetch`): same values bit for bit, valid
dependencies, and a load the compute needs first triggered first."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space
from nprof.compiler import prefetch
from nprof.compiler.prefetch import hoist_loads
from nprof.program.model import Program, TensorDecl

torch = pytest.importorskip("torch")


from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402
from tests.compiler.conftest import lower_with_switch  # noqa: E402


def _hbm(name: str, rows: int, cols: int) -> Access:
    return Access(Space.HBM, name, "float32", 0, rows, ((1, cols),), 0, cols)


def _sbuf(name: str, rows: int, cols: int) -> Access:
    return Access(Space.SBUF, name, "float32", 0, rows, ((1, cols),))


def test_the_load_needed_first_is_triggered_first_and_dependencies_follow() -> None:
    """A small load whose consumer comes late and a large one the first compute needs: the large one moves
    ahead; every dependency still points at the same instruction."""
    small, big = _sbuf("s", 128, 4), _sbuf("b", 128, 2048)
    ins = [
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (small,), (_hbm("x", 128, 4),), queue=0),
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (big,), (_hbm("w", 128, 2048),), queue=1),
        Instruction(Engine.VECTOR, Opcode.TENSOR_COPY, (_sbuf("c", 128, 2048),), (big,), deps=(1,)),
        Instruction(Engine.VECTOR, Opcode.TENSOR_TENSOR, (_sbuf("d", 128, 4),), (small, small), (("op", "add"),),
                    deps=(0, 2)),
    ]
    tensors = (TensorDecl("x", (512,), "float32", "input"), TensorDecl("w", (128 * 2048,), "float32", "input"))
    program = Program("p", "trn1", tensors, tuple(ins))
    hoisted = hoist_loads(program)
    assert [i.outs[0].tensor for i in hoisted.instructions] == ["b", "s", "c", "d"]
    by_out = {i.outs[0].tensor: i for i in hoisted.instructions}
    names = [i.outs[0].tensor for i in hoisted.instructions]
    assert [names[d] for d in by_out["c"].deps] == ["b"]
    assert sorted(names[d] for d in by_out["d"].deps) == ["c", "s"]
    hoisted.validate()


def _run(fn: object, args: list[torch.Tensor], hoist: bool) -> list[np.ndarray]:
    program, slots, names = lower_with_switch(prefetch, hoist, fn, args, "prefetch_test")
    program.validate()
    result = simulate(program, pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)}))
    outputs = unpack_outputs(program, result.outputs)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots]


def test_hoisted_programs_compute_the_same_values() -> None:
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(32, 300, generator=gen), torch.randn(32, 64, generator=gen)
    w1, w2 = torch.randn(64, 300, generator=gen) / 17.0, torch.randn(64, 64, generator=gen) / 8.0

    def fn(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = torch.softmax(y, dim=1) * 2.0
        h = torch.relu(x @ w1.t()) + s
        return h @ w2.t(), s

    on, off = _run(fn, [x, y, w1, w2], True), _run(fn, [x, y, w1, w2], False)
    for a, b, e in zip(on, off, fn(x, y, w1, w2), strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, e.numpy(), rtol=1e-4, atol=1e-4)
