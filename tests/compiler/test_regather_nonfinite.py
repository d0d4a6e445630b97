"""A tensor holding a -inf mask kept in SBUF in one layout and read in another: `nprof.compiler.regather` would
move it across partitions with a 0/1 selection matmul, where 0 x inf = NaN turns whole columns NaN; it refuses
such tensors (`nprof.compiler.finite`), so the compiled results equal eager's, NaN/inf exactly where eager's."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

B, T, HEADS, D = 2, 16, 4, 8
C = HEADS * D


class MaskedHeads(torch.nn.Module):
    """q/k/v heads split from one projection [T, (B, H, D)], v masked with -inf, heads merged back into
    [(B, T), C] rows for the output projection (the merge is a regather of the masked tensor)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.w = torch.nn.Parameter(torch.randn(3 * C, C, generator=gen) * 0.2)
        self.w2 = torch.nn.Parameter(torch.randn(C, C, generator=gen) * 0.2)
        self.how = how

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, _, v = (x @ self.w.t()).split(C, dim=2)
        q, v = (z.view(B, T, HEADS, D).transpose(1, 2) for z in (q, v))
        if self.how == "masked_fill":
            v = v.masked_fill(mask, float("-inf"))
        elif self.how == "where_full":
            v = torch.where(mask, torch.full_like(v, float("-inf")), v)
        else:  # "input": the -inf comes in a float graph input (values unknown at compile time)
            v = v + mask
        y = (q * 0.5 + v).transpose(1, 2).reshape(B, T, C)
        return y.reshape(B * T, C) @ self.w2


@pytest.mark.parametrize("how", ["masked_fill", "where_full", "input"])
def test_a_masked_tensor_read_in_another_layout_equals_eager(how: str) -> None:
    """One -inf in v: eager's result is non-finite in one row (32 elements), finite elsewhere; the compiled
    result equals it (before the fix the regather made 992 of the 1024 elements NaN)."""
    torch._dynamo.reset()
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(B, HEADS, T, D, dtype=torch.bool)
    mask[1, 2, 5, 3] = True
    if how == "input":
        mask = torch.zeros(B, HEADS, T, D).masked_fill(mask, float("-inf"))
    model = MaskedHeads(how)
    with torch.no_grad():
        want = model(x, mask).numpy()
        got = torch.compile(model, backend="nprof")(x, mask).numpy()
    assert (~np.isfinite(want)).sum() == C  # the test's premise: one row non-finite in eager
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)


def test_nonfinite_values_are_flagged_by_construction_and_stop_at_finite_ops() -> None:
    """`may_be_nonfinite`: a -inf scalar argument flags the node, its consumers follow, softmax and comparisons
    do not; `constant_nonfinite` sees an inf in a tensor constant."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from nprof.compiler.finite import constant_nonfinite, may_be_nonfinite, taint

    def fn(x: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x.masked_fill(m, float("-inf"))
        b = a * 2.0 + x
        return b, torch.softmax(b, -1), b > 0, x + 1.0

    gm = make_fx(fn)(torch.randn(4, 4), torch.zeros(4, 4, dtype=torch.bool))
    flagged: set[str] = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and may_be_nonfinite(node, flagged):
            flagged.add(node.name)
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert [o.name in flagged for o in out] == [True, False, False, False]
    taints: dict[str, frozenset[str]] = {n.name: frozenset({n.name}) for n in gm.graph.nodes if n.op == "placeholder"}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            taints[node.name] = taint(node, taints)
    x_name = next(n.name for n in gm.graph.nodes if n.op == "placeholder")
    assert [taints[o.name] for o in out] == [frozenset({x_name, "m_1"}), frozenset(), frozenset(), {x_name}]
    assert constant_nonfinite(torch.full((2, 2), float("-inf")).triu(1))
    assert not constant_nonfinite(torch.ones(2, 2))


def _matmuls(program: object) -> int:
    return sum(str(getattr(i.opcode, "value", i.opcode)) == "MATMUL" for i in program.instructions)  # type: ignore[attr-defined]


def test_finite_inputs_keep_the_regathered_program_and_inf_inputs_run_the_marked_one(tmp_path: object) -> None:
    """The additive mask arrives as a graph input: the compiled program regathers v (its guard lists the inputs
    reaching the regather); finite inputs run it, a -inf in the mask runs a second program lowered with those
    inputs marked non-finite (its own cache module, no regather matmuls), both equal to eager; finite again: the
    regathered program, no third lowering."""
    from nprof.compiler.cache import CompileCache
    from nprof.compiler.lower import GUARD_META
    from nprof.compiler.runtime import STATS

    torch._dynamo.reset()
    model = MaskedHeads("input")
    x = torch.randn(B, T, C, generator=torch.Generator().manual_seed(2))
    finite_mask = torch.randn(B, HEADS, T, D, generator=torch.Generator().manual_seed(3))
    inf_mask = finite_mask.clone()
    inf_mask[0, 1, 4, 2] = float("-inf")
    compiled = torch.compile(model, backend="nprof", options={"cache_dir": str(tmp_path)})
    before = STATS.compiled
    with torch.no_grad():
        for mask, modules in ((finite_mask, 1), (inf_mask, 2), (finite_mask, 2)):
            want, got = model(x, mask).numpy(), compiled(x, mask).numpy()
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            fin = np.isfinite(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-4)
            assert STATS.compiled - before == modules
    cache = CompileCache(str(tmp_path))
    programs = [cache.load(m.path.name.removeprefix("MODULE_")) for m in cache.modules()]
    fast = [p for p in programs if json.loads(p.meta[GUARD_META])]
    marked = [p for p in programs if not json.loads(p.meta[GUARD_META])]
    assert len(fast) == len(marked) == 1
    assert "mask" in json.loads(fast[0].meta[GUARD_META])
    assert _matmuls(fast[0]) > _matmuls(marked[0])  # the selection matmuls of the regather
