"""The mismatches the special-value sweep (`special_kit`) found, each pinned by a focused test: the compiled
result equals eager's at the special value (NaN and inf positions and signs exact, finite values to 1e-4)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tests.compiler import special_kit as sk  # noqa: E402

INF, NAN = float("inf"), float("nan")


def _same(fn: Callable[..., object], *args: torch.Tensor, weight: torch.Tensor | None = None, grad: bool = True
          ) -> None:
    """fn compiled with nprof equals eager on `args`: each output, and (`grad`) each float input's gradient of
    the weighted sum of the first output (`weight`, else ones)."""
    torch._dynamo.reset()
    e_args = [a.clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    d_args = [a.clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    want, got = fn(*e_args), torch.compile(fn, backend="nprof")(*d_args)
    want_l, got_l = sk.listed(want), sk.listed(got)
    for g, w in zip(got_l, want_l, strict=True):
        assert [c for c, _ in sk.compare(g, w) if c != "zero-sign"] == [], sk.compare(g, w)
    if not grad:
        return
    w = torch.ones_like(want_l[0]) if weight is None else weight
    (want_l[0] * w).sum().backward()
    (got_l[0] * w).sum().backward()
    for a, b in zip(e_args, d_args, strict=True):
        if a.requires_grad:
            assert [c for c, _ in sk.compare(b.grad, a.grad) if c != "zero-sign"] == [], sk.compare(b.grad, a.grad)


def _row(*values: float) -> torch.Tensor:
    """The values followed by normal ones, 64 in all (eager's vectorised kernels throughout)."""
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    x[: len(values)] = torch.tensor(values)
    return x


def test_gelu_at_infinities_and_above_half_float_max_equals_eager() -> None:
    """Eager's gelu is NaN at +-inf and inf above FLT_MAX / 2 (its product overflows); the activation alone gave
    inf at +inf and 3e38 at 3e38."""
    x = _row(INF, -INF, 3e38, 1.7e38, 1.71e38, -3e38, NAN, 1e-40)
    _same(F.gelu, x)
    assert torch.compile(F.gelu, backend="nprof")(x)[:5].isnan().tolist() == [True, True, False, False, False]


def test_rsqrt_and_sqrt_keep_the_sign_of_minus_zero() -> None:
    """rsqrt(-0.0) = -inf and sqrt's gradient at -0.0 is -inf, as eager: the activation's bias add (-0 + 0 = +0)
    gave +inf. The bias is now -0.0 (x + -0.0 = x for every x)."""
    x = _row(-0.0, 0.0, -0.0, 4.0).abs() * torch.tensor([1.0] * 64).index_fill(0, torch.tensor([0, 2]), -1.0)
    assert x[0].item() == 0.0 and torch.signbit(x[0])
    _same(torch.rsqrt, x)
    _same(torch.sqrt, x)
    _same(lambda x: x**-0.5, x)
    assert torch.compile(torch.rsqrt, backend="nprof")(x)[:2].tolist() == [-INF, INF]


@pytest.mark.parametrize("divisor", ["scalar", "tensor"])
def test_fmod_takes_the_sign_of_the_dividend(divisor: str) -> None:
    """torch.fmod truncates (the result has the dividend's sign); it was lowered as the floored mod of
    torch.remainder (the divisor's sign): wrong for every negative operand, special or not."""
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(4, 16, generator=gen) * 4
    a.view(-1)[:4] = torch.tensor([INF, -INF, NAN, -0.0])
    b = torch.randn(4, 16, generator=gen) if divisor == "tensor" else 1.5
    _same(lambda a: (torch.fmod(a, b), torch.remainder(a, b), a % 1.5), a)


@pytest.mark.parametrize("value", [INF, -INF, NAN])
def test_max_pool2d_gradient_of_an_inf_or_nan_output_gradient_stays_where_eager_puts_it(value: float) -> None:
    """The backward added ``grad * (index == tap)`` into every tap: 0 x inf = NaN at the inputs no window took,
    where eager's scatter leaves 0."""
    x = torch.randn(2, 2, 8, 8, generator=torch.Generator().manual_seed(2))
    w = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(3))
    w[0, 1, 2, 3] = value
    w[1, 0, 0, 0] = value
    _same(lambda x: F.max_pool2d(x, 3, 2, 1), x, weight=w)


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_attention_with_a_nan_runs_eagerly_with_a_warning(where: str) -> None:
    """Eager's flash kernel gives a 0 row (lse 0) for a query row holding a NaN; the device kernel gave NaN. A
    non-finite attention result or log-sum-exp now runs the call eagerly, with a warning naming the op."""
    gen = torch.Generator().manual_seed(4)
    qkv = [torch.randn(1, 2, 8, 8, generator=gen) for _ in range(3)]
    qkv["qkv".index(where)][0, 1, 2, 3] = NAN
    with pytest.warns(UserWarning, match="scaled_dot_product_attention"):
        _same(F.scaled_dot_product_attention, *qkv)


