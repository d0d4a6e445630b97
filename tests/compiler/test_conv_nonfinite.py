"""Convolutions of inputs, gradients or weights holding +-inf/NaN: the conv kernels multiply zeros with input
values (block-diagonal and spread stationaries, zero padding), so 0 x inf made NaN at outputs whose windows
never held the inf (384 NaN in one image where eager has 72), and weight gradients summed padding products
eager skips. Every conv kernel's results are checked on the device (`nprof.compiler.conv_check`); a failed
check runs that call eagerly with a warning naming the convolution. Forward and backward equal eager's, NaN
and inf at the same positions, in every kernel family (spread, stacked, images batched on partitions,
channel-partition direct, the 7x7 stride-2 stem, im2col)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

# name: (input shape, output channels, kernel, stride, padding)
CASES = {
    "spread": ((4, 3, 16, 16), 8, 3, 1, 1),
    "spread16": ((4, 16, 8, 8), 16, 3, 1, 1),
    "spread1x1": ((4, 16, 8, 8), 16, 1, 1, 0),
    "batched": ((4, 16, 8, 8), 32, 3, 2, 1),
    "direct": ((4, 64, 8, 8), 64, 3, 1, 1),
    "stem": ((2, 3, 32, 32), 16, 7, 2, 3),
}


def assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal to eager: NaN, +inf and -inf at the same positions, the finite values within 1e-4."""
    g, w = got.detach().numpy(), want.detach().numpy()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w))
    np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w))
    fin = np.isfinite(w)
    np.testing.assert_allclose(g[fin], w[fin], rtol=1e-4, atol=1e-4)


def _step(case: tuple, where: str, value: float, cache: str) -> tuple[list, list, list]:
    """Eager and compiled (output, input gradient, weight gradient) of one convolution with `value` put into
    one element of the input (`where` "x") or of the output gradient ("g", at a corner: its window reads the
    padding); and the warnings of the compiled step."""
    shape, oc, k, s, p = case
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen)
    w = torch.randn(oc, shape[1], k, k, generator=gen) * 0.3

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, stride=s, padding=p)

    g = torch.randn(*fn(x, w).shape, generator=gen)
    if where == "x":
        x[1, 0, 2, 3] = value
    elif where == "g":
        g[1, 0, 0, 0] = value
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="nprof", options={"cache_dir": cache})
    res = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for f in (fn, compiled):
            xx, ww = x.clone().requires_grad_(), w.clone().requires_grad_()
            out = f(xx, ww)
            out.backward(g)
            res.append([out, xx.grad, ww.grad])
    return res[0], res[1], [str(m.message) for m in seen if "nprof" in str(m.message)]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("where", ["x", "g"])
def test_a_non_finite_input_or_gradient_gives_eager_results(name: str, where: str, tmp_path: object) -> None:
    """Output, input and weight gradients equal eager's with an inf in the input (or in the output gradient);
    the call whose conv results were non-finite ran eagerly, saying so and naming the convolution. On the old
    code: 384 (spread) or 192 (batched) wrong outputs, 21 wrong weight-gradient elements of the stem."""
    want, got, said = _step(CASES[name], where, float("inf"), str(tmp_path))
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)
    assert said and all("convolution" in m and "ran eagerly" in m for m in said)


def test_nan_too_and_finite_calls_stay_compiled(tmp_path: object) -> None:
    """A NaN behaves as an inf; a finite step equals eager's and runs compiled, without a warning."""
    want, got, said = _step(CASES["spread"], "x", float("nan"), str(tmp_path))
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)
    assert said
    want, got, said = _step(CASES["spread"], "none", 0.0, str(tmp_path))
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)
    assert not said


def test_the_im2col_lowering_is_checked_too(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the direct and spread kernels off, the im2col lowering's weight gradient sums the padding products
    of a gradient inf at a corner (NaN where eager is finite): checked after its matmuls, so the step equals
    eager's."""
    from nprof.compiler import ops_conv

    monkeypatch.setattr(ops_conv, "direct_supported", lambda *a, **k: False)
    monkeypatch.setattr(ops_conv, "spread_factor", lambda *a, **k: 1)
    monkeypatch.setattr(ops_conv, "spread_backward", lambda *a, **k: False)
    for where in ("g", "x"):
        want, got, said = _step(((2, 8, 8, 8), 8, 3, 1, 1), where, float("inf"), str(tmp_path))
        for a, b in zip(got, want, strict=True):
            assert_same(a, b)
        assert said


def test_a_cnn_training_step_with_an_inf_in_one_image_equals_eager(tmp_path: object) -> None:
    """Three convolutions with ReLUs between (the spread, batched and stacked kernels), an inf in one image:
    output and every parameter gradient equal eager's (the old code: all 128 non-finite outputs wrong, NaN
    against eager's inf); a finite step after it equals eager's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 1, 1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, 2, 1),
                                torch.nn.ReLU(), torch.nn.Conv2d(16, 8, 3, 1, 1))  # fmt: skip
    compiled = torch.compile(model, backend="nprof", options={"cache_dir": str(tmp_path)})
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    for value in (float("inf"), 0.5):
        x[1, 0, 5, 5] = value
        res = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for f in (model, compiled):
                model.zero_grad()
                out = f(x)
                out.square().mean().backward()
                res.append([out.detach()] + [p.grad.clone() for p in model.parameters()])
        for got, want in zip(res[1], res[0], strict=True):
            assert_same(got, want)
