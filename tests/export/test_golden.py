"""Golden files for every exporter on tiny_profile().

Regenerate on purpose with `NPROF_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/export/test_golden.py`
and review the diff. Directory outputs (parquet, csv) are compared file by file
(parquet through its decoded rows); the perfetto trace through its protobuf text form.
"""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from google.protobuf import text_format
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from nprof.export import ExportOptions, export_profile
from nprof.profile import Profile
from tests.conftest import tiny_profile

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("NPROF_REGEN_GOLDEN") == "1"


def fixed_tiny() -> Profile:
    p = tiny_profile()
    return replace(p, info=replace(p.info, created="2026-01-01T00:00:00+00:00"))


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with NPROF_REGEN_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file (NPROF_REGEN_GOLDEN=1 to update)"


def _render_dir(root: Path, suffix: str) -> str:
    parts = []
    for f in sorted(root.rglob("*")):
        if f.is_dir():
            continue
        rel = f.relative_to(root).as_posix()
        if f.suffix == ".parquet":
            rows = pq.read_table(f).to_pylist()
            body = orjson.dumps({"schema": str(pq.read_schema(f)), "rows": rows}, option=orjson.OPT_INDENT_2).decode()
        else:
            body = f.read_text()
        parts.append(f"=== {rel}\n{body.rstrip()}\n")
    return "\n".join(parts)


@pytest.mark.parametrize("fmt,ext", [("summary-text", "txt"), ("summary-json", "json")])
def test_summary_to_stdout(fmt: str, ext: str) -> None:
    out = io.StringIO()
    assert export_profile(fixed_tiny(), fmt, stdout=out) is None
    check(f"tiny.{fmt}.{ext}", out.getvalue())


def test_json(tmp_path: Path) -> None:
    path = export_profile(fixed_tiny(), "json", tmp_path / "ntff.json")
    text = path.read_text()
    data = orjson.loads(text)
    assert set(data) == {"summary", "instruction", "dma", "warning", "finding"}
    assert data["summary"][0]["total_time"] == pytest.approx(4.5e-7)
    first = data["instruction"][0]
    assert list(first)[:7] == ["timestamp", "duration", "label", "opcode", "operands", "hlo_name",
                               "nki_source_location"]  # fmt: skip
    assert first["label"] == "TensorMatrix (MultiplyMoving)" and first["deps"] == [1]
    assert [d["bytes"] for d in data["dma"]] == [4096, 1024]
    check("tiny.json", text)


def test_json_in_small_chunks_is_identical(tmp_path: Path) -> None:
    a = export_profile(fixed_tiny(), "json", tmp_path / "a.json")
    b = export_profile(fixed_tiny(), "json", tmp_path / "b.json", ExportOptions(chunk_rows=1))
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("fmt,suffix", [("parquet", ".parquet"), ("csv", ".csv")])
def test_table_directories(tmp_path: Path, fmt: str, suffix: str) -> None:
    out = export_profile(fixed_tiny(), fmt, tmp_path / "out")
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob(f"*{suffix}"))
    assert "profile/instructions" + suffix in files and "analysis/findings" + suffix in files
    assert len(files) == 13  # 4 profile tables + 9 analysis passes
    manifest = orjson.loads((out / "manifest.json").read_text())
    assert manifest["files"]["profile/dma" + suffix] == 2
    check(f"tiny.{fmt}.txt", _render_dir(out, suffix))


@pytest.mark.parametrize("flows", [False, True])
def test_perfetto(tmp_path: Path, flows: bool) -> None:
    path = export_profile(fixed_tiny(), "perfetto", tmp_path / "ntff.pftrace", ExportOptions(show_flows=flows))
    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    check(f"tiny.perfetto{'-flows' if flows else ''}.txt", text_format.MessageToString(trace))


def test_parquet_directory_reads_with_duckdb(tmp_path: Path) -> None:
    import duckdb

    out = export_profile(fixed_tiny(), "parquet", tmp_path / "ntff_parquet")
    rows = duckdb.sql(
        f"SELECT engine, sum(duration) FROM '{out}/profile/instructions.parquet' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert rows == [("tensor", 200), ("vector", 100)]
    bound = duckdb.sql(f"SELECT value FROM '{out}/analysis/summary.parquet' WHERE name = 'bound'").fetchall()
    assert bound == [("compute",)]