def test_layer_norm_gradient_with_an_inf_weight_is_eager_nan_row() -> None:
    """An -inf weight: eager's backward kernel makes the whole row NaN; torch's decomposition made -inf at some
    inputs (its ``x_hat * sum(dy * w * x_hat)`` term); the backend decomposes it by eager's formula."""
    gen = torch.Generator().manual_seed(5)
    x, w, b = torch.randn(4, 16, generator=gen), torch.randn(16, generator=gen), torch.randn(16, generator=gen)
    w[2] = -INF
    _same(lambda x, w, b: F.layer_norm(x, (16,), w, b), x, w, b)


def test_std_of_values_near_1e30_is_finite_as_eager() -> None:
    """Eager's std sums in float64; torch's decomposition sqrt(var(x)) squared 1e30 into inf in float32."""
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(6))
    x[1, 3], x[2, :4] = 1e30, -3e37
    _same(lambda x: (x.std(1), x.std(0, keepdim=True), x.std()), x)
    assert torch.compile(lambda x: x.std(1), backend="nprof")(x).isfinite().all()


def test_remainder_and_fmod_are_nan_where_the_quotient_overflows() -> None:
    """Eager's vectorised kernels compute a - floor(a / b) * b: NaN wherever a / b overflows (1.0 % 1e-40); the
    exact ALU mod gave the true small remainder."""
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(4, 16, generator=gen), torch.randn(4, 16, generator=gen)
    b.view(-1)[:6] = torch.tensor([1e-40, 1e-44, -1e-41, 1e-39, 3e-39, 1e-45])
    a.view(-1)[6] = 1e38
    _same(lambda a, b: (torch.remainder(a, b), torch.fmod(a, b), a % 1e-39), a, b, grad=False)


def test_causal_attention_gradient_of_an_inf_output_gradient_runs_eagerly() -> None:
    """An inf in the output gradient: the backward kernel's P.T @ dO put 0 x inf = NaN into dV at keys the causal
    mask hides from that query (eager's kernel skips those blocks). Non-finite gradients now run the backward
    eagerly, with a warning."""
    gen = torch.Generator().manual_seed(8)
    qkv = [torch.randn(1, 2, 8, 8, generator=gen) for _ in range(3)]
    w = torch.randn(1, 2, 8, 8, generator=gen)
    w[0, 0, 1, 2] = INF
    with pytest.warns(UserWarning, match="scaled_dot_product_attention"):
        _same(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), *qkv, weight=w)


@pytest.mark.parametrize("cols", [640, 1100])
def test_layer_norm_over_more_than_512_columns_compiles_and_equals_eager(cols: int) -> None:
    """A row of more than 512 elements (BERT/GPT-2's 768) raised an internal compiler error (BN_STATS reads at
    most 512 elements per partition): the statistics are now BN_STATS chunks aggregated by one BN_AGGR. Found by
    the sweep's large cases (``bench/special_values.py --large``: big_norms)."""
    gen = torch.Generator().manual_seed(9)
    x, w, b = torch.randn(130, cols, generator=gen) * 3 + 1, torch.randn(cols, generator=gen), torch.randn(cols,
                                                                                                           generator=gen)
    x[5, cols - 1] = 40.0  # in the last chunk: the statistics must see it
    _same(lambda x, w, b: F.layer_norm(x, (cols,), w, b), x, w, b)


def test_cumsum_whose_scan_order_overflows_runs_eagerly() -> None:
    """Eager's cumsum adds in sequence: 3e38, then -3e38, cancel. The doubling scan added 3e38 + 3e38 = inf and
    then inf - inf = NaN (rows of 576 in the sweep's big_cumsum). A non-finite cumsum now runs eagerly, warned."""
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(10))
    x[0, :4] = torch.tensor([3e38, -3e38, 3e38, -3e38])
    with pytest.warns(UserWarning, match="cumsum"):
        _same(lambda x: x.cumsum(1), x)
