"""Packed small inputs (`nprof.compiler.packing`): the layout, the runtime's packing, and lowered graphs
that move their small inputs in fewer DMAs with bit-identical outputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.arch.isa import Opcode  # noqa: E402
from nprof.compiler import dmamerge, packing  # noqa: E402
from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.program.model import TensorDecl  # noqa: E402
from tests.compiler.conftest import lower_with_switch  # noqa: E402


@pytest.fixture(autouse=True)
def _no_tail_staging(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the DMAs of the packs alone: the last stores gathered into one more DMA
    (`nprof.compiler.tailstage`) and front loads merged (`nprof.compiler.prefetch.merge_front_loads`) would
    change both counts."""
    from nprof.compiler import prefetch, tailstage

    monkeypatch.setattr(tailstage, "ENABLED", False)
    monkeypatch.setattr(prefetch, "MERGE_FRONT", False)


def test_plan_packs_small_fp32_inputs_by_size_back_to_back() -> None:
    decls = [TensorDecl("a", (64,), "float32", "input"), TensorDecl("big", (600,), "float32", "input"),
             TensorDecl("b", (16,), "float32", "input"), TensorDecl("ids", (8,), "int32", "input"),
             TensorDecl("c", (64,), "float32", "input"), TensorDecl("o", (4,), "float32", "output")]  # fmt: skip
    pack = packing.plan_pack(decls)
    assert pack is not None
    assert dict(pack.members) == {"b": (0, 16), "a": (16, 64), "c": (80, 64)}
    assert pack.total == 144 and pack.group(64) == (16, 2) and pack.group(16) == (0, 1)
    assert packing.plan_pack(decls[:2]) is None  # one small input: nothing to share


def test_pack_inputs_places_every_member_at_its_offset() -> None:
    rng = np.random.default_rng(0)
    decls = [TensorDecl(f"t{i}", (int(n),), "float32", "input") for i, n in enumerate(rng.integers(1, 40, 9))]
    pack = packing.plan_pack(decls)
    assert pack is not None
    program = packing.packed_program(_empty_program(decls), pack)
    arrays = {d.name: rng.standard_normal(d.shape).astype(np.float32) for d in decls}
    arrays["other"] = np.ones(3, np.float32)
    packed = packing.pack_inputs(program, arrays)
    assert set(packed) == {"other", packing.PACK_NAME}
    value = packed[packing.PACK_NAME]
    for name, (off, n) in pack.members.items():  # the plain reference: element by element
        for k in range(n):
            assert value[off + k] == arrays[name][k]
    assert [t.name for t in program.inputs] == [packing.PACK_NAME]


def _empty_program(decls: list[TensorDecl]) -> object:
    from nprof.program.model import Program

    return Program("p", "trn1", tuple(decls), ())


def _lower(fn: object, args: list[torch.Tensor], packed: bool) -> tuple[list[np.ndarray], int, int]:
    """(outputs, DMA count, simulated ns) of `fn` lowered with packing on or off."""
    program, slots, names = lower_with_switch(packing, packed, fn, args, "pack_test")
    inputs = packing.pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    result = simulate(program, inputs, numerics=True)
    dmas = sum(ins.opcode is Opcode.DMA_DIRECT2D for ins in program.instructions)
    outs = [np.asarray(result.outputs[s.name]).reshape(s.shape) for s in slots]
    return outs, dmas, int(result.latencies_ns[-1])


@pytest.mark.parametrize("seed", range(3))
def test_biases_and_norm_weights_share_one_dma(seed: int) -> None:
    """Two linear layers and a layer norm: four small vectors (two biases, the norm's weight and bias),
    loaded as row broadcasts. Packed, they move in one DMA instead of four; outputs bit-identical to the
    unpacked lowering and close to eager."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 48, generator=gen)
    w1, w2 = torch.randn(64, 48, generator=gen), torch.randn(40, 64, generator=gen)
    b1, b2 = torch.randn(64, generator=gen), torch.randn(40, generator=gen)
    g, beta = torch.randn(64, generator=gen), torch.randn(64, generator=gen)

    def fn(x, w1, b1, g, beta, w2, b2):  # type: ignore[no-untyped-def]
        h = torch.nn.functional.layer_norm(torch.relu(x @ w1.t() + b1), (64,), g, beta)
        return h @ w2.t() + b2, h

    args = [x, w1, b1, g, beta, w2, b2]
    packed, packed_dmas, _ = _lower(fn, args, packed=True)
    plain, plain_dmas, _ = _lower(fn, args, packed=False)
    # the four vectors in one DMA (3 fewer); x [32, 48], w1 [64, 48] and w2 [40, 64] in one row pack of 64
    # partitions, the shorter two with padding rows (`rowpack.PAD_BYTES_MAX`: 2 fewer)
    assert packed_dmas == plain_dmas - 5
    for p, q, e in zip(packed, plain, fn(*args), strict=True):  # type: ignore[no-untyped-call]
        np.testing.assert_array_equal(p, q)
        np.testing.assert_allclose(p, e.numpy(), rtol=1e-4, atol=1e-4)


def _lower_outputs(fn: object, args: list[torch.Tensor], n_out: int, packed: bool) -> tuple[list[np.ndarray], int]:
    """(outputs unpacked by the runtime's rule, DMA count) of `fn` lowered with packing on or off."""
    old = packing.ENABLED
    packing.ENABLED = packed
    try:
        gm = make_fx(fn, decomposition_table=decompositions())(*args)
        names = [f"in{i}" for i in range(len(args))]
        plan = GraphPlan("stage_test", "inference", names, [f"out{i}" for i in range(n_out)])
        program, slots = lower_graph(gm, plan)
    finally:
        packing.ENABLED = old
    inputs = packing.pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    outputs = packing.unpack_outputs(program, simulate(program, inputs, numerics=True).outputs)
    dmas = sum(ins.opcode is Opcode.DMA_DIRECT2D for ins in program.instructions)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots], dmas


