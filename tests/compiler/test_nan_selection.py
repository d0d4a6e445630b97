"""Selections (max pooling and its indices, max/argmax along a dim, flip, sign) and the gradients of hardtanh,
hardswish and elu on inputs holding NaN and +-inf equal eager's, forward and backward, NaN exactly where eager's.

Eager's semantics held here: max_pool2d takes a NaN as a window's maximum and the *last* NaN of the window as its
index (``val > max || isnan(val)``), its first real input when all are -inf; max.dim/argmax the *first* NaN;
where x is NaN, hardtanh_backward (relu6) gives 0, hardswish's and elu's NaN (their vectorised kernels); sign is
0 at NaN; flip moves inf/NaN like any value. Before the fix the pool's indices skipped NaNs (its backward sent the
gradient of a NaN window to another input) and pointed into the padding for all -inf windows, argmax returned
8388608, torch's decompositions of the three gradients did the opposite of eager at NaN, sign (an activation)
gave NaN, and flip (an anti-identity matmul) spread one inf as NaN over whole rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _holes(shape: tuple[int, ...], kind: str, seed: int = 0) -> torch.Tensor:
    """Random normal values with NaN (or +inf, -inf, +inf) at the first, a middle and the last element, and
    NaN at a few random positions (several in one pooling window sometimes)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    flat = x.view(-1)
    n = flat.numel()
    if kind == "nan":
        picks = torch.randperm(n, generator=gen)[: max(3, n // 16)]
        flat[picks] = float("nan")
        flat[[0, n // 3, n - 1]] = float("nan")
    else:
        flat[[0, n // 3, n - 1]] = torch.tensor([float("inf"), float("-inf"), float("inf")])
    return x


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal with NaN where eager has NaN, infinities equal, finite values to 1e-4."""
    g, w = got.detach().double().numpy(), want.detach().double().numpy()
    assert g.shape == w.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    fin = np.isfinite(w)
    np.testing.assert_array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)])
    np.testing.assert_allclose(g[fin], w[fin], rtol=1e-4, atol=1e-5)


def _check(fn: Callable[[torch.Tensor], object], x: torch.Tensor, grad: bool = True) -> None:
    """fn compiled with nprof equals eager on `x`: every output, and the input gradient of a random weighting
    of the float outputs."""
    torch._dynamo.reset()
    xe, xd = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
    want, got = fn(xe), torch.compile(fn, backend="nprof")(xd)
    want_l = list(want) if isinstance(want, tuple) else [want]
    got_l = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(got_l, want_l, strict=True):
        _same(g, w)
    if not grad:
        return
    gen = torch.Generator().manual_seed(1)
    pairs = [(g, w) for g, w in zip(got_l, want_l, strict=True) if w.dtype.is_floating_point]
    weights = [torch.randn(w.shape, generator=gen) for _, w in pairs]
    sum((w * k).sum() for (_, w), k in zip(pairs, weights, strict=True)).backward()
    sum((g * k).sum() for (g, _), k in zip(pairs, weights, strict=True)).backward()
    _same(xd.grad, xe.grad)


@pytest.mark.parametrize("kind", ["nan", "inf"])
@pytest.mark.parametrize("args", [(2,), (3, 2, 1)], ids=["k2", "k3s2p1"])
def test_max_pool2d_with_nan_and_inf_equals_eager(kind: str, args: tuple[int, ...]) -> None:
    """Values, indices (the last NaN of a window) and the input gradient."""
    _check(lambda x: F.max_pool2d(x, *args, return_indices=True), _holes((2, 3, 8, 8), kind))


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_max_dim_and_argmax_with_nan_and_inf_equal_eager(kind: str) -> None:
    """The first NaN of a row is its max and argmax; the values' gradient goes to it."""
    x = _holes((6, 16), kind)
    _check(lambda x: x.max(-1), x)
    _check(lambda x: x.argmax(0), x, grad=False)


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_relu6_and_hardtanh_gradients_with_nan_equal_eager(kind: str) -> None:
    """0 gradient where x is NaN, as eager's vectorised kernel (64 elements: whole vectors)."""
    x = _holes((4, 16), kind)
    _check(F.relu6, x)
    _check(lambda x: F.hardtanh(x, -0.5, 0.5), x)


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_flip_moves_nan_and_inf_like_any_value(kind: str) -> None:
    """One inf or NaN stays one element (the matmul flip made 21 of 32 elements NaN)."""
    x = _holes((4, 8), kind)
    _check(lambda x: x.flip(-1) * 0.5, x)
    _check(lambda x: torch.maximum(x, x.flip(0, 1)), x)


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_sign_and_abs_gradient_with_nan_equal_eager(kind: str) -> None:
    """torch's sign is 0 at NaN (so abs's gradient is 0 there); the Sign activation gave NaN."""
    x = _holes((4, 16), kind)
    x.view(-1)[5] = 0.0
    _check(lambda x: torch.sign(x) * 3.0, x, grad=False)
    _check(torch.abs, x)


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_hardswish_and_elu_gradients_with_nan_equal_eager(kind: str) -> None:
    """NaN gradient where x is NaN, as eager's vectorised kernels (torch's decompositions passed the gradient)."""
    x = _holes((4, 16), kind)
    _check(F.hardswish, x * 4.0)
    _check(lambda x: F.elu(x, 1.3), x)


@pytest.mark.parametrize("args", [(3, 2, 1, 1), (3, 1, 1, 2), (2, 2, 1, 1)], ids=["k3s2p1", "k3s1p1d2", "k2s2p1"])
def test_max_pool2d_windows_of_only_minus_inf_take_their_first_real_input(args: tuple[int, ...]) -> None:
    """A border window whose real inputs are all -inf: eager's index is its first real input (not a padding
    position: the index was -7 and the gradient lost before the fix)."""
    x = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(3))
    x[0, 0, :4, :4] = float("-inf")
    x[1, 2, 5:, 5:] = float("-inf")
    x[1, 1] = float("-inf")
    _check(lambda x: F.max_pool2d(x, *args, return_indices=True), x)


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_cumsum_keeps_values_before_an_inf_or_nan_finite(kind: str) -> None:
    """Only the elements at and after an inf/NaN are non-finite (the triangular-ones matmul made every element of
    the row NaN); forward and backward (a flipped cumsum)."""
    x = _holes((3, 20), kind)
    _check(lambda x: x.cumsum(-1), x)
    _check(lambda x: x.cumsum(0) * 0.5, x)
