"""Values that overflow to +-inf at run time (``x.exp()`` on large inputs, ``x * 1e30``) from finite inputs,
then moved across partitions by `nprof.compiler.regather` (attention heads merged back into rows): the selection
matmul's 0 x inf = NaN would make whole columns NaN where eager is finite. The program's regather check
(`nprof.compiler.regather_check`) sees it and the backend re-runs the graph lowered without regathers, so the
compiled results — forward and backward — equal eager's, inf and NaN exactly where eager's are."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

B, T, HEADS, D = 2, 16, 4, 8
C = HEADS * D


class Heads(torch.nn.Module):
    """q/v heads split from one projection, v overflowing by `how`, heads merged back into [(B, T), C] rows
    (the merge is a regather of the overflowed tensor), an output projection (and dropout when `p`)."""

    def __init__(self, how: str, p: float = 0.0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.w = torch.nn.Parameter(torch.randn(3 * C, C, generator=gen) * 0.2)
        self.w2 = torch.nn.Parameter(torch.randn(C, C, generator=gen) * 0.2)
        self.how = how
        self.drop = torch.nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, _, v = (x @ self.w.t()).split(C, dim=2)
        q, v = (z.view(B, T, HEADS, D).transpose(1, 2) for z in (q, v))
        v = v.exp() if self.how == "exp" else v * 1e30
        y = (q * 0.5 + v).transpose(1, 2).reshape(B, T, C)
        return self.drop(y.reshape(B * T, C)) @ self.w2


def _inputs(how: str, big: bool) -> torch.Tensor:
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(1))
    if big:
        x[1, 5] *= 400.0 if how == "exp" else 1e12  # one position overflows in v
    return x


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal to eager: NaN, +inf and -inf at the same positions, the finite values within 1e-4."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("how", ["exp", "mul"])
def test_a_value_overflowing_at_run_time_then_regathered_equals_eager(how: str, tmp_path: object) -> None:
    """One position of v overflows: eager's result is non-finite in one row (32 of 1024 elements); the compiled
    one equals it (the regathering program alone gave 1024 NaN). Finite inputs before and after run the
    regathering program; the overflowing call lowers the program without regathers once (two modules)."""
    from nprof.compiler.runtime import STATS

    torch._dynamo.reset()
    model = Heads(how)
    compiled = torch.compile(model, backend="nprof", options={"cache_dir": str(tmp_path)})
    before = STATS.compiled
    with torch.no_grad():
        for big, modules in ((False, 1), (True, 2), (False, 2)):
            x = _inputs(how, big)
            want, got = model(x).numpy(), compiled(x).numpy()
            if big:
                assert (~np.isfinite(want)).sum() == C  # the test's premise: one row non-finite in eager
            assert_same(got, want)
            assert STATS.compiled - before == modules


def test_training_with_an_overflow_gives_eager_gradients() -> None:
    """Forward and backward of a training step whose v overflows: loss and every gradient equal eager's, NaN
    and inf at the same positions (the backward's saved tensors come from the program whose outputs were
    used), and a later finite step equals eager's too."""
    torch._dynamo.reset()
    model = Heads("exp")
    compiled = torch.compile(model, backend="nprof")
    for big in (True, False):
        x = _inputs("exp", big)
        xs = [x.clone().requires_grad_(True) for _ in range(2)]
        outs = [m(xi) for m, xi in ((model, xs[0]), (compiled, xs[1]))]
        grads = []
        for out, xi in zip(outs, xs, strict=True):
            model.zero_grad()
            (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
            grads.append([xi.grad.numpy().copy(), *(p.grad.numpy().copy() for p in model.parameters())])
        assert_same(outs[1].detach().numpy(), outs[0].detach().numpy())
        if big:
            assert not np.isfinite(grads[0][0]).all() and np.isfinite(grads[0][0]).any()  # premise: mixed
        for got, want in zip(grads[1], grads[0], strict=True):
            assert_same(got, want)


def test_dropout_masks_of_a_rerun_are_eagers() -> None:
    """A training-mode dropout after the regather: the program re-run without regathers gets the masks the
    dropped run drew (eager's for the same seed), and torch's generator ends where eager's does."""
    torch._dynamo.reset()
    model = Heads("mul", p=0.5)
    compiled = torch.compile(model, backend="nprof")
    x = _inputs("mul", True)
    with torch.no_grad():
        torch.manual_seed(3)
        want, after_eager = model(x).numpy(), torch.rand(4)
        torch.manual_seed(3)
        got, after = compiled(x).numpy(), torch.rand(4)
    assert_same(got, want)
    assert torch.equal(after, after_eager)


@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("columns", [64, 2])
def test_the_check_fails_exactly_when_a_moved_element_is_not_finite(
    bad: float | None, columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five regathers of one kept tile, an inf/NaN (or nothing) in the rows the first one moves: the moved
    values are the HBM pattern's where finite, and the check output is non-finite exactly when a bad value was
    moved — also when its column was folded into another (`COLUMNS` 2)."""
    from nprof.arch.isa import Access, Space
    from nprof.compiler import regather_check
    from nprof.compiler.emit import Emitter
    from nprof.compiler.kernels.hbm import load, window
    from nprof.compiler.packing import unpack_outputs
    from nprof.compiler.regather import regather
    from nprof.device import simulate
    from nprof.nki import language as nl

    monkeypatch.setattr(regather_check, "COLUMNS", columns)
    em = Emitter("check_test")
    builder = em.builder
    em.hbm_tensor("t", (256,), "float32", "input")
    em.hbm_tensor("o", (5 * 128,), "float32", "output")
    key = Access(Space.HBM, "t", "float32", 0, 32, ((1, 8),), 0, 8)  # 32 rows of 8 on partitions 0..31
    starts = [16, 1, 2, 3, 4]  # rows 16..31 onto partitions 0..15, then rows 1..16 .. 4..19 (no row 31)
    reads = [Access(Space.HBM, "t", "float32", 8 * r, 16, ((1, 8),), 0, 8) for r in starts]

    def kernel() -> None:
        load(key)
        for i, a in enumerate(reads):
            got = regather(builder, a)
            assert got is not None
            nl.store(window(Access(Space.HBM, "o", "float32", 128 * i, 16, ((1, 8),), 0, 8)), value=got)

    em.call(kernel)
    program = em.build()  # the check's sums stored with the staged small outputs
    x = np.arange(256, dtype=np.float32) - 100.0
    if bad is not None:
        x[250] = bad  # row 31, moved by the first read only
    out = unpack_outputs(program, simulate(program, {"t": x}, numerics=True, allow_nonfinite=True).outputs)
    assert (regather_check.CHECK_NAME in regather_check.failed_checks(out)) == (bad is not None)
    if bad is None:
        want = np.concatenate([x[a.offset : a.offset + 128] for a in reads])
        np.testing.assert_array_equal(out["o"], want)


def test_the_guards_finiteness_test_equals_isfinite() -> None:
    """`all_finite` (a sum first): True for finite tensors, also one whose finite values overflow the sum;
    False for any inf or NaN, in fp32 and fp16."""
    from nprof.compiler.backend import all_finite

    for dtype in (torch.float32, torch.float16):
        big = torch.full((4, 8), torch.finfo(dtype).max, dtype=dtype)
        assert all_finite(torch.randn(64, 32).to(dtype)) and all_finite(big)  # the sum of `big` is inf
        for bad in (float("inf"), float("-inf"), float("nan")):
            t = torch.randn(64, 32).to(dtype)
            t[7, 3] = bad
            assert not all_finite(t)


def test_a_failed_check_inside_a_multiprocess_job_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program with collectives cannot be re-run alone in a torch.distributed job: one line says why."""
    from nprof.compiler import backend
    from nprof.device import process_group
    from nprof.errors import NprofError

    class Graph:
        program, module = object(), "MODULE_x"

    monkeypatch.setattr(process_group, "current_job", lambda: object())
    monkeypatch.setattr(backend, "has_collectives", lambda program: True)
    with pytest.raises(NprofError, match="cannot be re-run without them inside a multi-process job"):
        backend.refuse_in_job(Graph())  # type: ignore[arg-type]
    monkeypatch.setattr(backend, "has_collectives", lambda program: False)
    backend.refuse_in_job(Graph())  # type: ignore[arg-type]  # no collectives: re-run


def test_one_hot_matmuls_and_batch_sums_of_non_finite_values_equal_eager() -> None:
    """The other 0/1 matmuls: an embedding whose table holds an inf (the one-hot matmul put NaN in 7 other rows
    of its column), its backward with a gradient overflowing (NaN in 15 other rows of the weight gradient): the
    call runs eagerly with a warning; a batch sum of an overflowing [B, T, C] tensor (one selection matmul, NaN
    in 7 other sums): re-run without it. All equal eager's, inf and NaN where eager's are."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    emb = torch.nn.Embedding(16, 8)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(16, 8, generator=gen))
        emb.weight[3, 2] = float("inf")
    idx = torch.tensor([[1, 3, 5, 7], [2, 4, 6, 8]])
    with torch.no_grad(), pytest.warns(UserWarning, match="one-hot matmul"):
        assert_same(torch.compile(emb, backend="nprof")(idx).numpy(), emb(idx).numpy())

    torch._dynamo.reset()
    with torch.no_grad():
        emb.weight[3, 2] = 0.5
    scale = torch.ones(2, 4, 8)
    scale[0, 1, 2] = 400.0  # exp overflows in one element: its gradient is inf

    def loss(i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return (emb(i).abs() * s).exp().sum()

    grads = []
    for fn in (loss, torch.compile(loss, backend="nprof")):
        emb.zero_grad()
        fn(idx, scale).backward()
        grads.append(emb.weight.grad.numpy().copy())
    assert (~np.isfinite(grads[0])).sum() == 1  # premise
    assert_same(grads[1], grads[0])

    torch._dynamo.reset()

    def batch_sum(x: torch.Tensor) -> torch.Tensor:
        return (x * 1e30).sum(0)

    x = torch.randn(4, 8, 16, generator=gen)
    x[2, 3, 5] = 1e10
    assert_same(torch.compile(batch_sum, backend="nprof")(x).numpy(), batch_sum(x).numpy())


@pytest.mark.parametrize("ignore", [-100, 3])
def test_cross_entropy_of_masked_logits_equals_eager(ignore: int) -> None:
    """Logits masked with -inf off the target (log-probabilities -inf there): nll_loss picks the target's by a
    select, so the loss and the logits' gradient equal eager's (a 0/1 mask multiplied gave a NaN loss); also
    with an ignore_index that is a class whose rows hold -inf."""
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 10, generator=gen)
    target = logits.argmax(1)
    target[2] = 3 if ignore == 3 else target[2]

    def f(z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        z = z.masked_fill(z < -1.0, float("-inf"))
        return torch.nn.functional.cross_entropy(z, t, ignore_index=ignore)

    results = []
    for fn in (f, torch.compile(f, backend="nprof")):
        z = logits.clone().requires_grad_(True)
        loss = fn(z, target)
        loss.backward()
        results.append((loss.detach().numpy(), z.grad.numpy()))
    assert np.isfinite(results[0][0])  # premise: eager's loss is finite
    for got, want in zip(results[1], results[0], strict=True):
        assert_same(np.asarray(got), np.asarray(want))
