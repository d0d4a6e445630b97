"""The direct convolution kernels (operands resident in SBUF) against eager torch, forward and backward."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import nprof.compiler.lowerings  # noqa: E402, F401  (registers every lowering, ops_conv among them)
from nprof.compiler import STATS, ops_conv  # noqa: E402
from nprof.compiler.kernels import conv as direct  # noqa: E402
from nprof.compiler.kernels import conv_taps  # noqa: E402
from nprof.compiler.ops_conv import batch_chunk, direct_supported  # noqa: E402
from nprof.compiler.views import View  # noqa: E402
from tests.compiler.conftest import check_module  # noqa: E402

# (in channels, out channels, kernel, stride, padding, dilation, bias, image size)
GEOMETRIES = [
    (3, 5, 3, 1, 1, 1, True, 7),  # a padded 3x3 with bias
    (4, 6, 3, 2, 1, 1, False, 9),  # strided, odd size: the input gradient's last row gets no tap
    (5, 3, 1, 2, 0, 1, False, 8),  # a resnet downsample (1x1, stride 2)
    (2, 4, 3, 1, 2, 2, True, 8),  # dilated
    (3, 4, (3, 2), (2, 1), (1, 0), 1, True, 6),  # rectangular kernel, per-axis stride and padding
    (130, 140, 3, 1, 1, 1, False, 4),  # more than 128 channels in and out: chunked over partitions
    (40, 6, 3, 2, 1, 1, True, 7),  # more than STACK_MAX_C channels: one matmul per tap, strided windows
    (36, 4, 3, 1, 2, 2, False, 6),  # ... stride 1, dilated: windows read as whole padded rows
    (40, 36, 3, 1, 1, 1, True, 1),  # 1x1 images: eight of nine taps read only padding (skipped, zero gradient)
    (48, 40, 3, 2, 1, 1, False, 3),  # strided, several images per pixel block of the weight gradient
    (140, 130, 3, 2, 1, 1, False, 5),  # strided over more than 128 channels in and out: the input gradient
    # by output phase accumulates over OC chunks and writes C chunks
    (6, 8, 3, 3, 0, 1, True, 11),  # stride 3, no padding: phases some taps never reach
    (130, 6, 3, 1, 1, 1, False, 4),  # few out channels, more than 128 in: the stacked input gradient by C chunk
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g[:6]) for g in GEOMETRIES])
def test_direct_conv_matches_eager(geometry: tuple) -> None:
    cin, cout, k, s, p, d, bias, size = geometry
    x = torch.randn(2, cin, size, size, generator=torch.Generator().manual_seed(3)).requires_grad_(True)

    def make() -> torch.nn.Module:
        return torch.nn.Conv2d(cin, cout, k, s, p, d, bias=bias)

    x_v = View.whole("x", "float32", tuple(x.shape))
    w_v = View.whole("w", "float32", tuple(make().weight.shape))
    pairs = [(v, v) if isinstance(v, int) else v for v in (s, p, d)]
    assert direct_supported(x_v, w_v, *pairs)  # the direct kernels, not the im2col fallback, are under test
    STATS.reset()
    check_module(make, x)


# (in channels, out channels, kernel, stride, padding, images, image size, images per chunk): whole batches
# whose resident tiles do not fit (these fell back to im2col / col2im), run by the direct kernels in chunks
CHUNKED = [
    (40, 48, 3, 1, 1, 5, 40, 3),  # stride 1: chunks of 3 and 2 images
    (40, 48, 3, 2, 1, 4, 40, 3),  # strided (input gradient by output phase): 3 and 1
    (36, 40, 1, 2, 0, 5, 40, 3),  # a resnet downsample (1x1, stride 2): 3 and 2
]


@pytest.mark.parametrize("geometry", CHUNKED, ids=[str(g) for g in CHUNKED])
def test_direct_conv_in_batch_chunks_matches_eager(geometry: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forward, input and weight gradients of a batch too big for SBUF, by the direct kernels in chunks of
    images (the weight gradient the sum of the chunks'), equal eager's on random inputs; im2col never runs."""
    cin, cout, k, s, p, n, size, per = geometry
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(n, cin, size, size, generator=gen).requires_grad_(True)
    x_v = View.whole("x", "float32", tuple(x.shape))
    w_v = View.whole("w", "float32", (cout, cin, k, k))
    pairs = ((s, s), (p, p), (1, 1))
    assert not direct_supported(x_v, w_v, *pairs)  # the whole batch used to fall back
    assert batch_chunk(x_v, w_v, *pairs) == per

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("im2col / col2im lowering used")

    monkeypatch.setattr(ops_conv, "_cols", refuse)
    monkeypatch.setattr(ops_conv, "_col2im", refuse)
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager, dev = torch.nn.Conv2d(cin, cout, k, s, p), torch.nn.Conv2d(cin, cout, k, s, p)
    dev.load_state_dict(eager.state_dict())
    x_e, x_d = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    out_e, out_d = eager(x_e), torch.compile(dev, backend="nprof")(x_d)
    torch.testing.assert_close(out_d.detach(), out_e.detach(), rtol=1e-4, atol=1e-5)
    w = torch.randn(out_e.shape, generator=torch.Generator().manual_seed(2))
    (out_e * w).sum().backward()
    (out_d * w).sum().backward()
    torch.testing.assert_close(x_d.grad, x_e.grad, rtol=1e-4, atol=1e-5)
    for got, want in ((dev.weight.grad, eager.weight.grad), (dev.bias.grad, eager.bias.grad)):
        # each weight gradient sums thousands of products: fp32 summation order differs (tolerance relative
        # to the largest gradient, as in the stem test below)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())


