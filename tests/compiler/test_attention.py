"""scaled_dot_product_attention through the fused flash kernels, and the whole-graph eager fallback."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from nprof.compiler import STATS  # noqa: E402
from nprof.errors import UnsupportedOpError  # noqa: E402
from tests.compiler.conftest import check_fn  # noqa: E402


def _qkv(b: int, h: int, length: int, d: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, length, d, generator=gen, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_forward_and_gradients_cross_tiles(causal: bool) -> None:
    # 136 queries/keys: two 128-row tiles, so the online softmax and the causal tile skip are exercised
    STATS.reset()
    check_fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), *_qkv(1, 2, 136, 16))
    assert len(STATS.last_profile) == 2  # forward and backward ran on the device


def test_sdpa_boolean_and_additive_masks_and_scale() -> None:
    q, k, v = _qkv(2, 2, 12, 8, seed=1)
    keep = torch.rand(12, 12, generator=torch.Generator().manual_seed(3)) > 0.4
    keep.fill_diagonal_(True)
    check_fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, keep)
    bias = torch.randn(2, 1, 12, 12, generator=torch.Generator().manual_seed(4))
    check_fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3), q, k, v, bias)


def _fully_masked_rows(length: int, keys: int) -> torch.Tensor:
    """A boolean mask (True: attend) whose row 0 attends nothing, row 1 only keys of the last 128-key tile,
    row 2 only keys of the first; the others about half the keys."""
    keep = torch.rand(length, keys, generator=torch.Generator().manual_seed(8)) > 0.5
    keep[0] = False
    keep[1, :128], keep[1, 130] = False, True
    keep[2, 128:], keep[2, 5] = False, True
    return keep


@pytest.mark.parametrize("fill", ["bool", "-inf", "finfo.min"])
def test_sdpa_fully_masked_rows_as_eager(fill: str) -> None:
    """Left padding makes query rows that attend to nothing. torch's CPU flash kernel gives such a row (all
    scores -inf) output 0, log-sum-exp 0 and zero gradients; a row masked by finfo.min (Hugging Face's fill,
    finite) softmaxes uniformly. The device did NaN in both cases (Llama with a padded batch: loss NaN)."""
    q = torch.randn(1, 2, 6, 8, generator=torch.Generator().manual_seed(9), requires_grad=True)
    k, v = (torch.randn(1, 2, 136, 8, generator=torch.Generator().manual_seed(s), requires_grad=True)
            for s in (10, 11))  # fmt: skip
    keep = _fully_masked_rows(6, 136)
    mask = keep if fill == "bool" else torch.zeros(6, 136).masked_fill(~keep, float(fill) if fill == "-inf"
                                                                       else torch.finfo(torch.float32).min)  # fmt: skip
    STATS.reset()
    check_fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask)
    assert len(STATS.last_profile) == 2  # forward and backward ran on the device

    def stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> tuple:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=m)

    if fill != "bool":  # the saved log-sum-exp itself (what the backward reads), 0 on the empty row
        check_fn(stats, q.detach(), k.detach(), v.detach(), mask, grad=False)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_grouped_query_heads(causal: bool) -> None:
    """enable_gqa: 4 query heads over 2 key/value heads; outputs and q/k/v gradients as eager's."""
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 20, 8, generator=gen, requires_grad=True)
    k, v = (torch.randn(2, 2, 20, 8, generator=gen, requires_grad=True) for _ in range(2))
    check_fn(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True), q, k, v)


def test_sdpa_attention_dropout_draws_eagers_mask() -> None:
    """dropout_p > 0 in training: eager CPU runs SDPA's math path (its flash kernel refuses dropout), and so does
    the compiled graph, with the mask eager draws for the same seed: same outputs and gradients."""
    torch._dynamo.reset()
    q, k, v = _qkv(2, 2, 16, 8, seed=2)
    qe, ke, ve = (t.detach().clone().requires_grad_(True) for t in (q, k, v))

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True)

    compiled = torch.compile(fn, backend="nprof")
    torch.manual_seed(3)
    got = compiled(q, k, v)
    torch.manual_seed(3)
    want = fn(qe, ke, ve)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(fn(qe, ke, ve), want)  # another mask gives another result: the masks agreed
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(4))
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    for a, b in ((q, qe), (k, ke), (v, ve)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_sdpa_lowered_to_flash_kernels() -> None:
    from nprof.compiler.lowerings import supported_ops
    from nprof.compiler.ops import DECOMPOSE_SKIP

    assert "_scaled_dot_product_flash_attention_for_cpu" in DECOMPOSE_SKIP
    assert {"_scaled_dot_product_flash_attention_for_cpu.default",
            "_scaled_dot_product_flash_attention_for_cpu_backward.default"} <= set(supported_ops())  # fmt: skip


def _train_steps(fn: object, params: list[torch.Tensor], steps: int) -> list[float]:
    opt = torch.optim.SGD(params, lr=0.5)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = fn(*params)  # type: ignore[operator]
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_fallback_runs_whole_sdpa_graph_eagerly_and_right(monkeypatch: pytest.MonkeyPatch) -> None:
    # head size 160 > 128: the flash kernel refuses; the whole graph (forward and backward) runs eagerly
    def loss_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2).mean()

    monkeypatch.setenv("NPROF_FALLBACK", "eager")
    torch._dynamo.reset()
    eager = _train_steps(loss_fn, [t.detach().clone().requires_grad_() for t in _qkv(1, 1, 6, 160)], 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _train_steps(torch.compile(loss_fn, backend="nprof"), _qkv(1, 1, 6, 160), 2)
    assert got == pytest.approx(eager, rel=1e-6)
    assert any("forward and backward" in str(w.message) and "head size 160" in str(w.message) for w in caught)


def test_unsupported_backward_is_raised_at_compile_time_before_the_forward_runs() -> None:
    emb = torch.nn.Embedding(10, 4, scale_grad_by_freq=True)
    ran = []

    def fn(idx: torch.Tensor) -> torch.Tensor:
        return emb(idx).sum()

    torch._dynamo.reset()
    STATS.reset()
    with pytest.raises(Exception) as info:
        ran.append(torch.compile(fn, backend="nprof")(torch.tensor([1, 2, 2])))
    err = info.value
    while not isinstance(err, UnsupportedOpError) and err.__cause__ is not None:
        err = err.__cause__
    inner = getattr(info.value, "inner_exception", err)
    assert isinstance(inner, UnsupportedOpError)
    assert str(inner).startswith("backward graph: cannot compile") and "\n" not in str(inner)
    assert __file__ in str(inner) and "emb(idx).sum()" in str(inner)
    assert not ran and not STATS.device_ns  # nothing executed


def test_eager_fallback_warns_once_without_advising_the_fallback_it_is_using(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPROF_FALLBACK", "eager")
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, scale_grad_by_freq=True)
    ref = torch.nn.Embedding(10, 4, scale_grad_by_freq=True)
    ref.load_state_dict(emb.state_dict())
    idx = torch.tensor([1, 2, 2])
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = torch.compile(lambda i: (emb(i) ** 2).sum(), backend="nprof")
        for _ in range(2):
            fn(idx).backward()
    (ref(idx) ** 2).sum().backward()
    (ref(idx) ** 2).sum().backward()
    assert emb.weight.grad is not None and torch.equal(emb.weight.grad, ref.weight.grad)
    ours = [str(w.message) for w in caught if "running this graph eagerly" in str(w.message)]
    assert len(ours) == 1 and "scale_grad_by_freq" in ours[0] and "NPROF_FALLBACK" not in ours[0]
