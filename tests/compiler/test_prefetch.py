"""Input loads hoisted to the front of a program (`nprof.compiler.prefetch`): same values bit for bit, valid
dependencies, and a load the compute needs first triggered first."""

from __future__ import annotations

import dataclasses

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


def test_the_load_order_search_finds_a_faster_trigger_order() -> None:
    """Three loads, the first two only needed by the last instruction: the search puts the third (needed by a
    long chain of compute) first; the result is never slower and stays a valid program."""
    from nprof.arch.presets import get_preset
    from nprof.compiler.listsched import makespan

    a, b, c = _sbuf("a", 128, 8), _sbuf("b", 128, 8), _sbuf("c", 128, 512)
    ins = [
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (a,), (_hbm("x", 128, 8),), queue=0),
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (b,), (_hbm("y", 128, 8),), queue=1),
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (c,), (_hbm("z", 128, 512),), queue=2),
    ]
    prev = 2
    for k in range(8):  # a chain on the third load
        ins.append(Instruction(Engine.SCALAR, Opcode.TENSOR_COPY, (_sbuf(f"t{k}", 128, 512),), (c,), deps=(prev,)))
        prev = len(ins) - 1
    ins.append(Instruction(Engine.VECTOR, Opcode.TENSOR_TENSOR, (_sbuf("d", 128, 8),), (a, b), (("op", "add"),),
                           deps=(0, 1, prev)))  # fmt: skip
    tensors = tuple(TensorDecl(n, (128 * k,), "float32", "input") for n, k in (("x", 8), ("y", 8), ("z", 512)))
    program = Program("p", "trn1", tensors, tuple(ins))
    found = prefetch.search_loads(program)
    found.validate()
    preset = get_preset("trn1")
    assert makespan(found, preset) < makespan(program, preset)
    assert found.instructions[0].outs[0].tensor == "c"
    assert sorted(i.outs[0].tensor for i in found.instructions) == sorted(i.outs[0].tensor for i in ins)


def test_searched_programs_compute_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every load order the search times computes the same values as the lowered program, bit for bit."""
    from nprof.compiler import listsched

    gen = torch.Generator().manual_seed(4)
    args = [torch.randn(160, 300, generator=gen), torch.randn(160, 64, generator=gen),
            torch.randn(140, 300, generator=gen) / 17.0, torch.randn(140, 64, generator=gen) / 8.0]  # fmt: skip

    def fn(x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = torch.softmax(y, dim=1) * 2.0
        return torch.relu(x @ w1.t()) @ w2 + s, s

    program, slots, names = lower_with_switch(prefetch, True, fn, args, "search_test")
    inputs = pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    want = unpack_outputs(program, simulate(program, inputs).outputs)
    timed: list[Program] = []
    real = listsched.makespan
    monkeypatch.setattr(listsched, "makespan", lambda p, preset: (timed.append(p), real(p, preset))[1])
    prefetch.search_loads(program)
    assert len(timed) > 2
    for p in timed:
        p.validate()
        got = unpack_outputs(p, simulate(p, inputs).outputs)
        for s in slots:
            np.testing.assert_array_equal(got[s.name], want[s.name])


def test_front_loads_of_one_tensor_merge_into_one_dma() -> None:
    """Two loads of neighbouring windows of one input into neighbouring tiles become one DMA of one more
    dimension moving the same elements; the merged program is valid, as fast or faster, and equal in values."""
    from nprof.arch.presets import get_preset
    from nprof.compiler.listsched import makespan

    lo = Access(Space.HBM, "p", "float32", 0, 32, ((1, 10),), 0, 10)
    hi = dataclasses.replace(lo, offset=320)
    ta = Access(Space.SBUF, "a", "float32", 0, 32, ((1, 10),))
    tb = dataclasses.replace(ta, tensor="b", offset=64)
    ins = [
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (tb,), (hi,), queue=0),
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (ta,), (lo,), queue=1),
        Instruction(Engine.VECTOR, Opcode.TENSOR_TENSOR, (_sbuf("c", 32, 10),), (ta, tb), (("op", "add"),), (0, 1)),
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (_hbm("out", 32, 10),), (_sbuf("c", 32, 10),), (), (2,), 2),
    ]
    tensors = (TensorDecl("p", (640,), "float32", "input"), TensorDecl("out", (320,), "float32", "output"))
    program = Program("p", "trn1", tensors, tuple(ins))
    assert prefetch.front_runs(program) == [[1, 0]]
    merged = prefetch.merged_front(program, [1, 0])
    merged.validate()
    assert len(merged.instructions) == 3
    load = merged.instructions[0]
    assert load.ins[0].free == ((320, 2), (1, 10)) and load.outs[0].free == ((16, 2), (1, 10))
    assert merged.instructions[1].deps == (0,)
    values = np.arange(640, dtype=np.float32)
    want = simulate(program, {"p": values}).outputs["out"]
    np.testing.assert_array_equal(simulate(merged, {"p": values}).outputs["out"], want)
    np.testing.assert_array_equal(want.reshape(-1), values[:320] + values[320:])
    preset = get_preset("trn1")
    chosen = prefetch.merge_front_loads(program)
    assert makespan(chosen, preset) < makespan(program, preset)
