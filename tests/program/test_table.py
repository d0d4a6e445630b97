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


def test_a_loaded_program_carries_the_table_it_was_read_from(tmp_path) -> None:
    from nprof.device import simulate
    from nprof.program.file import load_program, save_program
    from nprof.program.table import attached_table

    prog = sample()
    assert attached_table(prog) is None  # built from Instructions: nothing attached until asked
    loaded = load_program(save_program(prog, tmp_path / "p.neff"))
    table = attached_table(loaded)
    assert table is not None and table.equals(instruction_table(prog))
    assert decode_instructions(table, 128) == loaded.instructions
    fresh, from_file = (simulate(p, numerics=False).profile for p in (prog, loaded))
    for name in ("instructions", "dma"):  # the columnar plan of the file equals the plan of its Instructions
        assert getattr(from_file, name).equals(getattr(fresh, name))
