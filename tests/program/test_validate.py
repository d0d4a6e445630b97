"""The program validation layer: wrongly typed or out-of-range stored fields are one-line FormatErrors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nprof.container import open_container, write_container
from nprof.errors import NprofError
from nprof.program.file import FORMAT, SCHEMA_VERSION, load_program, save_program
from tests.program.test_file import sample


def _rewrite(tmp_path: Path, manifest: dict[str, Any], change: Callable[[dict[str, pa.Table]], None]) -> Path:
    box = open_container(save_program(sample(), tmp_path / "k.neff"), FORMAT, SCHEMA_VERSION, "program")
    tables = {n: box.read_table(n) for n in box.table_names}
    m = {k: v for k, v in box.manifest.items() if k not in ("format", "schema_version")}
    box.close()
    change(tables)
    return write_container(tmp_path / "bad.neff", FORMAT, SCHEMA_VERSION, {**m, **manifest}, tables)


def _ins_field(row: int, side: str, field: str, value: Any) -> Callable[[dict[str, pa.Table]], None]:
    def change(tables: dict[str, pa.Table]) -> None:
        t = tables["instructions"]
        col = t.column(side).to_pylist()
        col[row][0][field] = value
        tables["instructions"] = t.set_column(
            t.schema.get_field_index(side), side, pa.array(col, t.schema.field(side).type)
        )

    return change


@pytest.mark.parametrize(
    ("manifest", "change", "message"),
    [
        ({"sbuf_bytes": -1}, None, "sbuf_bytes -1 is outside"),
        ({"sbuf_bytes": 10**9}, None, "sbuf_bytes 1000000000 is outside"),
        ({"psum_bytes": "2048"}, None, "psum_bytes must be a whole number"),
        ({"preset": "trn9"}, None, "unknown preset"),
        ({"name": None}, None, "name must be a string"),
        ({}, _ins_field(2, "ins", "partitions", 0), "partitions 0 is outside"),
        ({}, _ins_field(2, "ins", "partition_start", 127), "past the 128 partitions"),
        ({}, _ins_field(0, "ins", "offset", -3), "offset -3 is outside"),
        ({}, _ins_field(0, "ins", "tensor", None), "tensor must be a string"),
    ],
)
def test_bad_programs(tmp_path: Path, manifest: dict[str, Any], change: Any, message: str) -> None:
    path = _rewrite(tmp_path, manifest, change or (lambda t: None))
    with pytest.raises(NprofError, match=message) as err:
        load_program(path)
    assert "\n" not in str(err.value)


def test_negative_tensor_size_and_null_queue(tmp_path: Path) -> None:
    def shape(tables: dict[str, pa.Table]) -> None:
        t = tables["tensors"]
        tables["tensors"] = t.set_column(
            t.schema.get_field_index("shape"), "shape", pa.array([[4, -8], [4, 4], [4, 8]])
        )

    with pytest.raises(NprofError, match="size -8 is outside"):
        load_program(_rewrite(tmp_path, {}, shape))

    def queue(tables: dict[str, pa.Table]) -> None:
        t = tables["instructions"]
        tables["instructions"] = t.set_column(
            t.schema.get_field_index("queue"), "queue", pa.array([None, -1, -1, 0], pa.int32())
        )

    with pytest.raises(NprofError, match="queue must be a whole number"):
        load_program(_rewrite(tmp_path, {}, queue))


def test_deeply_nested_attrs_are_refused(tmp_path: Path) -> None:
    def attrs(tables: dict[str, pa.Table]) -> None:
        t = tables["instructions"]
        values = t.column("attrs").to_pylist()
        values[0] = "[" * 100_000 + "]" * 100_000
        tables["instructions"] = t.set_column(t.schema.get_field_index("attrs"), "attrs", pa.array(values, pa.string()))

    with pytest.raises(NprofError, match="invalid program file"):
        load_program(_rewrite(tmp_path, {}, attrs))


def test_columnar_checks_of_the_exact_schema_and_rowwise_checks_of_another(tmp_path: Path) -> None:
    """A file with the schema nprof writes is checked by columns (a queue out of range is still named); a file
    whose columns have other types is checked row by row, and a good one loads the same program."""

    def queue(tables: dict[str, pa.Table]) -> None:
        t = tables["instructions"]
        tables["instructions"] = t.set_column(
            t.schema.get_field_index("queue"), "queue", pa.array([99, -1, -1, 0], pa.int32())
        )

    with pytest.raises(NprofError, match="instruction 0 queue 99 is outside"):
        load_program(_rewrite(tmp_path, {}, queue))

    def widened(tables: dict[str, pa.Table]) -> None:
        t = tables["instructions"]
        column = t.column("queue").cast(pa.int64())
        tables["instructions"] = t.set_column(t.schema.get_field_index("queue"), "queue", column)

    loaded = load_program(_rewrite(tmp_path, {}, widened))
    assert loaded.instructions == load_program(save_program(sample(), tmp_path / "g.neff")).instructions

    def widened_and_bad(tables: dict[str, pa.Table]) -> None:
        widened(tables)
        _ins_field(2, "ins", "partitions", 0)(tables)

    with pytest.raises(NprofError, match="partitions 0 is outside"):
        load_program(_rewrite(tmp_path, {}, widened_and_bad))
