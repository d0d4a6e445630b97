"""docs/profile-format.md and the code agree on the summary fields: the documented table lists, in report
order, exactly the fields `nprof.analysis.metrics` can report, and every field reported on real
profiles (virtual device, CUDA and MTIA traces, collectives) is one of them."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from nprof.analysis.metrics import summary_fields, summary_metrics
from nprof.capture import open_profile
from nprof.profile import Profile, make_table
from tests.conftest import tiny_profile

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "profile-format.md"
FIXTURES = ROOT / "tests" / "fixtures"
_ENGINE_FIELD = re.compile(r"^(\w+?)_engine_(instruction_time|active_time|active_time_percent|instruction_count)$")


def documented_fields(text: str) -> list[str]:
    """The first-column names of the table under the `### Summary fields` heading, in order."""
    section = text.split("### Summary fields", 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE)


def template(field: str) -> str:
    """A reported field name with its engine replaced by `<engine>` (`tensor_engine_active_time` ->
    `<engine>_engine_active_time`); other names unchanged."""
    return _ENGINE_FIELD.sub(r"<engine>_engine_\2", field)


def _with_collectives(p: Profile) -> Profile:
    cc = {"id": [0, 0], "kind": ["all-reduce"] * 2, "bytes": [64, 64], "rank": [0, 1], "ranks": [[0, 1]] * 2,
          "ts": [10, 20], "duration": [30, 20], "wait_ns": [10, 0], "algorithm": ["ring/neuronlink"] * 2}  # fmt: skip
    return replace(p, collectives=make_table("collectives", cc))


def test_the_table_lists_every_field_in_report_order() -> None:
    assert documented_fields(DOC.read_text()) == summary_fields(("<engine>",))


@pytest.mark.parametrize(
    "load",
    [
        tiny_profile,
        lambda: _with_collectives(tiny_profile()),
        lambda: open_profile(FIXTURES / "kineto_cuda_small.json"),
        lambda: open_profile(FIXTURES / "kineto_sync_mtia.json"),
    ],
    ids=["virtual", "collectives", "cuda", "mtia"],
)
def test_every_reported_field_is_documented(load: object) -> None:
    reported = list(summary_metrics(load()))  # type: ignore[operator]
    documented = documented_fields(DOC.read_text())
    assert [f for f in reported if template(f) not in documented] == []
    # and in the documented order (each engine's fields repeat the <engine> block)
    order = [documented.index(t) for t in dict.fromkeys(template(f) for f in reported)]
    assert order == sorted(order)


def test_collective_and_engine_fields_are_really_reported() -> None:
    """Guard against a vacuous comparison: the fixtures exercise the templated and optional fields."""
    virtual = summary_metrics(_with_collectives(tiny_profile()))
    assert {"cc_op_time", "tensor_engine_active_time", "psum_write_bytes", "bound"} <= set(virtual)
    cuda = summary_metrics(open_profile(FIXTURES / "kineto_cuda_small.json"))
    assert any(template(f) != f and not f.startswith("tensor") for f in cuda)  # an engine beyond the five


def test_the_parser_and_template_can_fail() -> None:
    text = "### Summary fields\n\n| field |\n|---|\n| `a` | s |\n| `b_engine_x` |\n\n## Next\n| `c` | x |\n"
    assert documented_fields(text) == ["a", "b_engine_x"]
    assert template("host_engine_active_time_percent") == "<engine>_engine_active_time_percent"
    assert template("dma_active_time") == "dma_active_time"
