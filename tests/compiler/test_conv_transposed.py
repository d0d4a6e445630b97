"""The transposed-output convolution kernels (`kernels.conv_transposed`) against eager torch and against the plain
kernels (`conv_transposed.TRANSPOSED` off), forward and backward, on fixed and random geometries."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import nprof.compiler.lowerings  # noqa: E402, F401  (registers every lowering, ops_conv among them)
from nprof.compiler import STATS  # noqa: E402
from nprof.compiler.kernels import conv_transposed  # noqa: E402

# (in channels, out channels, kernel, stride, padding, dilation, bias, image size, images)
FIXED = [
    (64, 64, 3, 1, 1, 1, False, 8, 4),  # a resnet stage of 64 channels: forward and input gradient transposed
    (5, 64, 1, 1, 0, 1, True, 9, 2),  # 1x1 (one tap, not stacked): forward m = 64, input gradient m = 5
    (48, 40, 3, 1, 2, 2, True, 6, 2),  # dilated, padding 2
    (3, 48, (3, 2), 1, (1, 0), 1, True, 13, 3),  # rectangular kernel: the input gradient (m = 3) transposed
    (36, 1, 5, 1, 2, 1, False, 10, 2),  # one output channel: the moving operand is one column
    (40, 33, 3, 1, 0, 1, True, 70, 1),  # a 70-wide image: one padded row per chunk of positions
    (64, 128, 3, 2, 1, 1, False, 8, 4),  # strided, 64 channels in: the input gradient by phase, transposed
    (32, 64, 1, 2, 0, 1, False, 8, 8),  # a resnet downsample (1x1, stride 2): one phase of four reached
    (10, 20, 3, 3, 0, 1, True, 11, 2),  # stride 3, no padding: phases of 4 and 3 positions per axis
    (12, 24, 3, 2, 2, 2, False, 9, 3),  # strided and dilated
    (40, 30, 3, 2, 1, 1, False, 9, 2),  # strided (the forward is not transposed; the input gradient's phases are)
    (16, 32, 3, 2, 1, 1, False, 32, 2),  # strided with phases of 512 positions: not transposed
    (130, 20, 3, 2, 1, 1, True, 2, 8),  # resnet18's last stage at 32x32: 1x1 outputs, 8 images per matmul
    (40, 8, 3, 2, 1, 1, False, 20, 7),  # strided, 10x10 outputs: 5 images per matmul, then 2
]
TRANSPOSED_FIXED = 10  # the first fixed geometries run the transposed kernels (forward or input gradient)


def _random_geometries(count: int, seed: int) -> list[tuple]:
    """Random 2-D convolutions: 1..64 channels in and out, kernels 1..5, strides 1..2, padding and dilation."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        k, d = rng.choice((1, 2, 3, 5)), rng.choice((1, 1, 2))
        s, p, size = rng.choice((1, 1, 2)), rng.randint(0, k // 2 * d), rng.randint(3, 14)
        if size + 2 * p < d * (k - 1) + 1:
            continue  # no output
        out.append((rng.randint(1, 64), rng.randint(1, 64), k, s, p, d, rng.random() < 0.5, size, rng.randint(1, 3)))
    return out


GEOMETRIES = FIXED + _random_geometries(6, seed=27)


def _run(geometry: tuple, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(output, input gradient, weight gradient, bias gradient or None) of nprof's compiled convolution for the
    output gradient `w`."""
    cin, cout, k, s, p, d, bias, _, _ = geometry
    torch._dynamo.reset()
    torch.manual_seed(0)
    module = torch.nn.Conv2d(cin, cout, k, s, p, d, bias=bias)
    xi = x.clone().requires_grad_(True)
    out = torch.compile(module, backend="nprof")(xi)
    (out * w).sum().backward()
    b = module.bias.grad if module.bias is not None else None
    return out.detach(), xi.grad, module.weight.grad, b


def _eager(geometry: tuple, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    cin, cout, k, s, p, d, bias, _, _ = geometry
    torch.manual_seed(0)
    module = torch.nn.Conv2d(cin, cout, k, s, p, d, bias=bias)
    xi = x.clone().requires_grad_(True)
    out = module(xi)
    (out * w).sum().backward()
    b = module.bias.grad if module.bias is not None else None
    return out.detach(), xi.grad, module.weight.grad, b


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[str(g) for g in GEOMETRIES])
def test_transposed_core_matches_eager_and_the_plain_core(geometry: tuple, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:  # fmt: skip
    """Outputs and the three gradients equal eager's (fp32: tolerance relative to the largest element, each
    weight gradient sums up to thousands of products in another order) with the transposed core on and off,
    and the two agree with each other as closely."""
    cin, _, _, _, _, _, _, size, images = geometry
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(images, cin, size, size, generator=gen)
    expected = _eager(geometry, x, torch.zeros(1))
    w = torch.randn(expected[0].shape, generator=gen)
    expected = _eager(geometry, x, w)
    calls = {"n": 0}
    real = {"transposed_rows": conv_transposed.transposed_rows}

    def counting(name: str) -> object:
        def counted(*args: object) -> object:
            calls["n"] += 1
            return real[name](*args)  # type: ignore[operator]

        return counted

    for name in real:
        monkeypatch.setattr(conv_transposed, name, counting(name))
    got = {}
    for on in (False, True):
        monkeypatch.setattr(conv_transposed, "TRANSPOSED", on)
        monkeypatch.setenv("NPROF_CACHE", str(tmp_path / str(on)))  # a fresh cache: both lowerings run
        STATS.reset()
        got[on] = _run(geometry, x, w)
        if not on:
            assert calls["n"] == 0
    for name, e, a, b in zip(("output", "input grad", "weight grad", "bias grad"), expected, got[False], got[True],
                             strict=True):  # fmt: skip
        if e is None:
            continue
        tol = 2e-6 * max(1.0, e.abs().max().item()) * max(1, size * images)
        torch.testing.assert_close(a, e, rtol=1e-4, atol=tol, msg=f"{name}, plain core")
        torch.testing.assert_close(b, e, rtol=1e-4, atol=tol, msg=f"{name}, transposed core")
        torch.testing.assert_close(b, a, rtol=1e-4, atol=tol, msg=f"{name}, transposed vs plain")
    if geometry in FIXED[:TRANSPOSED_FIXED]:
        assert calls["n"] > 0


def test_transposed_core_halves_tensor_engine_time_of_a_64_channel_convolution(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:  # fmt: skip
    """A 3x3 convolution of 64 channels in and out on 8x8 images (resnet18's first stage, batch 4): the
    transposed core's forward matmuls take less TensorE time than the plain core's (max(64, m) cycles per 128
    positions instead of one per position)."""
    busy = {}
    for on in (False, True):
        monkeypatch.setattr(conv_transposed, "TRANSPOSED", on)
        monkeypatch.setenv("NPROF_CACHE", str(tmp_path / str(on)))
        torch._dynamo.reset()
        STATS.reset()
        module = torch.nn.Conv2d(64, 64, 3, 1, 1, bias=False)
        with torch.no_grad():
            torch.compile(module, backend="nprof")(torch.randn(4, 64, 8, 8))
        ins = next(iter(STATS.last_profile.values())).instructions
        busy[on] = sum(d for d, op in zip(ins["duration"].to_pylist(), ins["opcode"].to_pylist(), strict=True)
                       if op == "MATMUL")  # fmt: skip
    assert busy[True] < 0.75 * busy[False], busy
