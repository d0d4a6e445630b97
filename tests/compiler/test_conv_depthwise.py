"""The depthwise convolution kernel (`nprof.compiler.kernels.conv_depthwise`) held to eager and to the
decomposition it replaces (`nprof.compiler.grouped_conv`, switched back on with ``KERNEL = False``) on random
geometries: output, input gradient, weight gradient and bias gradient; its row bands (small budgets); inf and
NaN in the input, the output gradient or the weights (the conv_check contract: the call runs eagerly and
equals eager, NaN and inf at the same places); its tiling helpers against brute force."""

from __future__ import annotations

import random
import warnings

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS, grouped_conv, ops_conv  # noqa: E402
from nprof.compiler.kernels import conv_depthwise as dw  # noqa: E402
from tests.compiler.test_conv_nonfinite import assert_same  # noqa: E402

F = torch.nn.functional


def _geometries(seed: int, count: int) -> list[tuple]:
    """`count` random valid depthwise geometries: (N, C, H, W, (KH, KW), stride, padding, dilation, bias)."""
    rng = random.Random(seed)
    out: list[tuple] = []
    while len(out) < count:
        n, c = rng.randint(1, 5), rng.choice([2, 3, 8, 16, 48, 130])  # C = 1 is groups = 1: the ordinary kernels
        h, w = rng.randint(1, 13), rng.randint(1, 13)
        k = (rng.choice([1, 2, 3, 5, 7]), rng.choice([1, 3, 5]))
        s, d = (rng.randint(1, 3), rng.randint(1, 2)), (rng.randint(1, 2), rng.randint(1, 2))
        p = (rng.randint(0, k[0]), rng.randint(0, k[1]))
        if all((size + 2 * pp - dd * (kk - 1) - 1) // ss + 1 >= 1
               for size, pp, dd, kk, ss in zip((h, w), p, d, k, s, strict=True)):  # fmt: skip
            out.append((n, c, h, w, k, s, p, d, rng.random() < 0.5))
    return out


GEOMETRIES = [
    (8, 96, 32, 32, (3, 3), (1, 1), (1, 1), (1, 1), False),  # MobileNetV2's 3x3 at 32x32
    (3, 16, 9, 9, (3, 3), (2, 2), (1, 1), (1, 1), False),  # strided, odd size
    (2, 8, 8, 8, (7, 7), (1, 1), (3, 3), (1, 1), True),  # ConvNeXt's 7x7
    *_geometries(11, 7),
]


def _run(geo: tuple, compiled: bool, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
         g: torch.Tensor) -> list[torch.Tensor]:  # fmt: skip
    """(output, input gradient, weight gradient[, bias gradient]) of one depthwise convolution."""
    _, c, _, _, _, s, p, d, _ = geo

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=c)

    torch._dynamo.reset()
    f = torch.compile(fn, backend="nprof") if compiled else fn
    xx, ww = x.clone().requires_grad_(), weight.clone().requires_grad_()
    bb = bias.clone().requires_grad_() if bias is not None else None
    out = f(xx, ww, bb)
    out.backward(g)
    return [out.detach(), xx.grad, ww.grad] + ([bb.grad] if bb is not None else [])


