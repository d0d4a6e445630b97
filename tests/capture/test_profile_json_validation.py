"""Profile JSON import refuses wrong types and ranges with one line (no silent clamping or ignoring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nprof.capture import open_profile
from nprof.errors import NprofError

ROW = {"timestamp": 1, "duration": 5, "opcode": "MATMUL", "label": "Vector"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"summary": [{"total_time": -1.0}], "instruction": [ROW]}, "total_time -1.0 is not a number"),
        ({"summary": [{"total_time": "1"}], "instruction": [ROW]}, "total_time 1 is not a number"),
        ({"summary": {"a": 1}, "instruction": [ROW]}, "'summary' must be a list"),
        ({"summary": [{"nc_idx": [1]}], "instruction": [ROW]}, "nc_idx must be a whole number"),
        ({"instruction": [{**ROW, "flops": -5}]}, "flops has values outside"),
        ({"instruction": [{**ROW, "id": 1}, {**ROW, "id": 3}, {**ROW, "id": 3}]}, "not unique"),
    ],
)
def test_refusals(tmp_path: Path, doc: dict[str, Any], message: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(NprofError, match=message) as err:
        open_profile(path)
    assert "\n" not in str(err.value)
