"""Strided few-channel convolutions with images on the partitions (`nprof.compiler.kernels.conv_batched`):
equal to eager and to the channel-partition lowering on random inputs, one input DMA per image chunk, and the
block mask equal to its definition."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.arch.isa import Opcode
from nprof.compiler import dmamerge
from nprof.compiler.kernels import conv_batched
from nprof.compiler.kernels.conv_batched import batched_images

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402


@pytest.fixture(autouse=True)
def _no_timed_dma_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the DMAs of one lowering: the timed passes that merge front loads and gather the last
    stores (`compiler.prefetch.merge_front_loads`, `compiler.tailstage`) would change the counts."""
    from nprof.compiler import prefetch, tailstage

    monkeypatch.setattr(tailstage, "ENABLED", False)
    monkeypatch.setattr(prefetch, "MERGE_FRONT", False)


def _conv(x: torch.Tensor, w: torch.Tensor, stride: int, pad: int, batched: bool) -> tuple[np.ndarray, int]:
    """(the lowered convolution's output, DMAs of its program) with the batched path on or off."""
    old = conv_batched.ENABLED
    conv_batched.ENABLED = batched
    try:

        def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
            return (torch.nn.functional.conv2d(x, w, stride=stride, padding=pad),)

        gm = make_fx(fn, decomposition_table=decompositions())(x, w)
        program, slots = lower_graph(gm, GraphPlan("conv_batched_test", "inference", ["in0", "in1"], ["out0"]))
    finally:
        conv_batched.ENABLED = old
    program.validate()
    result = simulate(program, pack_inputs(program, {"in0": x.numpy(), "in1": w.numpy()}))
    out = np.asarray(unpack_outputs(program, result.outputs)[slots[0].name]).reshape(slots[0].shape)
    return out, sum(i.opcode is Opcode.DMA_DIRECT2D for i in program.instructions)


CASES = [
    ((4, 16, 32, 32), (32, 16, 3, 3), 2, 1),  # the resnet CNN's first strided block
    ((4, 16, 32, 32), (32, 16, 1, 1), 2, 0),  # its 1x1 shortcut
    ((5, 32, 16, 16), (64, 32, 3, 3), 2, 1),  # two images per chunk, the last chunk one image
    ((3, 16, 9, 9), (16, 16, 3, 3), 2, 1),  # odd size: the last tap row reads padding
    ((2, 24, 12, 12), (20, 24, 3, 3), 3, 1),  # stride 3, channel counts that are no powers of two
]


@pytest.mark.parametrize(("xs", "ws", "stride", "pad"), CASES)
def test_equal_to_eager_and_to_the_channel_partition_lowering(
    xs: tuple, ws: tuple, stride: int, pad: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dmamerge, "ENABLED", False)  # the kernel's own DMAs (dmamerge may merge its stores)
    assert batched_images(xs, ws, (stride, stride), (pad, pad), (1, 1), False) >= 2
    gen = torch.Generator().manual_seed(sum(xs) + stride)
    x, w = torch.randn(*xs, generator=gen), torch.randn(*ws, generator=gen) / 10.0
    on, dmas_on = _conv(x, w, stride, pad, True)
    off, _ = _conv(x, w, stride, pad, False)
    expected = torch.nn.functional.conv2d(x, w, stride=stride, padding=pad).numpy()
    np.testing.assert_allclose(on, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(on, off, rtol=1e-5, atol=1e-5)
    g = batched_images(xs, ws, (stride, stride), (pad, pad), (1, 1), False)
    chunks = -(-xs[0] // g)
    # the weights, then per chunk of images one input load and one store; the conv check's store (`conv_check`)
    assert dmas_on == 1 + 2 * chunks + 1


def test_the_first_strided_block_moves_fewer_dmas() -> None:
    """The 3x3 stride-2 convolution of 16 channels: one input DMA instead of one per tap."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 16, 32, 32, generator=gen), torch.randn(32, 16, 3, 3, generator=gen)
    assert _conv(x, w, 2, 1, True)[1] == 3 + 1  # and the store of the conv check (`nprof.compiler.conv_check`)
    assert _conv(x, w, 2, 1, False)[1] >= 9 + 1


def test_the_block_mask_is_its_definition() -> None:
    """floor(p / c) == floor(q / oc) for the shapes the kernel builds, on the device."""
    from nprof.arch.isa import Access, Space
    from nprof.compiler.kernels.hbm import window
    from nprof.nki import language as nl
    from nprof.nki.trace import ProgramBuilder

    for c, oc, g in ((16, 32, 4), (32, 64, 2), (24, 20, 5)):
        rows, cols = g * c, g * oc
        builder = ProgramBuilder("mask_test")
        builder.hbm_tensor("out", (rows, cols), "float32", "output")

        def kernel(rows: int = rows, cols: int = cols, c: int = c, oc: int = oc) -> None:
            a = Access(Space.HBM, "out", "float32", 0, rows, ((1, cols),), 0, cols)
            nl.store(window(a), value=conv_batched.block_mask(rows, c, cols, oc))

        builder.call(kernel)
        got = np.asarray(simulate(builder.build()).outputs["out"]).reshape(rows, cols)
        p, q = np.arange(rows)[:, None], np.arange(cols)[None, :]
        np.testing.assert_array_equal(got, (p // c == q // oc).astype(np.float32))


def test_paths_it_does_not_take() -> None:
    assert batched_images((4, 16, 32, 32), (32, 16, 3, 3), (1, 1), (1, 1), (1, 1), False) == 0  # stride 1
    assert batched_images((4, 16, 32, 32), (32, 16, 3, 3), (2, 2), (1, 1), (1, 1), True) == 0  # bias
    assert batched_images((4, 3, 32, 32), (64, 3, 7, 7), (2, 2), (3, 3), (1, 1), False) == 0  # 3 channels
    assert batched_images((8, 64, 16, 16), (128, 64, 3, 3), (2, 2), (1, 1), (1, 1), False) == 0  # g = 1
    assert batched_images((1, 16, 32, 32), (32, 16, 3, 3), (2, 2), (1, 1), (1, 1), False) == 0  # one image
