"""The instruction table (`nprof.program.table`): the program file's schema, cached, decoded back exactly."""

from __future__ import annotations

import pyarrow as pa
import pytest

from nprof.program.table import INSTRUCTIONS, attach_table, decode_instructions, instruction_table
from tests.program.test_file import sample


def test_table_schema_rows_and_round_trip() -> None:
    prog = sample()
    table = instruction_table(prog)
    assert table.schema.equals(INSTRUCTIONS)
    assert table.num_rows == len(prog.instructions)
    assert table.column("deps").to_pylist() == [list(i.deps) for i in prog.instructions]
    assert table.column("queue").to_pylist() == [5, -1, -1, 0]
    assert table.column("ins").to_pylist()[2][0]["free"] == [{"stride": 16, "size": 2}, {"stride": 1, "size": 4}]
    assert decode_instructions(table, 128) == prog.instructions


def test_table_is_cached_and_attach_checks_schema() -> None:
    prog = sample()
    assert instruction_table(prog) is instruction_table(prog)
    with pytest.raises(ValueError, match="INSTRUCTIONS schema"):
        attach_table(prog, pa.table({"engine": ["dma"]}))
