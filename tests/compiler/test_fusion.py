"""Fused lowering (tiles kept in SBUF across kernels) against the unfused lowering on random small graphs.

The reference is the plain lowering with fusion off (every node reads its operands from HBM and writes its
result back): on the same graph and inputs the fused program must give bit-identical outputs in at
most 5% more simulated time (less in most graphs); both must match eager torch.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.arch.isa import Access, Space  # noqa: E402
from nprof.compiler import extents, fusion  # noqa: E402
from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.compiler.views import View, retile, row_tiles  # noqa: E402
from nprof.device import simulate  # noqa: E402


def _random_fn(rng: random.Random, width: int) -> object:
    """A chain of 4-7 random ops on x [B, width] with a second input y [B, width] and a weight w."""
    pool = [
        lambda x, y, w: torch.relu(x),
        lambda x, y, w: x + y,
        lambda x, y, w: x * 0.5 - y,
        lambda x, y, w: torch.tanh(x),
        lambda x, y, w: x @ w,
        lambda x, y, w: x - x.mean(dim=1, keepdim=True),
        lambda x, y, w: torch.sigmoid(x) * y,
        lambda x, y, w: (x.t() * 2.0).t(),
        lambda x, y, w: torch.softmax(x, dim=1),
        lambda x, y, w: torch.cat([x[:, 1:], x[:, :1]], dim=1) * y,  # windows of a kept tile
        lambda x, y, w: torch.cat([x[1:], x[:1]], dim=0) - y,
        lambda x, y, w: torch.where(x > y, x, y * 0.5),  # a bool mask kept in SBUF as fp32 0/1
    ]
    chain = [rng.choice(pool) for _ in range(rng.randint(4, 7))]

    def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mid = x
        for op in chain[: len(chain) // 2]:
            mid = op(mid, y, w)
        out = mid
        for op in chain[len(chain) // 2 :]:
            out = op(out, y, w)
        return out, mid  # an intermediate that is also a graph output

    return fn


def _run(gm: object, args: list[torch.Tensor], fused: bool) -> tuple[list[np.ndarray], int]:
    """Lower `gm` with fusion on or off, simulate it: (outputs, simulated ns)."""
    old = fusion.ENABLED
    fusion.ENABLED = fused
    try:
        names = [f"in{i}" for i in range(len(args))]
        n_out = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])  # type: ignore[attr-defined]
        plan = GraphPlan("fusion_test", "inference", names, [f"out{i}" for i in range(n_out)])
        program, slots = lower_graph(gm, plan)
    finally:
        fusion.ENABLED = old
    inputs = pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})  # small inputs: packed
    result = simulate(program, inputs, numerics=True)
    outputs = unpack_outputs(program, result.outputs)  # small outputs: staged into one tensor
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots], int(result.latencies_ns[-1])


@pytest.mark.parametrize("seed", range(8))
def test_fused_equals_unfused_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    batch, width = rng.choice([3, 32, 130]), rng.choice([5, 64, 200])
    gen = torch.Generator().manual_seed(seed)
    args = [torch.randn(batch, width, generator=gen), torch.randn(batch, width, generator=gen),
            torch.randn(width, width, generator=gen) / width**0.5]  # fmt: skip
    fn = _random_fn(rng, width)
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    fused, fused_ns = _run(gm, args, fused=True)
    plain, plain_ns = _run(gm, args, fused=False)
    for f, p, e in zip(fused, plain, fn(*args), strict=True):  # type: ignore[operator]
        np.testing.assert_array_equal(f, p)
        np.testing.assert_allclose(f, e.numpy(), rtol=1e-4, atol=1e-5)
    assert fused_ns <= 1.05 * plain_ns  # simulated time: following a producer's tiling may cost a little


def test_retile_follows_a_producers_tiles_for_broadcast_operands() -> None:
    """Tiles rebuilt from a producer's store patterns (one [6, 10] tile per image, as a conv's matmul stores
    them) address the same output elements, and a broadcast operand follows them element by element."""
    shape = (4, 6, 10)
    out = View.whole("o", "float32", shape)
    bias = View.whole("b", "float32", (6, 1)).expand(shape)
    accesses = [Access(Space.HBM, "o", "float32", i * 60, 6, ((1, 10),), 0, 10) for i in range(4)]
    rebuilt = retile(accesses, shape, [out.strides, bias.strides])
    assert rebuilt is not None
    for spec, acc in zip(rebuilt, accesses, strict=True):
        assert spec.access(0, out) == acc
        b = spec.access(1, bias)
        assert (b.offset, b.partitions, b.partition_stride, b.free) == (0, 6, 1, ((0, 10),))
    merged = list(row_tiles(shape, [out.strides]))  # 240 elements as [120, 2]: not a box of whole dims
    assert retile([m.access(0, out) for m in merged], shape, [out.strides, bias.strides]) is None


def test_a_write_drops_only_the_kept_tiles_whose_span_it_meets() -> None:
    """Two images' tiles of one tensor are kept; writing the second image's rows keeps the first image's tile
    (disjoint spans) and drops the second's; an interleaved (strided) write meeting both spans drops both."""
    from nprof.nki import language as nl

    builder = fusion.FusingBuilder("span_test")
    builder.hbm_tensor("t", (2, 8, 16), "float32", "internal")
    first = Access(Space.HBM, "t", "float32", 0, 8, ((1, 16),), 0, 16)
    second = Access(Space.HBM, "t", "float32", 128, 8, ((1, 16),), 0, 16)
    columns = Access(Space.HBM, "t", "float32", 0, 16, ((1, 1),), 0, 16)  # column 0 of both images

    def kernel() -> None:
        from nprof.compiler.kernels.hbm import load, store, window

        for a in (first, second):
            store(a, nl.zeros((8, 16), nl.float32, buffer=nl.sbuf))
        assert builder.lookup(first) is not None and builder.lookup(second) is not None
        nl.store(window(second), value=nl.zeros((8, 16), nl.float32, buffer=nl.sbuf))
        assert builder.lookup(first) is not None and builder.lookup(second) is None
        store(second, load(first))
        nl.store(window(columns), value=nl.zeros((16, 1), nl.float32, buffer=nl.sbuf))
        assert builder.lookup(first) is None and builder.lookup(second) is None

    builder.call(kernel)
    assert extents.span(columns) == (0, 240)


