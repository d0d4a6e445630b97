"""Attention heads packed on the partitions: a batched matmul of 32-row matrices computes 4 of them per matmul
(`kernels.matmul._packed_bmm`), so the scores and their softmax use all 128 partitions, and an operand broadcast
along the heads follows that layout by replicating its rows on TensorE (`views.TileSpec.periods`). Held to
eager torch (values and gradients, causal mask included) and to the per-head lowering."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nprof.arch.isa import Opcode  # noqa: E402
from nprof.compiler import STATS, CompileCache  # noqa: E402
from nprof.compiler.kernels import matmul  # noqa: E402
from nprof.compiler.views import View, retile  # noqa: E402
from nprof.program.file import load_program  # noqa: E402
from tests.compiler.conftest import check_fn  # noqa: E402


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).requires_grad_(True)


def _attention(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """nanoGPT's attention on [B, T, 3 * C] (4 heads of 16, T = 32): scale, additive causal mask, softmax, @ v."""
    b, t, c3 = x.shape
    q, k, v = (z.reshape(b, t, 4, c3 // 12).transpose(1, 2) for z in x.split(c3 // 3, dim=2))
    att = (q @ k.transpose(-2, -1)) * 0.25 + mask[:t, :t]
    return (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c3 // 3)


def _mask(t: int = 32) -> torch.Tensor:
    return torch.full((t, t), float("-inf")).triu(1)


@pytest.mark.parametrize("packed", [True, False])
def test_attention_matches_eager(packed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matmul, "PACK_HEADS", packed)
    check_fn(_attention, _r(4, 32, 48, seed=3), _mask())


@pytest.mark.parametrize("shape", [(8, 32, 16, 32), (6, 16, 8, 16), (4, 64, 16, 64), (8, 32, 16, 8)])
def test_packed_bmm_matches_eager(shape: tuple[int, int, int, int]) -> None:
    """Groups of 4 (M = 32), 8 (M = 16, 6 batches: not a multiple, the per-batch path), 2 (M = 64), and a
    result narrower than its rows (N < M: per batch)."""
    b, m, k, n = shape
    check_fn(torch.bmm, _r(b, m, k, seed=1), _r(b, k, n, seed=2))


def test_packed_bmm_keeps_its_batch_apart_from_the_others() -> None:
    """Products of one batch's rows with another batch's columns (the discarded blocks) overflowing to inf leave
    every result eager's: batch 0's columns and the other batches' rows are ~1e30, each batch's own product
    stays finite."""
    a, b = _r(4, 32, 8, seed=4).detach(), _r(4, 8, 16, seed=5).detach()
    a[1:] *= 1e30
    b[0] *= 1e30
    assert torch.isinf(a[1] @ b[0]).any() and torch.isfinite(torch.bmm(a, b)).all()
    check_fn(torch.bmm, a, b, grad=False)


def _programs() -> list[object]:
    names = dict(STATS.compile_cpu_seconds)
    return [load_program(m.program_path) for m in CompileCache().modules() if m.path.name in names]


def _softmax_partitions(packed: bool, monkeypatch: pytest.MonkeyPatch, cache: Path) -> set[int]:
    """Partitions of the max reductions (the softmax's row max) of the compiled attention forward."""
    monkeypatch.setattr(matmul, "PACK_HEADS", packed)
    monkeypatch.setenv("NPROF_CACHE", str(cache / str(packed)))  # the switch is not part of the cache key
    torch._dynamo.reset()
    STATS.reset()
    with torch.no_grad():
        torch.compile(_attention, backend="nprof")(torch.randn(4, 32, 48), _mask())
    (program,) = _programs()
    reduces = [i for i in program.instructions if i.opcode is Opcode.TENSOR_REDUCE and i.attr("op") == "max"]
    assert reduces
    return {i.ins[0].partitions for i in reduces}


def test_scores_and_softmax_use_all_partitions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Packed: the softmax of 16 heads of 32 x 32 scores runs on 128 partitions; per head, on 32."""
    assert _softmax_partitions(True, monkeypatch, tmp_path) == {128}
    assert _softmax_partitions(False, monkeypatch, tmp_path) == {32}


def test_mask_broadcast_over_heads_follows_the_packed_rows() -> None:
    """A [T, T] operand broadcast over [heads, T, T] scores tiled as (head, row) on 128 partitions repeats every
    32 partitions: retile gives it period 32 and its one row stride (it needs `periodic`)."""
    out = View.whole("s", "float32", (4, 32, 32))
    mask = View.whole("m", "float32", (32, 32)).unsqueeze(0).expand((4, 32, 32))
    from nprof.arch.isa import Access, Space

    a = Access(Space.HBM, "s", "float32", 0, 128, ((1, 32),), 0, 32)
    assert retile([a], out.shape, [out.strides, mask.strides]) is None
    (spec,) = retile([a], out.shape, [out.strides, mask.strides], periodic=True)
    assert spec.period(1) == 32 and spec.period(0) == 0
    load = spec.access(1, mask)
    assert (load.partitions, load.partition_stride, load.free) == (32, 32, ((1, 32),))
