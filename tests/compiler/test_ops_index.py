"""index.Tensor, gather, index_put/scatter_add, cumsum, flip, in-place copies, embedding bags, literals."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.compiler.conftest import check_fn  # noqa: E402


def _x() -> torch.Tensor:
    return torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)


def test_advanced_indexing_adjacent_separated_and_negative_indices() -> None:
    rows, cols = torch.tensor([[0], [3], [1]]), torch.tensor([2, -1, 4, 0])
    check_fn(lambda x, a, b: x[a, b], _x(), rows, cols)
    check_fn(lambda x, a, b: x[:, a, b], _x(), rows, torch.tensor([5, 0, -2, 1]))
    check_fn(lambda x, a, b: x[a, :, b], _x(), rows, cols)  # separated: index dims go first


def test_attention_mask_style_boolean_indexing() -> None:
    keep = torch.rand(2, 8, generator=torch.Generator().manual_seed(1)) > 0.3
    check_fn(lambda m, b, k: m[b[:, None, None, None], k[None, None, None, :]], keep, torch.arange(2),
             torch.arange(8), grad=False)  # fmt: skip


def test_gather_and_its_backward() -> None:
    index = torch.randint(0, 5, (4, 3, 6), generator=torch.Generator().manual_seed(2))
    check_fn(lambda x, i: torch.gather(x, 1, i), _x(), index)


def test_index_select_on_every_dim_and_its_backward() -> None:
    """Swin's relative-position bias table read by index: ``index_select`` (repeated indices, dims counted from
    either end), forward and the scatter-add of its backward."""
    index = torch.tensor([3, 0, 3, 2, 1])
    for dim in (0, 1, 2, -1):
        check_fn(lambda x, i, d=dim: torch.index_select(x, d, i) * 2, _x(), index)
    check_fn(lambda x, i: x.index_select(1, i), _x(), torch.tensor([4]))


def test_cumsum_float_and_int_and_flip() -> None:
    check_fn(lambda x: torch.cumsum(x, 1) * 2, _x())
    check_fn(lambda m: torch.cumsum(m.long(), -1), torch.rand(2, 8) > 0.5, grad=False)
    check_fn(lambda x: torch.flip(x, [0, 2]) * 3, _x())


def test_in_place_write_and_tensor_literals() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, -1] = 0
        return y * torch.tensor(3.0) + torch.tensor([1.0, 2.0, 3.0, 4.0])

    check_fn(f, torch.randn(3, 4, requires_grad=True))


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_forward_and_weight_gradient(mode: str) -> None:
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(20, 8, mode=mode)
    idx, offsets = torch.randint(0, 20, (10,)), torch.tensor([0, 3, 7])
    torch._dynamo.reset()
    expected = bag(idx, offsets)
    weights = torch.randn(expected.shape)
    (expected * weights).sum().backward()
    grad = bag.weight.grad.clone()
    bag.weight.grad = None
    got = torch.compile(bag, backend="nprof")(idx, offsets)
    (got * weights).sum().backward()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bag.weight.grad, grad, rtol=1e-4, atol=1e-5)
