"""The vectorised operand text (device.optext) equals `accinfo.access_text` on random operands."""

from __future__ import annotations

import numpy as np

from nprof.arch.isa import DTYPES, Access, Engine, Instruction, Opcode, Space
from nprof.device.accinfo import access_text
from nprof.device.columns import instruction_columns
from nprof.device.optext import operand_texts


def _random_access(rng: np.random.Generator) -> Access:
    space = [Space.HBM, Space.SBUF, Space.PSUM][int(rng.integers(0, 3))]
    dims = int(rng.integers(0, 4))
    free = tuple((int(rng.choice([0, 1, 2, 3, 64, 512])), int(rng.integers(1, 9))) for _ in range(dims))
    dtype = str(rng.choice(DTYPES))
    offset = int(rng.choice([0, 1, 7, 128, 4096, 123457]))
    start = int(rng.integers(0, 64)) if space is not Space.HBM else 0
    pstride = int(rng.choice([0, 1, 512, 640])) if space is Space.HBM else 1
    return Access(space, str(rng.choice(["a", "w_sb", "acc"])), dtype, offset, int(rng.integers(1, 129)), free,
                  start, pstride)  # fmt: skip


def test_operand_texts_equal_access_text_on_random_operands() -> None:
    rng = np.random.default_rng(5)
    accesses = [_random_access(rng) for _ in range(3000)]
    instrs = [Instruction(Engine.VECTOR, Opcode.TENSOR_COPY, (), (a,)) for a in accesses]
    cols = instruction_columns(instrs)
    texts = operand_texts(cols.acc).to_pylist()
    for a, code in zip(accesses, cols.ins.tolist(), strict=True):
        assert texts[code] == access_text(a)
