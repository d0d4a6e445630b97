"""nprof.program.lazy.Instructions behaves as the tuple of its instructions, making chunks into objects only when
an element is read, and only the chunk read."""

from __future__ import annotations

import pickle

import pytest

from nprof.arch.isa import Engine, Instruction, Opcode
from nprof.program.lazy import Instructions


class _Chunk:
    """A chunk of `n` EVENT_SEMAPHOREs whose deps tell their index; counts its materializations."""

    def __init__(self, start: int, n: int) -> None:
        self.start, self.n, self.made = start, n, 0

    def __len__(self) -> int:
        return self.n

    def materialize(self) -> list[Instruction]:
        self.made += 1
        return [_sem(self.start + i) for i in range(self.n)]

    def in_bounds(self, elements: dict[str, int]) -> bool:
        return True

    def columns(self) -> None:
        raise AssertionError("not used here")


def _sem(i: int) -> Instruction:
    return Instruction(Engine.SYNC, Opcode.EVENT_SEMAPHORE, deps=(i - 1,) if i else ())


def test_reads_make_only_the_chunk_read() -> None:
    log = Instructions([_sem(0), _sem(1)])
    first, second = _Chunk(2, 3), _Chunk(6, 2)
    log.add_chunk(first)
    log.append(_sem(5))
    log.add_chunk(second)
    assert len(log) == 8 and not log.materialized and first.made == second.made == 0
    assert log[3] == _sem(3) and first.made == 1 and second.made == 0
    assert log[-1] == _sem(7) and second.made == 1
    assert log == tuple(_sem(i) for i in range(8)) and tuple(_sem(i) for i in range(8)) == log
    assert log[2:4] == (_sem(2), _sem(3)) and list(log) == [_sem(i) for i in range(8)]
    with pytest.raises(IndexError):
        log[8]


def test_frozen_copies_and_item_assignment() -> None:
    log = Instructions([_sem(0)])
    chunk = _Chunk(1, 2)
    log.add_chunk(chunk)
    frozen = log.frozen()
    log.append(_sem(3))
    log[1] = _sem(9)  # (the compiler and collectives rewrite an instruction they just made)
    assert len(frozen) == 3 and len(log) == 4
    assert log[1] == _sem(9) and frozen[1] == _sem(1)
    assert [s for s, _ in frozen.segments()] == [0, 1]
    assert pickle.loads(pickle.dumps(frozen)) == tuple(_sem(i) for i in range(3))


def test_empty_chunks_and_segments() -> None:
    log = Instructions([_sem(0), _sem(1)])
    log.add_chunk(_Chunk(2, 3))
    log.add_chunk(_Chunk(5, 0))  # (an empty chunk adds nothing)
    log.append(_sem(5))
    assert len(log) == 6 and log[5] == _sem(5) and log[4] == _sem(4)
    assert [(start, len(seg)) for start, seg in log.segments()] == [(0, 2), (2, 3), (5, 1)]
