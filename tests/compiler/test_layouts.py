"""Kernels follow the layout their producer left in SBUF: an attention block's scores, mask add, softmax and
softmax backward move through SBUF in the [T, heads, T] tiles the score matmul stored, with no DMA of an
intermediate; results equal eager torch and the unfused lowering (every node through HBM)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.arch.isa import Opcode, Space  # noqa: E402
from nprof.compiler import fusion  # noqa: E402
from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.program.model import Program  # noqa: E402


@pytest.fixture(autouse=True)
def _no_timed_dma_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the DMAs of one lowering: the timed passes that merge front loads and gather the last
    stores (`compiler.prefetch.merge_front_loads`, `compiler.tailstage`) would change the counts."""
    from nprof.compiler import prefetch, tailstage

    monkeypatch.setattr(tailstage, "ENABLED", False)
    monkeypatch.setattr(prefetch, "MERGE_FRONT", False)


def _lower(fn: object, args: list[torch.Tensor], fused: bool = True) -> tuple[Program, list[np.ndarray]]:
    """`fn` traced to core ATen, lowered (fusion on or off) and simulated: (program, outputs)."""
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    old = fusion.ENABLED
    fusion.ENABLED = fused
    try:
        names = [f"in{i}" for i in range(len(args))]
        n_out = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
        program, slots = lower_graph(gm, GraphPlan("layout_test", "inference", names, [f"o{i}" for i in range(n_out)]))
    finally:
        fusion.ENABLED = old
    result = simulate(program, pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)}),
                      numerics=True)  # fmt: skip
    outputs = unpack_outputs(program, result.outputs)
    return program, [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots]


def _internal_dmas(program: Program) -> list[str]:
    """The HBM tensors of the DMAs that save or reload an intermediate (internal tensor)."""
    internal = {t.name for t in program.tensors if t.kind == "internal"}
    names = []
    for ins in program.instructions:
        if ins.opcode is Opcode.DMA_DIRECT2D:
            names += [a.tensor for a in (*ins.outs, *ins.ins) if a.space is Space.HBM and a.tensor in internal]
    return names


def _scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Masked attention over heads as nanoGPT writes it, plus the softmax backward's row sum and product."""
    att = (q @ k.transpose(-2, -1)) * 0.25 + mask
    p = att.softmax(-1)
    g = p @ v  # a consumer of the probabilities in the score layout
    row = (p * p).sum(-1, keepdim=True)  # the softmax backward's reduction, then its broadcast product
    return g, p * row, torch.log_softmax(att.clamp(min=-30.0), -1)


