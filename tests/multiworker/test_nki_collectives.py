"""The kernel language's collective calls: recorded instructions, CC-core placement, trace-time errors."""

from __future__ import annotations

import pytest

import nprof.nki.language as nl
from nprof import nki
from nprof.arch.isa import Engine, Opcode
from nprof.errors import KernelError
from nprof.nki.trace import ProgramBuilder
from tests.multiworker.kit import collective_program


def _trace(kernel, in_shape=(8, 8), out_shape=(8, 8)):
    b = ProgramBuilder("k")
    x = b.hbm_tensor("x", in_shape, "float32", kind="input")
    out = b.hbm_tensor("out", out_shape, "float32", kind="output")
    b.call(kernel, x, out)
    return b.build()


def test_instruction_fields() -> None:
    prog = collective_program("reduce_scatter", (8, 8), (2, 8), op="maximum", group=(1, 3, 2, 0))
    (ins,) = [i for i in prog.instructions if i.opcode is Opcode.REDUCE_SCATTER]
    assert ins.engine is Engine.CC and ins.attr("op") == "maximum" and ins.attr("group") == (0, 1, 2, 3)
    assert ins.ins[0].nbytes == 8 * 8 * 4 and ins.outs[0].elements == 16
    assert ins.deps and ins.source and ins.source.endswith(".py:" + ins.source.rsplit(":", 1)[1])


def test_round_robin_over_cc_cores_and_explicit_core() -> None:
    def kernel(x, out):
        a = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nki.collectives.all_reduce(a, x)
        b = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nki.collectives.all_reduce(b, a)
        nki.collectives.all_reduce(out, b, cc_core=5)

    prog = _trace(kernel)
    assert [i.queue for i in prog.instructions if i.opcode is Opcode.ALL_REDUCE] == [0, 1, 5]
    again = _trace(kernel)  # deterministic per traced program
    assert [i.queue for i in again.instructions] == [i.queue for i in prog.instructions]


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda x, out: nki.collectives.all_reduce(out, nl.load(x)), "must be an HBM tensor"),
        (lambda x, out: nki.collectives.all_gather(out, x, replica_group=[0, 1]), "must hold (ranks x) src"),
        (lambda x, out: nki.collectives.all_reduce(out, x, replica_group=[0, 0]), "distinct ranks"),
        (lambda x, out: nki.collectives.all_reduce(out, x, op="bogus"), "unsupported ALU operator"),
    ],
)
def test_trace_time_errors(call, message: str) -> None:
    with pytest.raises(KernelError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _trace(call)