def _operands(geo: tuple, seed: int) -> tuple:
    n, c, h, w, k, s, p, d, has_bias = geo
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=gen)
    weight = torch.randn(c, 1, *k, generator=gen)
    bias = torch.randn(c, generator=gen) if has_bias else None
    g = torch.randn(F.conv2d(x, weight, None, s, p, d, c).shape, generator=gen)
    return x, weight, bias, g


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the depthwise lowerings `ops_conv` ran (forward, backward)."""
    ran: list[str] = []
    for name in ("_depthwise_forward", "_depthwise_backward"):
        real = getattr(ops_conv, name)

        def wrapped(*args: object, _real: object = real, _name: str = name) -> object:
            ran.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(ops_conv, name, wrapped)
    return ran


@pytest.mark.parametrize("geo", GEOMETRIES, ids=[str(g[:8]) for g in GEOMETRIES])
def test_kernel_equals_eager_and_the_decomposition(geo: tuple, spy: list[str], monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: object) -> None:  # fmt: skip
    """Every result within 1e-4 of eager's and of the decomposition's, on the device, no fallback; the kernel
    (not the decomposition) ran forward and backward."""
    monkeypatch.setenv("NPROF_CACHE", str(tmp_path))
    x, weight, bias, g = _operands(geo, 3)
    assert dw.supported(tuple(x.shape), tuple(weight.shape), geo[5], geo[6], geo[7])
    want = _run(geo, False, x, weight, bias, g)
    STATS.reset()
    got = _run(geo, True, x, weight, bias, g)
    assert STATS.fallbacks == 0 and sorted(set(spy)) == ["_depthwise_backward", "_depthwise_forward"]
    monkeypatch.setattr(grouped_conv, "KERNEL", False)
    spy.clear()
    old = _run(geo, True, x, weight, bias, g)
    assert not spy
    for a, b, c in zip(got, want, old, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("budget", [1500, 700])  # one image a piece; bands of rows
def test_row_bands_equal_eager(budget: int, spy: list[str], monkeypatch: pytest.MonkeyPatch,
                               tmp_path: object) -> None:  # fmt: skip
    """With a small SBUF budget the pieces are one image and a band of rows (each reading its halo rows):
    the results do not change."""
    monkeypatch.setenv("NPROF_CACHE", str(tmp_path))
    monkeypatch.setattr(dw, "BUDGET", budget)
    monkeypatch.setattr(dw, "PIECE", budget)
    geo = (5, 50, 17, 15, (5, 3), (2, 1), (2, 1), (1, 2), True)  # two image slots: two rounds and one more
    x, weight, bias, g = _operands(geo, 4)
    gm = dw.geometry(tuple(x.shape), tuple(weight.shape), *geo[5:8])
    assert all(len(dw.pieces(gm, kind, 2)) > 1 for kind in ("forward", "input", "weight"))
    want = _run(geo, False, x, weight, bias, g)
    got = _run(geo, True, x, weight, bias, g)
    assert spy
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("where", ["x", "g", "w"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_operands_give_eager_results(where: str, value: float, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: object) -> None:  # fmt: skip
    """An inf or NaN in the input, the output gradient (at a corner: its taps read the padding) or a weight:
    every result equals eager's, NaN and inf at the same positions; the call ran eagerly, saying so."""
    monkeypatch.setenv("NPROF_CACHE", str(tmp_path))
    geo = (5, 40, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1), True)
    x, weight, bias, g = _operands(geo, 5)
    {"x": x, "g": g, "w": weight}[where].view(-1)[37] = value
    want = _run(geo, False, x, weight, bias, g)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = _run(geo, True, x, weight, bias, g)
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)
    said = [str(m.message) for m in seen if "nprof" in str(m.message)]
    assert said and all("convolution" in m and "ran eagerly" in m for m in said)