@pytest.mark.parametrize("shape", [(2, 4, 32, 16), (1, 3, 24, 8)])
def test_masked_softmax_stays_in_the_score_layout(shape: tuple[int, int, int, int]) -> None:
    b, h, t, d = shape
    gen = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(b, h, t, d, generator=gen) for _ in range(3))
    mask = torch.full((t, t), float("-inf")).triu(1)
    args = [q, k, v, mask]
    program, fused = _lower(_scores, args)
    _, plain = _lower(_scores, args, fused=False)
    for f, p, e in zip(fused, plain, _scores(*args), strict=True):
        np.testing.assert_allclose(f, e.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(f, p, rtol=1e-6, atol=1e-7)
    assert _internal_dmas(program) == []  # scores, mask add, softmax, row sums: all in SBUF


def test_grouped_row_reduction_matches_numpy() -> None:
    """A row max and a row mean over the last dim of a tile stored with several rows per partition."""
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(3, 5, 20, 12, generator=gen), torch.randn(3, 5, 12, 20, generator=gen)

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = (x @ y) - 1.0
        return s.amax(-1), s.mean(-1, keepdim=True) * s

    _, got = _lower(fn, [x, y])
    s = x.numpy() @ y.numpy() - 1.0
    np.testing.assert_allclose(got[0], s.max(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], s.mean(-1, keepdims=True) * s, rtol=1e-5, atol=1e-5)


def test_head_split_and_merge_move_across_partitions_on_tensore() -> None:
    """nanoGPT's attention layout changes: a [(B, T), 3C] projection split into heads [T, (B, H, D)] and the
    heads merged back into [(B, T), C] rows for the output projection, concatenated q/k/v gradients read as one
    [(B, T), 3C] operand: every one served from SBUF (TensorE partition moves, pieces side by side), no DMA of
    an intermediate; values equal eager."""
    b, t, heads, d = 2, 16, 4, 8
    c = heads * d
    gen = torch.Generator().manual_seed(7)
    x, w = torch.randn(b, t, c, generator=gen), torch.randn(3 * c, c, generator=gen)
    w2 = torch.randn(c, c, generator=gen)

    def fn(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = (x @ w.t()).split(c, dim=2)
        q, k, v = (z.view(b, t, heads, d).transpose(1, 2) for z in (q, k, v))
        y = (q * 0.5 + v).transpose(1, 2).reshape(b, t, c)  # heads merged back
        cat = torch.cat([y @ w2, k.transpose(1, 2).reshape(b, t, c), y], dim=2)
        return cat.reshape(b * t, 3 * c) @ w, y

    program, got = _lower(fn, [x, w, w2])
    for g, e in zip(got, fn(x, w, w2), strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-4)
    assert _internal_dmas(program) == []


def test_regather_groups_follow_the_partition_shifts() -> None:
    """The selection-matrix groups of a [(B, T), C] read of a [T, (B, C)] tile: one per batch, kept partition
    = output partition - 32 b, kept column 64 b; a run split across kept partitions is refused."""
    from nprof.arch.isa import Access
    from nprof.compiler.regather import kept_positions, matmul_groups

    key = Access(Space.HBM, "y", "float32", 0, 32, ((2048, 4), (1, 64)), 0, 64)  # [T, (B, C)] of [B, T, C]
    rows = Access(Space.HBM, "y", "float32", 0, 128, ((1, 64),), 0, 64)
    found = kept_positions(key, rows)
    assert found is not None
    assert matmul_groups(*found, 64) == [(0, 64 * g, 32 * g, 32 * (g + 1), 0) for g in range(4)]
    column = Access(Space.HBM, "y", "float32", 0, 1, ((64, 40),), 0, 0)  # 40 rows' first elements
    found = kept_positions(key, column)
    assert found is not None and matmul_groups(*found, 40) is None


@pytest.mark.parametrize("shape", [(4, 32, 64), (3, 10, 20), (2, 3, 5, 7)])
def test_batch_sum_of_kept_rows_is_one_selection_matmul(shape: tuple[int, ...]) -> None:
    """The sum over the batch of a [B, T, C] result kept as [(B, T), C] rows (a position embedding's
    gradient): equal to numpy, through SBUF (no DMA of an intermediate)."""
    gen = torch.Generator().manual_seed(len(shape))
    x, w = torch.randn(*shape[:-1], 8, generator=gen), torch.randn(8, shape[-1], generator=gen)

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x @ w
        return y.sum(0), (y * 2.0).sum(0, keepdim=True)

    program, got = _lower(fn, [x, w])
    y = x.numpy() @ w.numpy()
    np.testing.assert_allclose(got[0], y.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], (y * 2.0).sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
    assert _internal_dmas(program) == []


@pytest.mark.parametrize("rows", [192, 256, 200])
def test_weights_of_more_than_128_rows_move_in_one_dma(rows: int) -> None:
    """A [rows, 64] weight read transposed by x @ w.T, and a [rows, 64] weight gradient g.T @ x: one DMA each
    when rows split into equal tiles of 32..128 (192 = 2 x 96, 256 = 2 x 128; 200 = 2 x 100); equal to numpy."""
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(128, 64, generator=gen), torch.randn(rows, 64, generator=gen)
    g = torch.randn(128, rows, generator=gen)

    def fn(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x @ w.t(), g.t() @ x

    program, got = _lower(fn, [x, w, g])
    np.testing.assert_allclose(got[0], x.numpy() @ w.numpy().T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1], g.numpy().T @ x.numpy(), rtol=1e-5, atol=1e-4)
    dmas = [ins for ins in program.instructions if ins.opcode is Opcode.DMA_DIRECT2D]
    assert sum(a.tensor == "in1" for ins in dmas for a in ins.ins) == 1
    assert sum(a.tensor == "o1" for ins in dmas for a in ins.outs) == 1


@pytest.mark.parametrize(
    ("kept", "access"),
    [
        ((8, 8, ((64, 4), (1, 8))), (0, 32, 8, ((1, 8),))),  # [T, (B, C)] kept, [(B, T), C] rows read
        ((32, 8, ((1, 8),)), (128, 16, 8, ((1, 8),))),  # rows kept, partitions 16.. read on 0..
        ((32, 8, ((1, 8),)), (0, 8, 8, ((64, 4), (1, 8)))),  # rows kept, [8, (4, 8)] blocks read
    ],
)
def test_regather_equals_the_hbm_pattern(kept: tuple, access: tuple) -> None:
    """A tile kept under one pattern, read back under another through `regather`: the values the HBM pattern
    addresses, element for element (numerics simulated)."""
    from nprof.arch.isa import Access
    from nprof.compiler.kernels.hbm import load, window
    from nprof.compiler.regather import regather
    from nprof.compiler.subtile import addresses
    from nprof.nki import language as nl

    key = Access(Space.HBM, "t", "float32", 0, kept[0], kept[2], 0, kept[1])
    offset, p, stride, free = access
    a = Access(Space.HBM, "t", "float32", offset, p, free, 0, stride)
    builder = fusion.FusingBuilder("regather_test")
    builder.hbm_tensor("t", (256,), "float32", "input")
    builder.hbm_tensor("o", (a.partitions * a.free_elements,), "float32", "output")

    def kernel() -> None:
        load(key)
        got = regather(builder, a)
        assert got is not None
        flat = got.flatten_free() if got.ndim > 2 else got
        nl.store(window(Access(Space.HBM, "o", "float32", 0, a.partitions, ((1, a.free_elements),), 0,
                               a.free_elements)), value=flat)  # fmt: skip

    builder.call(kernel)
    values = np.arange(256, dtype=np.float32) * 1.5 - 7.0
    out = simulate(builder.build(), {"t": values}, numerics=True).outputs["o"]
    np.testing.assert_array_equal(out.ravel(), values[addresses(a).ravel()])


def test_a_broadcast_operand_is_loaded_once_per_distinct_element() -> None:
    """The gradient of a spatial mean, expand [4, 128, 1, 1] -> [4, 128, 4, 4] divided by 16: the expanded input
    is read by DMAs of its 512 distinct values (2 KiB), seen with zero strides on chip, not 16 times each (one
    4-byte chunk per element); the result equals eager's."""
    x = torch.randn(4, 128, 1, 1, generator=torch.Generator().manual_seed(3))

    def fn(x):  # type: ignore[no-untyped-def]
        return (x.expand(4, 128, 4, 4) / 16,)

    program, (got,) = _lower(fn, [x])
    np.testing.assert_array_equal(got, fn(x)[0].numpy())
    read = sum(a.elements for ins in program.instructions if ins.opcode is Opcode.DMA_DIRECT2D
               for a in ins.ins if a.space is Space.HBM)  # fmt: skip
    assert read == 4 * 128


def test_few_channel_images_are_tiled_in_the_spread_layout() -> None:
    """A ReLU backward on [4, 16, 32, 32] (no producer tiling to follow: graph inputs) runs on all 128
    partitions, channel c on partitions 8c..8c+7, each a block of 4 rows of every image (the spread layout the
    spread convolutions and batch norms keep in SBUF), not on 16 or 64; the result equals eager's."""
    gen = torch.Generator().manual_seed(4)
    x, g = torch.randn(4, 16, 32, 32, generator=gen), torch.randn(4, 16, 32, 32, generator=gen)

    def fn(x, g):  # type: ignore[no-untyped-def]
        return (torch.where(x <= 0, 0.0, g),)

    program, (got,) = _lower(fn, [x, g])
    np.testing.assert_array_equal(got, fn(x, g)[0].numpy())
    dmas = [a for ins in program.instructions if ins.opcode is Opcode.DMA_DIRECT2D
            for a in (*ins.ins, *ins.outs) if a.space is Space.HBM]  # fmt: skip
    assert dmas and all(a.partitions == 128 and a.partition_stride == 128 for a in dmas)


def test_regathers_with_one_partition_shift_share_one_selection_matrix() -> None:
    """Two regathers moving rows by the same partition shift build the 0/1 selection band once (one iota), and
    both read back exactly the elements of their HBM pattern (each selection a window of the kept band)."""
    from nprof.arch.isa import Access
    from nprof.compiler.kernels.hbm import load, window
    from nprof.compiler.regather import regather
    from nprof.compiler.subtile import addresses
    from nprof.nki import language as nl

    key = Access(Space.HBM, "t", "float32", 0, 32, ((1, 8),), 0, 8)  # 32 rows of 8 kept on partitions 0..31
    reads = [Access(Space.HBM, "t", "float32", 128, 16, ((1, 8),), 0, 8),  # rows 16..31 onto partitions 0..15
             Access(Space.HBM, "t", "float32", 128, 16, ((1, 4),), 0, 8)]  # the left half of the same rows
    builder = fusion.FusingBuilder("selection_test")
    builder.hbm_tensor("t", (256,), "float32", "input")
    for i, a in enumerate(reads):
        builder.hbm_tensor(f"o{i}", (a.partitions * a.free_elements,), "float32", "output")

    def kernel() -> None:
        load(key)
        for i, a in enumerate(reads):
            got = regather(builder, a)
            assert got is not None
            nl.store(window(Access(Space.HBM, f"o{i}", "float32", 0, a.partitions, ((1, a.free_elements),), 0,
                                   a.free_elements)), value=got)  # fmt: skip

    builder.call(kernel)
    program = builder.build()
    assert sum(ins.opcode is Opcode.IOTA for ins in program.instructions) == 1
    values = np.arange(256, dtype=np.float32) * 0.5 + 3.0
    out = simulate(program, {"t": values}, numerics=True).outputs
    for i, a in enumerate(reads):
        np.testing.assert_array_equal(out[f"o{i}"].ravel(), values[addresses(a).ravel()])
