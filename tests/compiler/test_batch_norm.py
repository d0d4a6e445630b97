"""Training batch norm lowered as one fused kernel (`kernels.norm.batch_norm_kernel`) against a plain numpy
reference: output, saved mean and rstd, updated running statistics, on random shapes (more than 128 channels,
images larger than one block, 2-D inputs, no affine)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402


def _reference(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, rm: np.ndarray, rv: np.ndarray,
               momentum: float, eps: float) -> list[np.ndarray]:  # fmt: skip
    """The textbook formulas in float64: normalise over every axis but 1, then the affine, then the updates."""
    axes = tuple(k for k in range(x.ndim) if k != 1)
    shape = [1] * x.ndim
    shape[1] = x.shape[1]
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=axes), x64.var(axis=axes)
    rstd = 1.0 / np.sqrt(var + eps)
    out = (x64 - mean.reshape(shape)) * rstd.reshape(shape)
    if w is not None:
        out = out * w.reshape(shape)
    if b is not None:
        out = out + b.reshape(shape)
    n = x.size / x.shape[1]
    new_rm = momentum * mean + (1 - momentum) * rm
    new_rv = momentum * var * n / (n - 1) + (1 - momentum) * rv
    return [out, mean, rstd, new_rm, new_rv]


@pytest.mark.parametrize(
    ("shape", "affine"),
    [((4, 16, 8, 8), True), ((2, 130, 3, 5), True), ((1, 3, 96, 96), True), ((6, 20), False), ((3, 5, 4, 4), False)],
)
def test_fused_batch_norm_matches_the_formulas(shape: tuple[int, ...], affine: bool) -> None:
    gen = torch.Generator().manual_seed(sum(shape))
    c = shape[1]
    x = torch.randn(shape, generator=gen) * 3 + 1
    w, b = (torch.randn(c, generator=gen), torch.randn(c, generator=gen)) if affine else (None, None)
    rm, rv = torch.randn(c, generator=gen), torch.rand(c, generator=gen) + 0.5
    momentum, eps = 0.1, 1e-5

    def fn(x, w, b, rm, rv):  # type: ignore[no-untyped-def]
        return torch.ops.aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, momentum, eps)

    args = [x, w, b, rm, rv]
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert any("_native_batch_norm_legit_functional" in t for t in targets)  # not decomposed: the fused kernel
    names = ["x", "w", "b", "rm", "rv"]
    program, slots = lower_graph(gm, GraphPlan("bn_test", "inference", names, [f"o{i}" for i in range(5)]))
    given = {n: a.numpy() for n, a in zip(names, args, strict=True) if a is not None}
    outputs = unpack_outputs(program, simulate(program, pack_inputs(program, given), numerics=True).outputs)
    got = [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots]
    want = _reference(*(a.numpy() if a is not None else None for a in args), momentum, eps)  # type: ignore[arg-type]
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(g, r, rtol=2e-5, atol=2e-5)


def _reference_backward(g: np.ndarray, x: np.ndarray, w: np.ndarray | None, mean: np.ndarray, rstd: np.ndarray,
                        train: bool) -> list[np.ndarray]:  # fmt: skip
    """The batch-norm gradients written out in float64 (x normalised with `mean` and `rstd` per channel)."""
    axes = tuple(k for k in range(x.ndim) if k != 1)
    shape = [1] * x.ndim
    shape[1] = x.shape[1]
    g64, x64 = g.astype(np.float64), x.astype(np.float64)
    xhat = (x64 - mean.reshape(shape)) * rstd.reshape(shape)
    scale = rstd * (w if w is not None else 1.0)
    n = x.size / x.shape[1]
    if train:  # d/dx of (x - mean(x)) * rstd(x) * w, the batch statistics depending on x
        dxhat = g64 * scale.reshape(shape)
        dx = dxhat - dxhat.mean(axis=axes, keepdims=True) - xhat * (dxhat * xhat).sum(axis=axes, keepdims=True) / n
    else:  # the statistics are constants
        dx = g64 * scale.reshape(shape)
    return [dx, (g64 * xhat).sum(axis=axes), g64.sum(axis=axes)]


@pytest.mark.parametrize(
    ("shape", "affine", "train"),
    [((4, 16, 8, 8), True, True), ((2, 130, 3, 5), True, True), ((1, 3, 96, 96), False, True),
     ((6, 20), True, False), ((3, 5, 4, 4), False, False),
     ((2, 32, 4, 4), True, False), ((2, 8, 4, 4), False, True),  # few channels: spread over 128 partitions
     ((7, 3, 112, 112), True, True)],  # 7 x 49 blocks a channel: 32 KiB blocks found no free SBUF gap (refused)
)  # fmt: skip
def test_fused_batch_norm_backward_matches_the_gradients(shape: tuple[int, ...], affine: bool, train: bool) -> None:
    gen = torch.Generator().manual_seed(sum(shape) + train)
    c = shape[1]
    x, g = torch.randn(shape, generator=gen) * 2 + 0.5, torch.randn(shape, generator=gen)
    w = torch.randn(c, generator=gen) if affine else None
    rm, rv = torch.randn(c, generator=gen), torch.rand(c, generator=gen) + 0.5
    axes = [k for k in range(len(shape)) if k != 1]
    mean = x.mean(dim=axes) if train else rm
    rstd = 1 / torch.sqrt(x.var(dim=axes, unbiased=False) + 1e-5) if train else 1 / torch.sqrt(rv + 1e-5)
    mask = [True, affine, affine]

    def fn(g, x, w, rm, rv, sm, sr):  # type: ignore[no-untyped-def]
        return torch.ops.aten.native_batch_norm_backward(g, x, w, rm, rv, sm, sr, train, 1e-5, mask)

    args = [g, x, w, rm, rv, mean, rstd]
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    assert any("native_batch_norm_backward" in str(n.target) for n in gm.graph.nodes)
    names = ["g", "x", "w", "rm", "rv", "sm", "sr"]
    program, slots = lower_graph(gm, GraphPlan("bnb_test", "inference", names, ["o0", "o1", "o2"]))
    given = {n: a.numpy() for n, a in zip(names, args, strict=True) if a is not None}
    outputs = unpack_outputs(program, simulate(program, pack_inputs(program, given), numerics=True).outputs)
    got = [np.asarray(outputs[s.name]).reshape(s.shape) if s.kind == "tensor" else None for s in slots]
    want = _reference_backward(g.numpy(), x.numpy(), None if w is None else w.numpy(), mean.numpy(), rstd.numpy(),
                               train)  # fmt: skip
    for k, (got_k, want_k) in enumerate(zip(got, want, strict=True)):
        if mask[k]:
            np.testing.assert_allclose(got_k, want_k, rtol=1e-4, atol=1e-4)


def test_spread_factor_puts_few_channels_on_all_partitions() -> None:
    """k partitions per channel when C * k = 128, the plane splits in k equal parts and the tile fits a block."""
    from nprof.compiler.kernels.norm_spread import spread_factor

    assert spread_factor((4, 16, 8, 8)) == 8 and spread_factor((2, 32, 4, 4)) == 4 and spread_factor((2, 8, 4, 4)) == 16
    assert spread_factor((2, 16, 3, 3)) == 1  # 9 elements per plane: no 8 equal parts
    assert spread_factor((1, 3, 96, 96)) == 1 and spread_factor((2, 130, 3, 5)) == 1
    assert spread_factor((8, 64, 1, 1)) == 1 and spread_factor((3, 64, 2, 2)) == 1  # 64 channels: not spread
    assert spread_factor((64, 16, 64, 64)) == 1  # 32768 elements per partition: more than one block


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_spread_batch_norm_backward_keeps_a_non_finite_channel_to_itself(bad: float) -> None:
    """16 channels spread over 128 partitions, one of them with a non-finite input (so its mean, dot product
    and gradient are non-finite): every other channel's gradients stay finite and equal eager's (a 0/1
    selection matmul would multiply the bad channel's value by 0 into every channel: NaN everywhere)."""
    shape, c_bad = (4, 16, 8, 8), 3
    gen = torch.Generator().manual_seed(11)
    x, g = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    x[1, c_bad, 2, 5] = bad
    w = torch.randn(16, generator=gen)
    mean, rstd = x.mean(dim=(0, 2, 3)), 1 / torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False) + 1e-5)

    def fn(g, x, w, sm, sr):  # type: ignore[no-untyped-def]
        return torch.ops.aten.native_batch_norm_backward(g, x, w, None, None, sm, sr, True, 1e-5, [True] * 3)

    args = [g, x, w, mean, rstd]
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    names = ["g", "x", "w", "sm", "sr"]
    program, slots = lower_graph(gm, GraphPlan("bnb_nan", "inference", names, ["o0", "o1", "o2"]))
    given = {n: a.numpy() for n, a in zip(names, args, strict=True)}
    outputs = unpack_outputs(program, simulate(program, pack_inputs(program, given), numerics=True,
                                                      ignore_exec_errors=True).outputs)
    got = [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots]
    want = [t.numpy() for t in fn(*args)]  # type: ignore[no-untyped-call]
    others = [k for k in range(16) if k != c_bad]
    np.testing.assert_allclose(got[0][:, others], want[0][:, others], rtol=1e-4, atol=1e-4)
    for got_k, want_k in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(got_k[others], want_k[others], rtol=1e-4, atol=1e-4)
    assert not np.isfinite(got[1][c_bad]) and not np.isfinite(want[1][c_bad])
