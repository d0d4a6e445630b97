"""Packed inputs of one row count (`nprof.compiler.rowpack`): the plan, the access mapping against a plain
element-by-element reference, the runtime's pack, and lowered graphs with fewer DMAs and identical outputs."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")


from nprof.arch.isa import Access, Opcode, Space  # noqa: E402
from nprof.compiler import packing, rowpack  # noqa: E402
from nprof.compiler.subtile import addresses  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.program.model import Program, TensorDecl  # noqa: E402
from tests.compiler.conftest import lower_with_switch  # noqa: E402


def test_plan_takes_the_row_count_with_the_most_bytes() -> None:
    decls = [TensorDecl("x", (32, 100), "float32", "input"), TensorDecl("w", (128, 64), "float32", "input"),
             TensorDecl("h", (32, 50), "float32", "input"), TensorDecl("i", (32, 9), "int32", "input"),
             TensorDecl("o", (32, 70), "float32", "output"), TensorDecl("s", (32, 8), "float32", "input"),
             TensorDecl("big", (300, 4), "float32", "input"), TensorDecl("wide", (8, 4000), "float32", "input")]
    pack = rowpack.plan_rows(decls, exclude={"s"}, pmax=128)
    assert pack is not None
    # 128 partitions: w, and x, h with their padding rows (96 x 100 and 96 x 50 elements), 12992 elements, more
    # than the 32-row pack's 4800; "wide" would bring 120 x 4000 x 4 bytes of padding (> PAD_BYTES_MAX)
    assert dict(pack.members) == {"x": (0, 32, 100), "w": (100, 128, 64), "h": (164, 32, 50)}
    assert (pack.parts, pack.width) == (128, 214)
    assert rowpack.plan_rows(decls[:1], exclude=(), pmax=128) is None  # one member
    assert rowpack.plan_rows(decls[:2], exclude=(), pmax=128) is not None  # x padded to w's 128 rows


def test_plan_pads_only_a_small_pack() -> None:
    """Members of fewer rows join a pack only while it stays within PADDED_PACK_MAX bytes (every consumer waits
    for the whole pack): beside 128 x 600 elements (300 KiB), a 64-row member keeps its own DMA."""
    decls = [TensorDecl("a", (128, 300), "float32", "input"), TensorDecl("b", (128, 300), "float32", "input"),
             TensorDecl("c", (64, 64), "float32", "input"), TensorDecl("d", (64, 8), "float32", "input")]
    pack = rowpack.plan_rows(decls, exclude=(), pmax=128)
    assert pack is not None and set(pack.members) == {"a", "b"} and pack.parts == 128
    small = rowpack.plan_rows([decls[0], *decls[2:]], exclude=(), pmax=128)  # 128 x 372 x 4 = 186 KiB
    assert small is not None and set(small.members) == {"a", "c", "d"} and small.parts == 128


def test_inputs_the_runtime_draws_are_never_packed() -> None:
    """A dropout mask (`rng.*`) is drawn after packing on every call: neither pack may hold it."""
    decls = [TensorDecl("rng.a", (32, 100), "float32", "input"), TensorDecl("rng.b", (32, 50), "float32", "input"),
             TensorDecl("x", (32, 10), "float32", "input"), TensorDecl("rng.c", (4,), "float32", "input"),
             TensorDecl("rng.d", (4,), "float32", "input")]  # fmt: skip
    assert rowpack.plan_rows(decls, exclude=(), pmax=128) is None
    assert packing.plan_pack(decls) is None


def _reference(pack: rowpack.RowPack, a: Access) -> np.ndarray:
    """The pack offsets of `a`'s elements, element by element: (r, c) of the member at r * W + j + c."""
    j, _, cols = pack.members[a.tensor]
    flat = addresses(a)
    return (flat // cols) * pack.width + j + flat % cols


@pytest.mark.parametrize("seed", range(3))
def test_in_rows_addresses_the_same_elements_as_the_plain_mapping(seed: int) -> None:
    """Random accesses of a member (row blocks, transposes, broadcasts, strided columns): every access
    `in_rows` moves addresses exactly the reference's pack offsets in the same order; row blocks always move."""
    rng = random.Random(seed)
    rows, cols = rng.choice([(32, 48), (128, 64), (7, 5)])
    pack = rowpack.RowPack({"pad": (0, rows, 3), "m": (3, rows, cols)}, rows, 3 + cols)
    moved = refused = 0
    for _ in range(300):
        r0, c0 = rng.randrange(rows), rng.randrange(cols)
        p, n = rng.randint(1, rows - r0), rng.randint(1, cols - c0)
        kind = rng.choice(["block", "transpose", "broadcast", "random"])
        if kind == "block":
            a = Access(Space.HBM, "m", "float32", r0 * cols + c0, p, ((1, n),), 0, cols)
        elif kind == "transpose":
            a = Access(Space.HBM, "m", "float32", r0 * cols + c0, n, ((cols, p),), 0, 1)
        elif kind == "broadcast":
            a = Access(Space.HBM, "m", "float32", r0 * cols + c0, rng.randint(1, 8), ((0, 2), (1, n)), 0, 0)
        else:
            s1, s2 = rng.randint(0, rows * cols), rng.randint(0, 2 * cols)
            a = Access(Space.HBM, "m", "float32", rng.randrange(rows * cols), rng.randint(1, 4),
                       ((s2, rng.randint(1, 3)),), 0, s1)  # fmt: skip
            if addresses(a).max() >= rows * cols:
                continue
        got = rowpack.in_rows(pack, a)
        if got is None:
            assert kind == "random", f"{kind} access refused: {a}"
            refused += 1
            continue
        moved += 1
        assert got.tensor == rowpack.ROWS_NAME and got.shape == a.shape
        np.testing.assert_array_equal(addresses(got), _reference(pack, a))
    assert moved > 200 and refused > 0  # both outcomes exercised


def test_pack_inputs_builds_the_grid_and_keeps_members_still_declared() -> None:
    rng = np.random.default_rng(0)
    decls = [TensorDecl("a", (4, 3), "float32", "input"), TensorDecl("b", (4, 5), "float32", "input"),
             TensorDecl("c", (4, 2), "float32", "input")]  # fmt: skip
    pack = rowpack.plan_rows(decls, (), 128)
    assert pack is not None
    key = Access(Space.HBM, "a", "float32", 0, 4, ((1, 3),), 0, 3)
    from nprof.arch.isa import Engine, Instruction

    def read(name: str, cols: int) -> Instruction:
        return Instruction(Engine.SYNC, Opcode.DMA_DIRECT2D, (Access(Space.SBUF, "t", "float32", 0, 4, ((1, cols),)),),
                           (Access(Space.HBM, name, "float32", 0, 4, ((1, cols),), 0, cols),))  # fmt: skip

    program = Program("p", "trn1", tuple(decls), (read("a", 3), read("c", 2)))
    program = rowpack.rows_program(program, pack, written={"c"})  # c is written: it keeps its own tensor
    assert [t.name for t in program.inputs] == [rowpack.ROWS_NAME, "c"]
    assert program.instructions[0].ins[0] == rowpack.in_rows(pack, key)
    arrays = {d.name: rng.standard_normal(d.shape).astype(np.float32) for d in decls}
    packed = packing.pack_inputs(program, arrays)
    assert set(packed) == {rowpack.ROWS_NAME, "c"}
    grid = packed[rowpack.ROWS_NAME].reshape(4, 10)
    for name, (j, rows, cols) in pack.members.items():  # the plain reference: element by element
        for r in range(rows):
            for c in range(cols):
                assert grid[r, j + c] == arrays[name][r, c]


def _lower(fn: object, args: list[torch.Tensor], packed: bool) -> tuple[list[np.ndarray], int, set[str]]:
    """(outputs, DMA count, program input names) of `fn` lowered with packing on or off."""
    program, slots, names = lower_with_switch(packing, packed, fn, args, "rows_test")
    inputs = packing.pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    result = simulate(program, inputs, numerics=True)
    outputs = packing.unpack_outputs(program, result.outputs)
    dmas = sum(ins.opcode is Opcode.DMA_DIRECT2D for ins in program.instructions)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots], dmas, {t.name for t in program.inputs}


