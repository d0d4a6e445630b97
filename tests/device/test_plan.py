"""The plan is computed once per distinct instruction signature: equal instructions share it, nothing leaks."""

from __future__ import annotations

import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset
from nprof.device import simulate
from nprof.device.memory import Memory
from nprof.device.plan import build_plan
from nprof.errors import NprofError
from nprof.program.model import Program, TensorDecl


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
