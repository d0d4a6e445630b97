"""The plan is computed once per distinct instruction signature: equal instructions share it, nothing leaks; the
vectorised builder equals the per-instruction reference (tests/device/reference_plan.py)."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset
from nprof.container import open_container
from nprof.device import simulate
from nprof.device.memory import Memory
from nprof.device.plan import Plan, build_plan
from nprof.device.rowcodes import row_codes
from nprof.device.schedule import schedule
from nprof.errors import NprofError
from nprof.program.file import save_program
from nprof.program.model import Program, TensorDecl
from tests.device.reference_plan import reference_plan
from tests.device.test_schedule_exact import PRESETS, random_program


def _sb(offset: int = 0, n: int = 128, tensor: str = "t") -> Access:
    return Access(Space.SBUF, tensor, "bfloat16", offset, 128, ((1, n),))


def _program(instrs: list[Instruction]) -> Program:
    return Program("p", "trn1", (TensorDecl("x", (128, 128), "bfloat16", "input"),), tuple(instrs))


def _act(out: Access, src: Access, func: str = "exp", deps: tuple[int, ...] = ()) -> Instruction:
    return Instruction(Engine.SCALAR, Opcode.ACTIVATE, (out,), (src,), attrs(func=func), deps)


def test_fresh_equal_operands_share_one_signature_and_differences_are_kept() -> None:
    instrs = [_act(_sb(256), _sb(0)), _act(_sb(256), _sb(0)), _act(_sb(512), _sb(0)), _act(_sb(256), _sb(0), "tanh")]
    plan = build_plan(_program(instrs), get_preset("trn1"))
    assert plan.code.tolist() == [0, 0, 1, 2]
    assert plan.operands[0] == plan.operands[1] != plan.operands[2]
    assert plan.operands[3].endswith("func=tanh")
    assert plan.opcodes == ["ACTIVATE"] * 4


def test_the_first_malformed_instruction_is_reported_even_when_its_signature_repeats() -> None:
    bad = Instruction(Engine.VECTOR, Opcode.MATMUL, (_sb(),), (_sb(), _sb()))
    with pytest.raises(NprofError, match="instruction 1 "):
        build_plan(_program([_act(_sb(256), _sb(0)), bad, bad]), get_preset("trn1"))


def test_dma_rows_come_from_each_transfers_own_operands() -> None:
    h = Access(Space.HBM, "x", "bfloat16", 0, 128, ((1, 128),), 0, 128)
    load = Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (_sb(),), (h,), queue=0)
    spill = Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (h,), (_sb(),), attrs(spill=True), queue=1)
    dma = simulate(_program([load, spill, load]), numerics=False).profile.dma.to_pydict()
    assert dma["direction"] == ["hbm->sbuf", "sbuf->hbm", "hbm->sbuf"]
    assert dma["tensor"] == ["x", "x", "x"]
    assert dma["is_spill"] == [False, True, False]


def test_memory_views_are_shared_by_equal_accesses_and_stay_live() -> None:
    mem = Memory(_program([]), get_preset("trn1"))
    a, b = _sb(64, 4), _sb(64, 4)
    assert a is not b and mem.view(a) is mem.view(b)
    mem.write(a, 3.0)
    assert float(mem.read(b)[5, 2]) == 3.0


def _table_program(program: Program, tmp_path: Path) -> Program:
    """`program` carrying the Arrow instruction table its file stores (as a loaded or columnar program would)."""
    path = save_program(program, tmp_path / "p.neff")
    box = open_container(path, "nprof-program", 1, "program", lambda found: None)
    try:
        table = box.read_table("instructions")
    finally:
        box.close()
    carrier = replace(program)
    object.__setattr__(carrier, "_instruction_table", table)
    return carrier


def _assert_same_plan(fast: Plan, slow: Plan, what: str) -> None:
    for f in fields(fast):
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"{what}: {f.name}"
        elif isinstance(a, pa.Array):
            assert a.equals(b), f"{what}: {f.name}"
        else:
            assert a == b, f"{what}: {f.name}"


def test_the_vectorised_plan_equals_the_per_instruction_reference_on_random_programs(tmp_path: Path) -> None:
    """From Instruction objects and from the program file's table: the same plan, field by field, and the same
    schedule (start and end of every instruction)."""
    rng = np.random.default_rng(41)
    for case in range(400):
        program = random_program(rng, 60 if case % 4 else 400, reach=30 if case % 3 else 0, queues=16)
        preset = PRESETS[case % len(PRESETS)]
        slow = reference_plan(program, preset)
        fast = build_plan(program, preset)
        _assert_same_plan(fast, slow, f"case {case}")
        if case % 8 == 0:
            _assert_same_plan(build_plan(_table_program(program, tmp_path), preset), slow, f"case {case}, table")
        a, b = schedule(fast), schedule(slow)
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end), f"case {case}"


def test_the_table_source_builds_no_instruction_and_names_sources_in_errors(tmp_path: Path) -> None:
    bad = replace(Instruction(Engine.VECTOR, Opcode.MATMUL, (_sb(),), (_sb(), _sb())), source="k.py:7")
    program = _table_program(_program([_act(_sb(256), _sb(0)), bad]), tmp_path)
    object.__setattr__(program, "instructions", ())  # nothing may read them
    with pytest.raises(NprofError, match=r"instruction 1 \(MATMUL, k.py:7\)"):
        build_plan(program, get_preset("trn1"))


def test_row_codes_are_exact_even_when_every_hash_collides() -> None:
    rng = np.random.default_rng(3)
    cols = [rng.integers(0, 3, 500), rng.integers(-2, 2, 500)]
    fast = row_codes(cols)
    slow = row_codes(cols, hasher=lambda columns, n: np.zeros(n, np.uint64))
    assert all(np.array_equal(a, b) for a, b in zip(fast, slow, strict=True))
    seen: dict[tuple, int] = {}
    expected = [seen.setdefault((int(a), int(b)), len(seen)) for a, b in zip(*cols, strict=True)]
    assert fast[0].tolist() == expected
    assert fast[1].tolist() == [expected.index(k) for k in range(len(seen))]


def test_the_matmul_peak_dtype_equals_the_reference_for_every_dtype_mix() -> None:
    def mm(a: str, b: str) -> Instruction:
        st = Access(Space.SBUF, "w", a, 0, 128, ((1, 128),))
        mv = Access(Space.SBUF, "x", b, 4096, 128, ((1, 128),))
        ps = Access(Space.PSUM, "p", "float32", 0, 128, ((1, 128),))
        return Instruction(Engine.TENSOR, Opcode.MATMUL, (ps,), (st, mv))

    kinds = ("float32", "bfloat16", "float8_e4m3", "float8_e5m2")
    seen = set()
    for a in kinds:
        for b in kinds:
            for c in ("float32", "float8_e4m3"):
                program = _program([mm(a, b), mm(c, c)])
                fast = build_plan(program, get_preset("trn2"))
                assert fast.matmul_dtype == reference_plan(program, get_preset("trn2")).matmul_dtype
                seen.add(fast.matmul_dtype)
    assert seen == {"float32", "float8", "bfloat16"}


def test_an_empty_program_has_an_empty_plan() -> None:
    plan = build_plan(_program([]), get_preset("trn1"))
    assert plan.n == 0 and plan.rw.shape == (0, 6) and plan.operands == [] and plan.matmul_dtype == "bfloat16"
    assert simulate(_program([]), numerics=False).latencies_ns == (0,)