@pytest.mark.parametrize("seed", range(2))
def test_activations_of_one_row_count_move_in_one_dma(seed: int) -> None:
    """A backward-like graph reading four [32, C] activations (one of them transposed for a matmul): packed,
    they come in fewer DMAs; outputs bit-identical to the unpacked lowering and close to eager."""
    gen = torch.Generator().manual_seed(seed)
    h, g, m = torch.randn(32, 48, generator=gen), torch.randn(32, 40, generator=gen), torch.randn(32, 48, generator=gen)
    x = torch.randn(32, 24, generator=gen)

    def fn(h, g, m, x):  # type: ignore[no-untyped-def]
        gh = g.t() @ (h * (m > 0))  # [40, 48]: h and m as row blocks, g transposed
        return gh, (x * 2.0).sum(dim=1, keepdim=True) + h[:, :1]

    args = [h, g, m, x]
    packed, packed_dmas, names = _lower(fn, args, packed=True)
    plain, plain_dmas, _ = _lower(fn, args, packed=False)
    assert rowpack.ROWS_NAME in names and packed_dmas < plain_dmas
    for p, q, e in zip(packed, plain, fn(*args), strict=True):  # type: ignore[no-untyped-call]
        np.testing.assert_array_equal(p, q)
        np.testing.assert_allclose(p, e.numpy(), rtol=1e-4, atol=1e-4)
