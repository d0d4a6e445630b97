"""Every op family the backend lowers, forward and backward, on inputs holding inf, -inf, NaN, -0.0, huge and
denormal values: the compiled results equal eager's, NaN and inf positions (and inf signs) included, or the
backend re-ran the call eagerly with a warning, or refused (`special_kit`; the sweep over more seeds:
``bench/special_values.py``). A newly registered op no case covers fails `test_every_lowered_op_family_is_covered`
by name. `KNOWN` lists the (case, kind) pairs that still differ, with the reason: a known pair that starts to
match fails too, so the table stays true.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.compiler import special_kit as sk  # noqa: E402

KNOWN: dict[tuple[str, str], str] = {}  # none left


def test_every_lowered_op_family_is_covered() -> None:
    """Each op family of the registry the backend can be handed is in some case's forward or backward graph
    (AOTAutograd with the backend's decompositions), or exempt with a reason."""
    covered = {sk.op_family(n) for case in sk.CASES for n in sk.covered_ops(case)}
    missing = sorted(sk.reachable_families() - covered - set(sk.EXEMPT))
    assert not missing, f"lowered ops no special-value case covers (add a case to special_kit.CASES): {missing}"
    assert not set(sk.EXEMPT) & covered, "exempt families that a case covers: drop them from EXEMPT"


@pytest.mark.parametrize("case", sk.CASES, ids=[c.name for c in sk.CASES])
def test_special_values_equal_eager(case: sk.Case) -> None:
    results = sk.run_case(case)
    wrong = {r.kind: r.examples for r in results if not r.ok and (case.name, r.kind) not in KNOWN}
    assert not wrong, f"{case.name}: compiled results differ from eager's: {wrong}"
    fixed = [r.kind for r in results if r.ok and (case.name, r.kind) in KNOWN]
    assert not fixed, f"{case.name}: now equal to eager for {fixed}: drop them from KNOWN"


def test_compare_sees_each_class_of_difference() -> None:
    """The comparison can fail: a NaN moved, an inf's sign, a finite value, a zero's sign (a note), and an
    overflow eager's float64 result does not have (with `alt`) is excused only where eager's float32 result is
    itself non-finite."""
    nan, inf = float("nan"), float("inf")
    want = torch.tensor([1.0, nan, inf, -0.0, 2.0])
    assert sk.compare(want.clone(), want) == []
    classes = [c for c, _ in sk.compare(torch.tensor([1.0, 0.0, -inf, 0.0, 2.5]), want)]
    assert classes == ["nan", "inf", "value", "zero-sign"]
    got, eager32, eager64 = torch.tensor([3e38, inf]), torch.tensor([inf, 1.0]), torch.tensor([3e38, 1.0])
    assert [c for c, _ in sk.compare(got, eager32, eager64)] == ["inf"]  # the second: device overflow only


_EXTRA = {c.name: c for c in (*sk.MASKED_CASES, *sk.LARGE_CASES)}
CHEAP_EXTRA = ("sdpa_mask_bool_empty", "sdpa_mask_-inf_empty", "sdpa_mask_min_empty", "rowpack_norms",
               "big_conv_spread")
"""A few of the masked-attention and multi-tile cases (the rest: ``bench/special_values.py --large``)."""


@pytest.mark.parametrize("name", CHEAP_EXTRA)
def test_masked_attention_and_multi_tile_special_values_equal_eager(name: str) -> None:
    wrong = {r.kind: r.examples for r in sk.run_case(_EXTRA[name]) if not r.ok}
    assert not wrong, f"{name}: compiled results differ from eager's: {wrong}"