def test_exact_cover_matches_a_set_reference_on_random_patterns() -> None:
    """`extents.exact_cover` (one bincount) against the plain rule: every element addressed exactly once."""
    import random

    from nprof.arch.isa import Access, Space

    def addresses(a: Access) -> list[int]:
        out = [a.offset + p * a.partition_stride for p in range(a.partitions)]
        for stride, size in a.free:
            out = [base + k * stride for base in out for k in range(size)]
        return out

    rng = random.Random(7)
    verdicts = set()
    for _ in range(400):
        rows, cols = rng.randint(1, 8), rng.randint(1, 6)
        n, accesses, r0 = rows * cols, [], 0
        while r0 < rows:  # row blocks of a [rows, cols] tensor: an exact cover, then maybe disturbed
            take = rng.randint(1, rows - r0)
            accesses.append(Access(Space.HBM, "t", "float32", r0 * cols, take, ((1, cols),), 0, cols))
            r0 += take
        if rng.random() < 0.6:
            k = rng.randrange(len(accesses))
            a = accesses[k]
            accesses[k] = rng.choice([
                Access(a.space, a.tensor, a.dtype, a.offset + rng.choice([-1, 1]), a.partitions, a.free, 0, cols),
                Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((2, (cols + 1) // 2),), 0, cols),
                Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, a.free, 0, cols + 1),
            ])
        flat = [i for a in accesses for i in addresses(a)]
        expected = len(flat) == n and sorted(flat) == list(range(n))
        assert extents.exact_cover(accesses, n) == expected
        verdicts.add(expected)
    assert verdicts == {True, False}  # both outcomes exercised


@pytest.mark.parametrize("mask_max", [extents.MASK_MAX, 8])
def test_footprint_meets_matches_a_set_reference_on_random_patterns(mask_max: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`extents.Footprint.meets` (one pattern's addresses marked once, each other pattern one pass: a mask over
    the span, or sorted when the span exceeds `MASK_MAX`, forced here with 8) against the plain rule: the
    two patterns' address sets intersect; `extents.meet` gives the same answer."""
    monkeypatch.setattr(extents, "MASK_MAX", mask_max)
    rng = random.Random(11)

    def pattern() -> Access:
        free = tuple((rng.choice([0, 1, 2, 3, 7, 16]), rng.randint(1, 5)) for _ in range(rng.randint(1, 3)))
        return Access(Space.HBM, "t", "float32", rng.randint(0, 60), rng.randint(1, 4), free, 0,
                      rng.choice([0, 1, 5, 16, 40]))  # fmt: skip

    def addresses(a: Access) -> set[int]:
        out = [a.offset + p * a.partition_stride for p in range(a.partitions)]
        for stride, size in a.free:
            out = [base + k * stride for base in out for k in range(size)]
        return set(out)

    verdicts = set()
    for _ in range(100):
        written = pattern()
        footprint = extents.Footprint(written)
        for _ in range(8):  # one footprint asked of several patterns, as a write is of the kept tiles
            kept = pattern()
            expected = bool(addresses(written) & addresses(kept))
            assert footprint.meets(kept) == expected == extents.meet(kept, written)
            verdicts.add(expected)
    assert verdicts == {True, False}


def test_translate_meet_matches_a_set_reference_on_shifted_patterns() -> None:
    """`extents.translate_meet` (two patterns of the same dims at different offsets: is the offset difference
    a sum of digit * stride?) against the plain rule, on row blocks, interleaved and overlapping strides
    (a stride smaller than the inner dims' reach), negative and zero strides; None only past its budget."""
    rng = random.Random(12)

    def addresses(a: Access) -> set[int]:
        out = [a.offset + p * a.partition_stride for p in range(a.partitions)]
        for stride, size in a.free:
            out = [base + k * stride for base in out for k in range(size)]
        return set(out)

    verdicts, answered = set(), 0
    for _ in range(600):
        free = tuple((rng.choice([0, 1, 2, 3, -4, 7, 16, 56]), rng.randint(1, 6)) for _ in range(rng.randint(1, 3)))
        parts, pstride = rng.randint(1, 5), rng.choice([0, 1, 5, 16, 58, 200])
        a = Access(Space.HBM, "t", "float32", rng.randint(0, 300), parts, free, 0, pstride)
        b = Access(Space.HBM, "t", "float32", rng.randint(0, 300), parts, free, 0, pstride)
        got = extents.translate_meet(a, b)
        expected = bool(addresses(a) & addresses(b))
        assert got is None or got == expected, (a, b)
        assert extents.Footprint(a).meets(b) == expected
        answered += got is not None
        verdicts.add(expected)
    assert verdicts == {True, False} and answered > 550
    c = Access(Space.HBM, "t", "float32", 0, 2, ((1, 3),), 0, 10)
    assert extents.translate_meet(c, Access(Space.HBM, "t", "float32", 0, 2, ((1, 4),), 0, 10)) is None  # dims differ
