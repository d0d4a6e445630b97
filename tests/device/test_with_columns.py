"""`with_columns`: a program of Instruction objects given its columns and, made from them, its instruction table.
The table equals the one `instruction_table` builds from the objects (the plain per-instruction writer), the
plan equals the one built from the objects, and the simulated profile is the same, on random programs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space
from nprof.arch.presets import get_preset
from nprof.device import simulate
from nprof.device.columns import instruction_columns, program_columns, with_columns
from nprof.device.plan import build_plan
from nprof.program.model import Program, TensorDecl
from nprof.program.table import instruction_table
from tests.device.test_plan import _assert_same_plan
from tests.device.test_schedule_exact import PRESETS, random_program

# attrs that Python compares equal but JSON writes apart (1, 1.0, True): both writers keep the first one met
_ATTRS = [(), (("accumulate", True),), (("accumulate", 1),), (("op", "add"),), (("operand0", 1.0),),
          (("operand0", 1),), (("axes", (1, 2)),), (("op0", "multiply"), ("operand0", 0.5))]  # fmt: skip


def _access(rng: np.random.Generator) -> Access:
    """An operand drawn from a small pool of values (equal values repeat, as fresh objects or shared)."""
    space = [Space.HBM, Space.SBUF, Space.PSUM][int(rng.integers(0, 3))]
    dims = int(rng.integers(0, 4))
    free = tuple((int(rng.choice([1, 2, 64])), int(rng.choice([1, 8, 128]))) for _ in range(dims))
    return Access(space, str(rng.choice(["a", "b", "t"])), str(rng.choice(["float32", "bfloat16", "int32"])),
                  int(rng.choice([0, 4, 512])), int(rng.choice([1, 32, 128])), free, int(rng.choice([0, 1])),
                  int(rng.choice([1, 128])))  # fmt: skip


def _random_instructions(rng: np.random.Generator, n: int) -> tuple[Instruction, ...]:
    """`n` instructions of random fields (not a runnable program: the columns do not check semantics)."""
    pool = [_access(rng) for _ in range(12)]
    out = []
    for i in range(n):
        ops = [pool[int(k)] if rng.random() < 0.5 else _access(rng) for k in rng.integers(0, 12, size=4)]
        k_in, k_out = int(rng.integers(0, 4)), int(rng.integers(0, 3))
        deps = tuple(sorted({int(d) for d in rng.integers(0, i, size=int(rng.integers(0, 4)))})) if i else ()
        text = [None, "k.py:3", "k.py:9"]
        out.append(Instruction(
            [Engine.VECTOR, Engine.DMA, Engine.TENSOR][i % 3], [Opcode.TENSOR_TENSOR, Opcode.MATMUL][i % 2],
            tuple(ops[:k_out]), tuple(ops[k_out:k_out + k_in]), _ATTRS[int(rng.integers(0, len(_ATTRS)))], deps,
            int(rng.integers(-1, 16)), text[int(rng.integers(0, 3))], text[int(rng.integers(0, 3))],
            None if rng.random() < 0.5 else f"%n{i % 5}",
        ))  # fmt: skip
    return tuple(out)


def test_the_table_made_from_the_columns_equals_the_one_made_from_the_objects() -> None:
    rng = np.random.default_rng(5)
    for case in range(150):
        instrs = _random_instructions(rng, int(rng.integers(0, 80)))
        program = Program("p", "trn1", (), instrs)
        reference = instruction_table(replace(program))  # (no table cached: built from the objects)
        got = with_columns(replace(program))
        assert instruction_table(got).equals(reference), f"case {case}"
        assert program_columns(got) is program_columns(got)  # cached, not rebuilt


def test_the_plan_schedule_and_profile_equal_those_of_the_objects() -> None:
    rng = np.random.default_rng(6)
    for case in range(120):
        base = random_program(rng, 60 if case % 3 else 300, reach=30 if case % 2 else 0, queues=16)
        source = [None, "k.py:1", "k.py:2"]
        program = replace(base, instructions=tuple(
            replace(ins, source=source[i % 3], layer=source[(i + 1) % 3]) for i, ins in enumerate(base.instructions)
        ))  # fmt: skip
        preset = PRESETS[case % len(PRESETS)]
        columnar = with_columns(replace(program))
        _assert_same_plan(build_plan(columnar, preset), build_plan(replace(program), preset), f"case {case}")
        if case % 10 == 0:
            a, b = simulate(columnar, numerics=False), simulate(replace(program), numerics=False)
            assert a.latencies_ns == b.latencies_ns, f"case {case}"
            assert a.profile.instructions.equals(b.profile.instructions), f"case {case}"


def test_cached_columns_are_read_only_and_a_table_already_carried_is_kept() -> None:
    program = with_columns(random_program(np.random.default_rng(1), 40))
    cols = program_columns(program)
    with pytest.raises(ValueError, match="read-only"):
        cols.deps_flat[:1] = 0
    build_plan(program, get_preset("trn1"))  # the plan reads them without writing
    again = replace(program)
    table = instruction_table(again)
    assert with_columns(again) is again and instruction_table(again) is table  # a carried table is not replaced
    assert program_columns(again).n == instruction_columns(again.instructions).n


def test_an_empty_program() -> None:
    program = with_columns(Program("e", "trn1", (TensorDecl("x", (1,), "float32", "input"),), ()))
    assert instruction_table(program).num_rows == 0 and program_columns(program).n == 0


def test_operands_built_in_one_pass_equal_those_built_one_by_one() -> None:
    """`AccessColumns.accesses` (the plan's template representatives) gives what `access` gives, for any subset
    of operand codes (repeats too), and both give back the operands the columns were made from."""
    rng = np.random.default_rng(5)
    for _ in range(30):
        instrs = _random_instructions(rng, int(rng.integers(1, 60)))
        cols = instruction_columns(instrs)
        acc = cols.acc
        codes = rng.integers(0, acc.operands, size=int(rng.integers(1, 2 * acc.operands + 1)))
        built = acc.accesses(codes)
        assert sorted(built) == sorted(set(codes.tolist()))
        assert all(built[k] == acc.access(k) for k in built)
        everything = acc.accesses(np.arange(acc.operands))
        for i, ins in enumerate(instrs):
            assert cols.instruction(i, everything).ins == ins.ins and cols.instruction(i).outs == ins.outs
