"""Equally spaced tile DMAs merged into one (`nprof.compiler.dmamerge`): the merged DMA moves exactly the
elements its members moved (held to a plain element-by-element enumeration on random shapes), values equal
the unmerged program's bit for bit and eager torch's, and runs that cannot merge exactly stay apart."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from nprof.arch.isa import ITEMSIZE, Access, Engine, Instruction, Opcode, Space
from nprof.compiler import dmamerge
from nprof.compiler.dmamerge import merge_dmas
from nprof.device import simulate
from nprof.program.model import Program, TensorDecl

torch = pytest.importorskip("torch")

from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from tests.compiler.conftest import lower_with_switch  # noqa: E402


def _addresses(acc: Access) -> list[tuple[int, int]]:
    """(partition, address) of every element of `acc` in transfer order (partition, then free dims in order):
    HBM addresses are element indices, SBUF ones byte offsets. The plain reference of what a DMA moves."""
    out = []
    for p in range(acc.partitions):
        for index in itertools.product(*(range(size) for _, size in acc.free)):
            e = sum(i * stride for i, (stride, _) in zip(index, acc.free, strict=True))
            if acc.space is Space.HBM:
                out.append((0, acc.offset + p * acc.partition_stride + e))
            else:
                out.append((acc.partition_start + p, acc.offset + e * ITEMSIZE[acc.dtype]))
    return out


def _pairs(ins: Instruction) -> set[tuple[tuple[int, int], tuple[int, int]]]:
    src, dst = _addresses(ins.ins[0]), _addresses(ins.outs[0])
    assert len(src) == len(dst)
    return set(zip(src, dst, strict=True))


def _tiles_program(rng: np.random.Generator) -> tuple[Program, int, int, int, int]:
    """K tiles of x (HBM) loaded into equally spaced SBUF slots, then stored to y: 2K DMAs, random shapes."""
    k, parts, free = int(rng.integers(2, 6)), int(rng.integers(121, 129)), int(rng.integers(1, 9))
    hbm_gap = parts * free + int(rng.integers(0, 5))  # elements between tiles in HBM (gaps stay untouched)
    sbuf_gap = free + int(rng.integers(0, 5))  # elements between the tiles' SBUF slots
    base = 4 * int(rng.integers(0, 64))
    size = k * hbm_gap
    x, y = TensorDecl("x", (size,), "float32", "input"), TensorDecl("y", (size,), "float32", "output")

    def hbm(name: str, t: int) -> Access:
        return Access(Space.HBM, name, "float32", t * hbm_gap, parts, ((1, free),), 0, free)

    def sbuf(t: int) -> Access:
        return Access(Space.SBUF, f"tile{t}", "float32", base + 4 * t * sbuf_gap, parts, ((1, free),))

    loads = [Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (sbuf(t),), (hbm("x", t),), queue=t % 16) for t in range(k)]
    stores = [Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (hbm("y", t),), (sbuf(t),), deps=(t,), queue=(k + t) % 16)
              for t in range(k)]  # fmt: skip
    return Program("tiles", "trn1", (x, y), (*loads, *stores)), k, parts, free, hbm_gap


@pytest.fixture
def loads_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dmamerge, "MERGE_LOADS", True)


@pytest.mark.parametrize("seed", range(12))
def test_merged_dmas_move_exactly_the_members_elements(seed: int, loads_too: None) -> None:
    rng = np.random.default_rng(seed)
    program, k, parts, free, hbm_gap = _tiles_program(rng)
    merged = merge_dmas(program)
    merged.validate()
    assert len(merged.instructions) == 2  # one load, one store
    load, store = merged.instructions
    assert store.deps == (0,)
    members = program.instructions
    assert _pairs(load) == set().union(*(_pairs(m) for m in members[:k]))
    assert _pairs(store) == set().union(*(_pairs(m) for m in members[k:]))
    assert load.outs[0].nbytes == sum(m.outs[0].nbytes for m in members[:k])
    # values: y holds x's tiles and keeps zeros in the gaps, as the plain numpy copy does
    x = rng.standard_normal(k * hbm_gap).astype(np.float32)
    expected = np.zeros_like(x)
    for t in range(k):
        expected[t * hbm_gap : t * hbm_gap + parts * free] = x[t * hbm_gap : t * hbm_gap + parts * free]
    for p in (program, merged):
        np.testing.assert_array_equal(np.asarray(simulate(p, {"x": x}).outputs["y"]).ravel(), expected)


def test_a_run_whose_merge_would_reorder_a_dependency_stays_apart(loads_too: None) -> None:
    """Tile 1's load depends on a copy that reads tile 0 (as a load into a slot the copy reads would): one merged
    load would have to come both before the copy and after it, so tile 0's load stays its own DMA."""
    program, *_ = _tiles_program(np.random.default_rng(0))
    ins = list(program.instructions)
    t0 = ins[0].outs[0]
    copy = Instruction(Engine.VECTOR, Opcode.TENSOR_COPY, (Access(Space.SBUF, "c", "float32", 150_000,
                       t0.partitions, t0.free),), (t0,), deps=(0,))  # fmt: skip
    moved = [ins[0], copy, *(_shifted(i) for i in ins[1:])]
    moved[2] = _shifted(ins[1], extra=(1,))
    merged = merge_dmas(Program("tiles", "trn1", program.tensors, tuple(moved)))
    merged.validate()
    loads = [i for i in merged.instructions if i.opcode is Opcode.DMA_DIRECT2D and i.ins[0].space is Space.HBM]
    assert len(loads) > 1 and loads[0].ins[0].free == ins[0].ins[0].free  # tile 0 is not merged


def _shifted(ins: Instruction, extra: tuple[int, ...] = ()) -> Instruction:
    """`ins` one place later (a copy was inserted after instruction 0), with `extra` dependencies."""
    return dataclasses.replace(ins, deps=tuple(sorted({d + (d >= 1) for d in ins.deps} | set(extra))))


def _run(fn: object, args: list[torch.Tensor], on: bool) -> tuple[list[np.ndarray], int]:
    program, slots, names = lower_with_switch(dmamerge, on, fn, args, "dmamerge_test")
    program.validate()
    result = simulate(program, pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)}))
    outputs = unpack_outputs(program, result.outputs)
    dmas = sum(i.opcode is Opcode.DMA_DIRECT2D for i in program.instructions)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots], dmas


def _conv(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.nn.functional.conv2d(x, w)
    return torch.relu(y), y * 2.0


def _pool(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.nn.functional.max_pool2d(x, 3, 2, 1)
    return y, y + 1.0


@pytest.mark.parametrize("graph", ["pool", "conv"])
def test_a_lowered_graph_with_merged_dmas_computes_the_same_values(graph: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """resnet18's max pooling (its per-image-pair output stores merge) and, loads merging too, a 1x1
    convolution of 256 channels on 2x2 maps (weights in 128-channel tiles): fewer DMAs, the same outputs bit
    for bit as without merging, and eager's within fp32 tolerance."""
    gen = torch.Generator().manual_seed(5)
    if graph == "conv":
        monkeypatch.setattr(dmamerge, "MERGE_LOADS", True)
        fn, args = _conv, [torch.randn(8, 256, 2, 2, generator=gen), torch.randn(256, 256, 1, 1, generator=gen) / 16]
    else:
        fn, args = _pool, [torch.randn(8, 64, 16, 16, generator=gen)]
    (on, n_on), (off, n_off) = _run(fn, args, True), _run(fn, args, False)
    assert n_on < n_off
    for a, b, e in zip(on, off, fn(*args), strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, e.numpy(), rtol=1e-4, atol=1e-4)