def test_stem_conv_too_big_to_pad_in_sbuf_stacks_its_taps() -> None:
    """A resnet stem (3 channels, 7x7, stride 2, padding 3) whose padded input does not fit the SBUF share:
    forward and weight gradient run the stacked kernels (taps on the partitions), not the im2col through HBM;
    outputs and weight gradients equal eager's (each weight gradient sums 2048 products: fp32 summation order
    differs, so the tolerance is relative to the largest gradient)."""
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    x_v, w_v = View.whole("x", "float32", (2, 3, 64, 64)), View.whole("w", "float32", (8, 3, 7, 7))
    assert not direct.fits((2, 3, 64, 64), (8, 3, 7, 7), (32, 32), (3, 3))
    assert direct_supported(x_v, w_v, (2, 2), (3, 3), (1, 1), ("forward", "weight"))
    assert not direct_supported(x_v, w_v, (2, 2), (3, 3), (1, 1), ("input",))  # strided: not stacked
    torch._dynamo.reset()
    STATS.reset()
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False)
    out_e = conv(x)
    w = torch.randn(out_e.shape, generator=torch.Generator().manual_seed(2))
    (out_e * w).sum().backward()
    grad_e, conv.weight.grad = conv.weight.grad, None
    out_d = torch.compile(conv, backend="nprof")(x)
    (out_d * w).sum().backward()
    torch.testing.assert_close(out_d.detach(), out_e.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(conv.weight.grad, grad_e, rtol=1e-4, atol=1e-5 * grad_e.abs().max().item())
    tensors = {name for p in STATS.last_profile.values() for name in p.dma["tensor"].to_pylist()}
    assert len(STATS.last_profile) == 2 and not any("tmp" in name for name in tensors)  # no im2col temporaries


# (in channels, out channels, kernel, stride, padding, image size): single images whose stacked tiles and
# padded input both exceed the SBUF share (these fell back to im2col), run by the stacked kernels in row bands
BANDED = [
    (3, 8, 7, 2, 3, 200),  # a resnet stem: strided, bands of 33 (forward) and 18 (weight gradient) output rows
    (4, 6, 5, 1, 2, 150),  # stride 1, same width: 2 bands (each tap's rows one contiguous run)
]


@pytest.mark.parametrize("geometry", BANDED, ids=[str(g) for g in BANDED])
def test_stacked_conv_in_row_bands_matches_eager(geometry: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forward and weight gradient by the stacked kernels in bands of output rows (a band's input is that of
    the convolution padded by the band's offset; the weight gradient accumulates over the bands) equal
    eager's on random inputs; the im2col forward never runs."""
    cin, cout, k, s, p, size = geometry
    x = torch.randn(1, cin, size, size, generator=torch.Generator().manual_seed(6))
    out_side = (size + 2 * p - k) // s + 1
    conv = ((s, s), (p, p), (1, 1))
    rows = direct.stacked_rows((1, cin, size, size), (cout, cin, k, k), (out_side, out_side), conv)
    assert 0 < rows < out_side  # banded
    x_v, w_v = View.whole("x", "float32", tuple(x.shape)), View.whole("w", "float32", (cout, cin, k, k))
    assert not ops_conv.spread_backward(x_v, w_v, *conv, ("weight",))  # the weight gradient is the stacked one
    weight_rows = direct.stacked_rows((1, cin, size, size), (cout, cin, k, k), (out_side, out_side), conv, weight=True)
    assert 0 < weight_rows < out_side  # banded too (strided: fewer rows, in the default stage)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("im2col lowering used")

    monkeypatch.setattr(ops_conv, "_cols", refuse)
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager, dev = torch.nn.Conv2d(cin, cout, k, s, p), torch.nn.Conv2d(cin, cout, k, s, p)
    dev.load_state_dict(eager.state_dict())
    out_e, out_d = eager(x), torch.compile(dev, backend="nprof")(x)
    torch.testing.assert_close(out_d.detach(), out_e.detach(), rtol=1e-4, atol=1e-5)
    w = torch.randn(out_e.shape, generator=torch.Generator().manual_seed(2))
    (out_e * w).sum().backward()
    (out_d * w).sum().backward()
    for got, want in ((dev.weight.grad, eager.weight.grad), (dev.bias.grad, eager.bias.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize(("cin", "dmas"), [(40, 4 + 1), (8, 9 + 3 + 1)])
def test_direct_conv_moves_each_operand_in_few_dmas(cin: int, dmas: int) -> None:
    """A 3x3 convolution's forward program: input, weights, bias and output each cross HBM in one DMA; with
    few input channels the input comes once per kernel tap instead, stacked on the partitions. One more: the
    store of the program's conv check (`nprof.compiler.conv_check`; in a larger graph it rides in the DMA of
    the other small outputs)."""
    torch._dynamo.reset()
    STATS.reset()
    conv = torch.nn.Conv2d(cin, 16, 3, 1, 1)
    with torch.no_grad():
        torch.compile(conv, backend="nprof")(torch.randn(2, cin, 12, 12))
    profile = next(iter(STATS.last_profile.values()))
    assert profile.dma.num_rows == dmas


def test_live_taps_matches_a_brute_force_scan() -> None:
    """The taps whose window reads data, against a plain scan of every output position of a zero-padded
    image (a tap is live when some output reads an element inside the image)."""
    for stride, pad, dil, size, k in itertools.product((1, 2), (0, 1, 2), (1, 2), (1, 2, 3), (1, 3)):
        out = (size + 2 * pad - dil * (k - 1) - 1) // stride + 1
        if out <= 0:
            continue
        taps = [(i, j) for i in range(k) for j in range(k)]
        data = (range(pad, pad + size), range(pad, pad + size))
        got = conv_taps.live_taps(taps, (out, out), (stride, stride), (dil, dil), data)
        want = [(t, (i, j)) for t, (i, j) in enumerate(taps)
                if any(0 <= r * stride + i * dil - pad < size and 0 <= q * stride + j * dil - pad < size
                       for r in range(out) for q in range(out))]  # fmt: skip
        assert got == (want or list(enumerate(taps))), (stride, pad, dil, size, k)


def test_fits_refuses_what_sbuf_cannot_hold() -> None:
    assert direct.fits((2, 16, 32, 32), (16, 16, 3, 3), (32, 32), (1, 1))
    assert not direct.fits((64, 64, 64, 64), (64, 64, 3, 3), (64, 64), (1, 1))
    assert not direct.fits((1, 4, 8, 200), (4, 4, 1, 1), (8, 200), (0, 0))  # output rows wider than 128


def test_tap_rows_matches_a_brute_force_scan() -> None:
    """The output positions a kernel tap reads inside the input (not padding), against a plain scan."""
    for stride in (1, 2, 3):
        for pad in (0, 1, 2, 3):
            for dil in (1, 2):
                for tap in range(4):
                    for size in (1, 4, 7):
                        out = max(1, (size + 2 * pad - dil * tap - 1) // stride + 1)
                        inside = [o for o in range(out) if 0 <= o * stride + tap * dil - pad < size]
                        lo, hi = conv_taps.tap_rows(out, tap, stride, pad, dil, size)
                        assert list(range(lo, hi)) == inside, (stride, pad, dil, tap, size)


def test_strided_input_gradient_zeroes_the_phases_no_tap_reaches() -> None:
    """A 1x1 stride-2 convolution's input gradient reaches one phase of four; the others must be zero even when
    PSUM holds earlier values (a matmul before it filled every bank): a phase without taps is never evicted."""
    import numpy as np
    from torch.fx.experimental.proxy_tensor import make_fx

    from nprof.compiler.backend import decompositions
    from nprof.compiler.lower import GraphPlan, lower_graph
    from nprof.compiler.packing import pack_inputs, unpack_outputs
    from nprof.device import simulate

    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(128, 64, generator=gen), torch.randn(64, 4096, generator=gen)
    g, x, w = torch.randn(8, 8, 2, 2, generator=gen), torch.randn(8, 4, 4, 4, generator=gen), torch.randn(8, 4, 1, 1)

    def fn(a, b, g, x, w):  # type: ignore[no-untyped-def]
        m = a @ b  # lowered first: its results pass through every PSUM bank
        dx = torch.ops.aten.convolution_backward(g, x, w, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1,
                                                 [True, False, False])[0]  # fmt: skip
        return m, dx

    args = {"a": a, "b": b, "g": g, "x": x, "w": w}
    gm = make_fx(fn, decomposition_table=decompositions())(*args.values())
    program, slots = lower_graph(gm, GraphPlan("phases", "inference", list(args), ["o0", "o1"]))
    inputs = pack_inputs(program, {k: v.numpy() for k, v in args.items()})
    outputs = unpack_outputs(program, simulate(program, inputs, numerics=True).outputs)
    got = np.asarray(outputs[slots[1].name]).reshape(slots[1].shape)
    np.testing.assert_allclose(got, fn(*args.values())[1].numpy(), rtol=1e-5, atol=1e-5)  # type: ignore


@pytest.mark.parametrize(("size", "kernel", "stride", "pad", "dil"), [(32, 7, 2, 3, 1), (3, 7, 2, 3, 1),
                                                                      (11, 3, 2, 1, 2), (9, 3, 3, 0, 1)])  # fmt: skip
def test_strided_stacked_taps_picked_per_kernel_row_match_eager(size: int, kernel: int, stride: int, pad: int,
                                                                 dil: int, monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    """Few-channel strided convolutions (a resnet stem; a 3x3 image under a 7x7 kernel, where one output column
    reads left padding for some taps and right padding for others; dilated; stride 3): the stacked input built
    with one on-chip pick per kernel row (`conv_taps.staged_row`) gives eager's outputs and gradients, in fewer
    copies than one pick per tap (`ROW_PICKS` off)."""
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(5)).requires_grad_(True)

    def make() -> torch.nn.Module:
        return torch.nn.Conv2d(3, 8, kernel, stride, pad, dil, bias=False)

    copies = {}
    for on in (False, True):
        monkeypatch.setattr(conv_taps, "ROW_PICKS", on)
        monkeypatch.setenv("NPROF_CACHE", str(tmp_path / str(on)))  # the switch is not part of the cache key
        STATS.reset()
        check_module(make, x)
        fw = next(iter(STATS.last_profile.values()))  # the forward graph runs first
        copies[on] = sum(op == "TENSOR_COPY" for op in fw.instructions["opcode"].to_pylist())
    assert copies[True] < copies[False], copies


def test_stacked_input_gradient_loads_the_weights_in_large_pieces() -> None:
    """A 3x3 input gradient of 48 channels in, 32 out (the stacked kernel: flipped, transposed weights)
    loads W as its natural rows (one DMA, at most one piece per row) and transposes on TensorE, not by a
    transposing HBM pattern of 36-byte pieces (1536 chunks); the result equals eager's. (The spread kernel,
    32 in, keeps its transposing load: `kernels.conv_spread.transposed_rows`.)"""
    cin = 48
    import numpy as np
    from torch.fx.experimental.proxy_tensor import make_fx

    from nprof.arch.cost import dma_chunks
    from nprof.arch.isa import Opcode, Space
    from nprof.compiler.backend import decompositions
    from nprof.compiler.lower import GraphPlan, lower_graph
    from nprof.compiler.packing import pack_inputs, unpack_outputs
    from nprof.device import simulate

    gen = torch.Generator().manual_seed(8)
    g, x, w = (torch.randn(s, generator=gen) for s in ((2, 32, 16, 16), (2, cin, 16, 16), (32, cin, 3, 3)))

    def fn(g, x, w):  # type: ignore[no-untyped-def]
        return torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [True, False, False])[0]  # fmt: skip

    args = {"g": g, "x": x, "w": w}
    gm = make_fx(fn, decomposition_table=decompositions())(*args.values())
    program, slots = lower_graph(gm, GraphPlan("dx", "inference", list(args), ["o0"]))
    w_loads = [ins for ins in program.instructions if ins.opcode is Opcode.DMA_DIRECT2D
               and ins.ins[0].space is Space.HBM and ins.ins[0].nbytes == w.numel() * 4]  # fmt: skip
    assert len(w_loads) == 1
    assert dma_chunks(w_loads[0].ins[0], w_loads[0].outs[0]) <= 32  # at most one piece per row of W
    inputs = pack_inputs(program, {k: v.numpy() for k, v in args.items()})
    outputs = unpack_outputs(program, simulate(program, inputs, numerics=True).outputs)
    got = np.asarray(outputs[slots[0].name]).reshape(slots[0].shape)
    np.testing.assert_allclose(got, fn(*args.values()).numpy(), rtol=1e-5, atol=1e-4)  # type: ignore