@pytest.mark.parametrize("rows", [8, 128])
def test_small_outputs_are_staged_and_stored_by_one_dma(rows: int) -> None:
    """Two layer norms return their per-row mean and rstd ([rows, 1]: one column each), the second norm reads
    the first one's rstd again: staged, the four statistics leave in one DMA; every output bit-identical to
    the unstaged lowering and close to eager."""
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 48, generator=gen), torch.randn(48, generator=gen)

    def fn(x, w):  # type: ignore[no-untyped-def]
        y, m1, r1 = torch.ops.aten.native_layer_norm(x, [48], w, None, 1e-5)
        z, m2, r2 = torch.ops.aten.native_layer_norm(y * r1, [48], None, None, 1e-5)
        return z, m1, r1, m2, r2

    staged, staged_dmas = _lower_outputs(fn, [x, w], 5, packed=True)
    plain, plain_dmas = _lower_outputs(fn, [x, w], 5, packed=False)
    assert staged_dmas <= plain_dmas - 3
    for s, p, e in zip(staged, plain, fn(x, w), strict=True):  # type: ignore[no-untyped-call]
        np.testing.assert_array_equal(s, p)
        np.testing.assert_allclose(s, e.numpy(), rtol=1e-4, atol=1e-4)


def test_unpack_outputs_cuts_each_column() -> None:
    table = np.arange(128 * 3, dtype=np.float32)  # [128, 3] row-major: column j holds j, j + 3, ...
    layout = {packing.OUT_PACK_NAME: [3, [["a", 0, 5], ["b", 2, 128]]]}
    from nprof.program.model import Program

    program = Program("p", "trn1", (), (), meta={packing.OUT_PACKED_META: __import__("json").dumps(layout)})
    out = packing.unpack_outputs(program, {packing.OUT_PACK_NAME: table, "c": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["a"], [0, 3, 6, 9, 12])
    np.testing.assert_array_equal(out["b"], np.arange(128) * 3 + 2)
    assert set(out) == {"a", "b", "c"}


def test_column_pack_holds_chunk_k_of_each_member_in_its_column() -> None:
    """The column pack [128, width] (row-major): element e of the member whose first column is j at row
    e % 128 of column j + e // 128, zero past its end (plain reference, element by element)."""
    rng = np.random.default_rng(2)
    decls = [TensorDecl(f"t{i}", (int(n),), "float32", "input") for i, n in enumerate((5, 130, 256, 40, 300))]
    pack = packing.plan_pack(decls)
    assert pack is not None and pack.width == 1 + 1 + 2 + 2 + 3
    program = packing.packed_program(_empty_program(decls), pack)
    import json

    layouts = json.loads(program.meta[packing.PACKED_META])
    layouts[packing.COLUMNS_NAME] = [[name, pack.columns[name], n] for name, (_, n) in pack.members.items()]
    program = dataclasses.replace(program, meta={packing.PACKED_META: json.dumps(layouts)})
    arrays = {d.name: rng.standard_normal(d.shape).astype(np.float32) for d in decls}
    grid = packing.pack_inputs(program, arrays)[packing.COLUMNS_NAME].reshape(128, pack.width)
    for name, (_, n) in pack.members.items():
        j = pack.columns[name]
        for e in range(-(-n // 128) * 128):
            assert grid[e % 128, j + e // 128] == (arrays[name][e] if e < n else 0.0)


def test_unpack_outputs_joins_the_chunks_of_a_long_member() -> None:
    """A member longer than the partitions takes one column per chunk of 128: element e of the member whose
    first column is j sits at row e % 128 of column j + e // 128 (plain reference, element by element)."""
    k = 6
    table = np.random.default_rng(1).standard_normal(128 * k).astype(np.float32)
    layout = {packing.OUT_PACK_NAME: [k, [["a", 1, 300], ["b", 4, 256], ["c", 0, 7]]]}
    from nprof.program.model import Program

    program = Program("p", "trn1", (), (), meta={packing.OUT_PACKED_META: __import__("json").dumps(layout)})
    out = packing.unpack_outputs(program, {packing.OUT_PACK_NAME: table})
    grid = table.reshape(128, k)
    for name, j, n in layout[packing.OUT_PACK_NAME][1]:  # type: ignore[misc]
        assert out[name].shape == (n,)
        for e in range(n):
            assert out[name][e] == grid[e % 128, j + e // 128]


@pytest.mark.parametrize("channels", [256, 384])
def test_batch_norm_statistics_of_many_channels_move_in_one_dma_each_way(
    channels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training batch norm over more than 128 channels reads its weight, bias and running statistics 128
    channels at a time and writes four statistics the same way: packed, the reads come from one group tile
    (one DMA) and the writes leave in the output pack's one DMA; every output bit-identical to the unpacked
    lowering and close to eager. (DMA counts of the packing alone: `compiler.dmamerge` would merge the
    unpacked lowering's per-128-channel stores.)"""
    monkeypatch.setattr(dmamerge, "ENABLED", False)
    gen = torch.Generator().manual_seed(channels)
    x = torch.randn(2, channels, 3, 3, generator=gen)
    w, b, rm = (torch.randn(channels, generator=gen) for _ in range(3))
    rv = torch.rand(channels, generator=gen) + 0.5

    def fn(x, w, b, rm, rv):  # type: ignore[no-untyped-def]
        return torch.ops.aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)

    args = [x, w, b, rm, rv]
    packed, packed_dmas = _lower_outputs(fn, args, 5, packed=True)
    plain, plain_dmas = _lower_outputs(fn, args, 5, packed=False)
    chunks = channels // 128
    assert packed_dmas == plain_dmas - 8 * chunks + 2
    for p, q, e in zip(packed, plain, fn(*args), strict=True):  # type: ignore[no-untyped-call]
        np.testing.assert_array_equal(p, q)
        np.testing.assert_allclose(p, e.numpy(), rtol=1e-4, atol=1e-4)


def test_int_scalar_counters_move_in_one_dma_each_way() -> None:
    """Three int64 scalar counters (as batch norm's ``num_batches_tracked``) incremented beside fp32 work:
    packed, the three loads are one DMA of the int row and the three stores one DMA of the int output pack;
    the counters come back exact (int32 values, the eager sums) and every output equals the unpacked lowering."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    counters = [torch.tensor(v, dtype=torch.int64) for v in (0, 7, 123_456)]

    def fn(x, a, b, c):  # type: ignore[no-untyped-def]
        return x * 2.0, a + 1, b + 1, c + 1

    args = [x, *counters]
    packed, packed_dmas = _lower_outputs(fn, args, 4, packed=True)
    plain, plain_dmas = _lower_outputs(fn, args, 4, packed=False)
    assert packed_dmas == plain_dmas - 4
    for p, q, e in zip(packed, plain, fn(*args), strict=True):  # type: ignore[no-untyped-call]
        np.testing.assert_array_equal(p, q)
        np.testing.assert_array_equal(p, e.numpy())
    assert [int(p) for p in packed[1:]] == [1, 8, 123_457]


def test_plan_packs_int32_scalars_apart_from_the_fp32_members() -> None:
    decls = [TensorDecl("n1", (), "int32", "input"), TensorDecl("ids", (8,), "int32", "input"),
             TensorDecl("n2", (1,), "int32", "input"), TensorDecl("w", (16,), "float32", "input")]  # fmt: skip
    pack = packing.plan_pack(decls)
    assert pack is not None and dict(pack.ints) == {"n1": 0, "n2": 1} and not pack.members
    layout = {packing.INTS_NAME: [["n1", 0, 1], ["n2", 1, 1]]}  # as packed_program records it when read
    from nprof.program.model import Program

    program = Program("p", "trn1", (), (), meta={packing.PACKED_META: __import__("json").dumps(layout)})
    values = packing.pack_inputs(program, {"n1": np.int32(5), "n2": np.array([2**31 - 1], np.int32),
                                           "ids": np.arange(8, dtype=np.int32), "w": np.ones(16, np.float32)})
    assert values[packing.INTS_NAME].dtype == np.int32
    assert values[packing.INTS_NAME].tolist() == [5, 2**31 - 1]  # the same bits, not rounded through fp32
    assert set(values) == {packing.INTS_NAME, "ids", "w"}
