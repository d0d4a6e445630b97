"""Kernels that move many small tiles in few DMAs, against eager torch (values and gradients) and against
the plain tiling: batched bmm, tiles with folded loop dims, natural [rows, last dim] tiles."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS  # noqa: E402
from nprof.compiler.views import View, numel, row_tiles  # noqa: E402
from tests.compiler.conftest import check_fn  # noqa: E402


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_(True)


@pytest.mark.parametrize(
    "case",
    [
        "natural",  # a [B, M, K] @ b [B, K, N], both row-major
        "heads",  # q @ k.transpose(-2, -1) on head-split views (strided, the second operand transposed)
        "large",  # M > 128: one matmul per batch (the fallback)
    ],
)
def test_bmm_matches_eager(case: str) -> None:
    if case == "natural":
        check_fn(torch.bmm, _r(6, 8, 5), _r(6, 5, 7, seed=1))
    elif case == "heads":

        def attn(x: torch.Tensor) -> torch.Tensor:
            q, k = x.view(2, 8, 4, 6).transpose(1, 2), x.view(2, 8, 4, 6).transpose(1, 2) * 0.5
            return (q @ k.transpose(-2, -1)).softmax(-1) @ q

        check_fn(attn, _r(2, 8, 24, seed=2))
    else:
        check_fn(torch.bmm, _r(2, 130, 4), _r(2, 4, 3, seed=3))


def test_batched_bmm_is_three_dmas() -> None:
    """A bmm of 16 small matrices loads each operand and stores the result in one DMA each."""
    torch._dynamo.reset()
    STATS.reset()
    with torch.no_grad():
        torch.compile(torch.bmm, backend="nprof")(torch.randn(16, 8, 4), torch.randn(16, 4, 8))
    profile = next(iter(STATS.last_profile.values()))
    assert profile.dma.num_rows == 3


def test_folded_tiles_cover_each_element_once() -> None:
    """Folding loop dims into the free dims tiles a head-split copy in one tile that addresses, per operand,
    exactly the elements the unfolded tiles address."""
    dst = View.whole("d", "float32", (4, 4, 32, 16))
    src = View.whole("s", "float32", (4, 32, 4, 16)).permute((0, 2, 1, 3))
    strides = [dst.strides, src.strides]

    def addressed(specs: list, i: int, view: View) -> list[int]:
        out = []
        for spec in specs:
            a = spec.access(i, view)
            idx = [a.offset + p * a.partition_stride for p in range(a.partitions)]
            for stride, size in a.free:
                idx = [x + k * stride for x in idx for k in range(size)]
            out += idx
        return sorted(out)

    plain = list(row_tiles(dst.shape, strides))
    folded = list(row_tiles(dst.shape, strides, fold=True))
    assert len(plain) == 16 and len(folded) == 1
    for i, view in enumerate((dst, src)):
        assert addressed(folded, i, view) == addressed(plain, i, view)
        assert len(set(addressed(folded, i, view))) == numel(dst.shape)


def test_small_contiguous_tensors_tile_in_their_natural_rows() -> None:
    (spec,) = row_tiles((32, 10), [(10, 1)])
    assert (spec.partitions, spec.free_sizes) == (32, (10,))
    big = list(row_tiles((16, 4096), [(4096, 1)]))  # large and few rows: all 128 partitions instead
    assert all(s.partitions == 128 for s in big)
