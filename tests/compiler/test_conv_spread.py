"""Few-channel "same" convolutions spread over the partitions (`kernels.conv_spread`) against eager torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import nprof.compiler.lowerings  # noqa: E402, F401  (registers every lowering)
from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.kernels.conv_spread import spread_factor  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402

# (batch, in channels, out channels, kernel, image size, bias)
SPREAD = [
    (4, 16, 16, 3, 32, False),  # a resnet stage-1 conv: 8 blocks of 4 rows, one PSUM bank
    (4, 3, 16, 3, 32, True),  # the stem: 24 input partitions, bias spread to the blocks
    (3, 32, 32, 3, 16, False),  # 4 blocks of 4 rows
    (8, 16, 16, 3, 32, True),  # two PSUM banks (image groups)
    (2, 8, 32, 5, 8, False),  # 5x5: halo of 2 rows, blocks of 2 rows
    (2, 16, 16, 1, 8, True),  # 1x1: no halo
]


def _run(fn: object, args: dict[str, torch.Tensor]) -> tuple[np.ndarray, object]:
    """(output, program) of `fn` lowered and simulated with numerics (non-finite outputs allowed)."""
    gm = make_fx(fn, decomposition_table=decompositions())(*args.values())
    program, slots = lower_graph(gm, GraphPlan("spread_conv", "inference", list(args), ["o0"]))
    inputs = pack_inputs(program, {name: a.numpy() for name, a in args.items()})
    result = simulate(program, inputs, numerics=True, ignore_exec_errors=True)
    got = np.asarray(unpack_outputs(program, result.outputs)[slots[0].name]).reshape(slots[0].shape)
    return got, program


@pytest.mark.parametrize("case", SPREAD, ids=[str(c) for c in SPREAD])
def test_spread_conv_matches_eager(case: tuple) -> None:
    """The forward against torch's conv2d (the backward is the stacked kernels', tested in test_conv)."""
    n, cin, cout, k, size, bias = case
    assert spread_factor((n, cin, size, size), (cout, cin, k, k), (1, 1), ((k - 1) // 2,) * 2, (1, 1)) > 1
    gen = torch.Generator().manual_seed(cin + size)
    args = {"x": torch.randn(n, cin, size, size, generator=gen), "w": torch.randn(cout, cin, k, k, generator=gen)}
    if bias:
        args["b"] = torch.randn(cout, generator=gen)

    def fn(*xwb):  # type: ignore[no-untyped-def]
        return (torch.nn.functional.conv2d(*xwb, padding=(k - 1) // 2),)

    got, program = _run(fn, args)
    np.testing.assert_allclose(got, fn(*args.values())[0].numpy(), rtol=1e-4, atol=1e-4)  # type: ignore
    assert any("nc_matmul" in str(i.attrs) or i.opcode.name == "MATMUL" for i in program.instructions)


def test_spread_factor_refuses_what_does_not_spread() -> None:
    assert spread_factor((4, 16, 32, 32), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1)) == 8
    assert spread_factor((4, 16, 32, 32), (16, 16, 3, 3), (2, 2), (1, 1), (1, 1)) == 1  # strided
    assert spread_factor((4, 16, 32, 32), (16, 16, 3, 3), (1, 1), (0, 0), (1, 1)) == 1  # not "same"
    assert spread_factor((4, 16, 32, 32), (64, 16, 3, 3), (1, 1), (1, 1), (1, 1)) == 1  # 64 output channels
    assert spread_factor((4, 32, 32, 32), (16, 32, 3, 3), (1, 1), (1, 1), (1, 1)) == 1  # 32 * 8 > 128 inputs
    assert spread_factor((4, 16, 12, 12), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1)) == 1  # 12 rows in 8 blocks
    assert spread_factor((64, 16, 32, 32), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1)) == 1  # past the SBUF share


def test_a_non_finite_input_reaches_only_its_in_block_positions() -> None:
    """An inf at row 31 of channel 2 (block 7 of 4-row blocks): every output eager makes non-finite is
    non-finite here too, and the others equal eager's, except that the block-diagonal matmul (0 x inf) also
    makes NaN at the same rows within every other block of that image, as the module doc says; the halo of
    channel 3 (which the DMA reads from channel 2's last row) is zeroed by a select, so it adds nothing."""
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(2, 16, 32, 32, generator=gen), torch.randn(16, 16, 3, 3, generator=gen)
    x[1, 2, 31, 7] = float("inf")

    def fn(x, w):  # type: ignore[no-untyped-def]
        return (torch.nn.functional.conv2d(x, w, padding=1),)

    got, _ = _run(fn, {"x": x, "w": w})
    want = fn(x, w)[0].numpy()  # type: ignore[no-untyped-call]
    assert (~np.isfinite(got))[~np.isfinite(want)].all()
    extra = np.argwhere(np.isfinite(want) & ~np.isfinite(got))
    assert len(extra) and set(extra[:, 0]) == {1} and set(extra[:, 2] % 4) <= {2, 3}  # rows 30, 31 mod 4
    same = np.isfinite(got)
    np.testing.assert_allclose(got[same], want[same], rtol=1e-4, atol=1e-4)


def test_split_dims_makes_the_spread_pattern_a_box_every_operand_follows() -> None:
    """The spread store pattern of a [4, 16, 32, 32] tensor (partition c * 8 + j: rows 4j..4j+3 of channel c,
    every image) is no box of the NCHW dims; with H split into 8 x 4 it is: the tile spec addresses the very
    elements of the pattern (brute force) for a contiguous operand, and a scalar broadcast follows it; a
    channels-last operand cannot (its channels do not merge with the row blocks): no spec."""
    from nprof.arch.isa import Access, Space
    from nprof.compiler.tilechoice import split_dims
    from nprof.compiler.views import View, retile

    shape = (4, 16, 32, 32)
    a = Access(Space.HBM, "t", "float32", 0, 128, ((16 * 32 * 32, 4), (1, 128)), 0, 128)
    contiguous, scalar, last = (16384, 1024, 32, 1), (0, 0, 0, 0), (16384, 1, 512, 16)
    assert retile([a], shape, [contiguous, scalar]) is None
    split, strides = split_dims([a], shape, [contiguous, scalar])
    assert split == [4, 16, 8, 4, 32] and strides == [(16384, 1024, 128, 32, 1), (0, 0, 0, 0, 0)]
    specs = retile([a], split, strides)
    assert specs is not None and len(specs) == 1

    def elements(acc: Access) -> set[int]:
        idx = {acc.offset}
        for stride, size in ((acc.partition_stride, acc.partitions), *acc.free):
            idx = {i + stride * s for i in idx for s in range(size)}
        return idx

    assert elements(specs[0].access(0, View("t", "float32", shape, contiguous, 0))) == elements(a)
    assert elements(specs[0].access(1, View("u", "float32", shape, scalar, 0))) == {0}
    assert retile([a], *split_dims([a], shape, [contiguous, last])) is None


BACKWARD = [c[:5] for c in SPREAD] + [(2, 16, 16, 3, 8)]  # + 8 rows in 8 blocks of 1 (halo = a whole block)


def _backward(n: int, cin: int, cout: int, k: int, size: int) -> object:
    def fn(g, x, w):  # type: ignore[no-untyped-def]
        return torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [(k - 1) // 2] * 2, [1, 1], False, [0, 0], 1,
                                                   [cin != 3, True, False])[:2]  # fmt: skip

    return fn


@pytest.mark.parametrize("case", BACKWARD, ids=[str(c) for c in BACKWARD])
def test_spread_conv_backward_matches_eager(case: tuple) -> None:
    """Input and weight gradients (`conv_spread_input_grad`, `conv_spread_weight_grad`) against torch's: the
    weight gradient spreads in every case here, the input gradient where its flipped convolution spreads (not
    for 8 <- 32 channels: 32 x 16 partitions), the other part runs the direct kernels beside it."""
    from nprof.compiler.ops_conv import spread_backward
    from nprof.compiler.views import View

    n, cin, cout, k, size = case
    pad = ((k - 1) // 2,) * 2
    xv, wv = View.whole("x", "float32", (n, cin, size, size)), View.whole("w", "float32", (cout, cin, k, k))
    assert spread_backward(xv, wv, (1, 1), pad, (1, 1), ("weight",))
    gen = torch.Generator().manual_seed(cout + size)
    args = {"g": torch.randn(n, cout, size, size, generator=gen), "x": torch.randn(n, cin, size, size, generator=gen),
            "w": torch.randn(cout, cin, k, k, generator=gen)}  # fmt: skip
    fn = _backward(n, cin, cout, k, size)
    want = fn(*args.values())
    for i in (0, 1) if cin != 3 else (1,):
        got, _ = _run(lambda *a, i=i: (fn(*a)[i],), args)
        np.testing.assert_allclose(got, want[i].numpy(), rtol=1e-4, atol=1e-4 * float(want[i].abs().max()))


def test_spread_weight_grad_keeps_an_inf_in_its_own_channel() -> None:
    """An inf in input channel 2: the weight gradient is non-finite exactly where eager's is (the off-diagonal
    blocks that pair it with other blocks' rows are dropped by a select, never multiplied by 0)."""
    gen = torch.Generator().manual_seed(7)
    args = {"g": torch.randn(2, 16, 32, 32, generator=gen), "x": torch.randn(2, 16, 32, 32, generator=gen),
            "w": torch.randn(16, 16, 3, 3, generator=gen)}  # fmt: skip
    args["x"][1, 2, 31, 7] = float("inf")
    fn = _backward(2, 16, 16, 3, 32)
    got, _ = _run(lambda *a: (fn(*a)[1],), args)
    want = fn(*args.values())[1].numpy()
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    same = np.isfinite(want)
    np.testing.assert_allclose(got[same], want[same], rtol=1e-4, atol=1e-3)


# (batch, in channels, out channels, kernel, image size, stride, padding): weight gradients of k != 128 / OC
STRIDED = [
    (4, 16, 32, 3, 32, 2, 1),  # a resnet stage's first conv: x on 64 partitions (k = 4), blocks of 8 -> 4 rows
    (4, 16, 32, 1, 32, 2, 0),  # its 1x1 shortcut: no halo
    (2, 32, 16, 3, 16, 1, 1),  # more inputs than outputs: g on 64 partitions
    (3, 8, 16, 3, 16, 2, 1),  # 8 blocks of 2 -> 1 row, three images per pixel chunk
]


@pytest.mark.parametrize("case", STRIDED, ids=[str(c) for c in STRIDED])
def test_spread_weight_grad_of_strided_convolutions_matches_eager(case: tuple) -> None:
    from nprof.compiler.kernels.conv_spread_grad import weight_grad_factor

    n, cin, cout, k, size, stride, pad = case
    geometry = ((stride, stride), (pad, pad), (1, 1))
    assert weight_grad_factor((n, cin, size, size), (cout, cin, k, k), *geometry) > 1
    gen = torch.Generator().manual_seed(cin + cout + stride)
    out = (size + 2 * pad - k) // stride + 1
    args = {"g": torch.randn(n, cout, out, out, generator=gen), "x": torch.randn(n, cin, size, size, generator=gen),
            "w": torch.randn(cout, cin, k, k, generator=gen)}  # fmt: skip

    def fn(g, x, w):  # type: ignore[no-untyped-def]
        return (torch.ops.aten.convolution_backward(g, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                                                    [False, True, False])[1],)  # fmt: skip

    got, _ = _run(fn, args)
    want = fn(*args.values())[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