def test_finite_calls_stay_compiled(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPROF_CACHE", str(tmp_path))
    geo = (2, 8, 6, 6, (3, 3), (1, 1), (1, 1), (1, 1), True)
    x, weight, bias, g = _operands(geo, 6)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _run(geo, True, x, weight, bias, g)
    assert not [m for m in seen if "nprof" in str(m.message)]


def test_span_equals_brute_force() -> None:
    """`span` (closed form) against the enumeration of every t it describes."""
    rng = random.Random(7)
    for _ in range(2000):
        acc, src = sorted(rng.sample(range(-5, 20), 2)), sorted(rng.sample(range(-5, 20), 2))
        amap, smap = (rng.randint(1, 3), rng.randint(-6, 6)), (rng.randint(1, 3), rng.randint(-6, 6))
        ts = [t for t in range(-20, 40) if acc[0] <= amap[0] * t + amap[1] < acc[1]
              and src[0] <= smap[0] * t + smap[1] < src[1]]  # fmt: skip
        a, s, count = dw.span(tuple(acc), amap, tuple(src), smap)  # type: ignore[arg-type]
        assert count == len(ts)
        if ts:
            assert (a, s) == (amap[0] * ts[0] + amap[1], smap[0] * ts[0] + smap[1])


def test_pieces_and_groups_cover_everything_once() -> None:
    """Every (image, channel) pair in exactly one partition of one group; every image round and row in one
    piece; source rows of a band hold every row its taps read."""
    for n, c in ((1, 1), (8, 96), (5, 40), (3, 130), (7, 3), (2, 300)):
        seen = [(grp.img0 + p // grp.cc + i * grp.step, grp.c0 + p % grp.cc)
                for grp in dw.groups(n, c) for p in range(grp.parts) for i in range(grp.rounds)]  # fmt: skip
        assert sorted(seen) == [(i, ch) for i in range(n) for ch in range(c)]
    gm = dw.geometry((2, 4, 30, 9), (4, 1, 5, 3), (2, 1), (3, 1), (2, 1))
    for kind in ("forward", "input", "weight"):
        for budget in (dw.BUDGET, 900):
            rows = dw._sizes(gm, kind)[0]
            band = dw.band_rows(gm, kind, 1, budget)
            assert band > 0
            got = [(r, i) for i0, ni, r0, r1 in _pieces(gm, kind, 3, budget) for i in range(i0, i0 + ni)
                   for r in range(r0, r1)]  # fmt: skip
            assert sorted(got) == [(r, i) for r in range(rows) for i in range(3)]


def _pieces(gm: dw.Geometry, kind: str, rounds: int, budget: int) -> list:
    old = dw.BUDGET
    dw.BUDGET = budget
    try:
        return dw.pieces(gm, kind, rounds)
    finally:
        dw.BUDGET = old


def test_what_is_left_to_the_decomposition() -> None:
    """Channel multipliers, other groups, fp64 and rows wider than a PSUM bank stay on the decomposition."""
    geo = ((1, 1), (1, 1), (1, 1))
    assert dw.supported((2, 4, 5, 5), (4, 1, 3, 3), *geo)
    assert not dw.supported((2, 4, 5, 5), (8, 1, 3, 3), *geo)  # channel multiplier 2
    assert not dw.supported((2, 4, 5, 5), (4, 2, 3, 3), *geo)  # two channels a group
    assert not dw.supported((2, 4, 5, 5), (4, 1, 3, 3), *geo, ("float64", "float64"))
    assert not dw.supported((1, 4, 2, 600), (4, 1, 1, 1), (1, 1), (0, 0), (1, 1))
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 1, 3, 3)
    assert grouped_conv.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 4) is NotImplemented
    assert grouped_conv.convolution(x, torch.randn(4, 2, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0],
                                    2) is not NotImplemented  # fmt: skip


def test_bands_reading_only_padding_equal_eager(spy: list[str], monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: object) -> None:  # fmt: skip
    """Padding wider than the image in bands of a few rows: whole pieces read no input row (their outputs
    are the bias; their gradient pieces add nothing)."""
    monkeypatch.setenv("NPROF_CACHE", str(tmp_path))
    monkeypatch.setattr(dw, "BUDGET", 200)
    monkeypatch.setattr(dw, "PIECE", 200)
    geo = (2, 6, 4, 5, (1, 1), (1, 1), (4, 2), (1, 1), True)
    x, weight, bias, g = _operands(geo, 8)
    gm = dw.geometry(tuple(x.shape), tuple(weight.shape), *geo[5:8])
    assert dw.source_rows(gm, "forward", *dw.pieces(gm, "forward", 1)[0][2:]) == (0, 0)
    want = _run(geo, False, x, weight, bias, g)
    got = _run(geo, True, x, weight, bias, g)
    assert spy
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
