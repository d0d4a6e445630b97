"""Telling the recorders of enclosing loops what stamped iterations did, as `nprof.nki.replay.replay` would.

Contract: `tell(builder, order, operands, chunk)` appends to every recorder being logged (the builder's `_rec` and
its parents) exactly the events and integers it would have logged had the chunk's iterations been replayed one
by one: per iteration, in the loop body's event order, `alloc` (the recorder numbers the tile), `mat` and `free`
of the iteration's tiles, and one `app` event per instruction made (a replayed matmul is logged as its LDWEIGHTS
and MATMUL instructions, as `_emit_matmul` appends them without a log of its own). Operands are keyed as
`Recorder._access` keys them: HBM as they are, a tile of the iteration by the recorder's number for it, a tile
from before the loop by the recorder's number when the recorder knows it (its integers then relative to the
tile's byte offset), else by name. The recorders' tile tables are not touched: the iteration's tiles are dead
when it ends, so nothing later can name them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.arch.isa import Engine, Opcode

if TYPE_CHECKING:
    from nprof.nki.replay import Recorder
    from nprof.nki.stamp_chunk import StampedChunk
    from nprof.nki.trace import ProgramBuilder

_ACCUMULATE = ((("accumulate", False),), (("accumulate", True),))


def tell(builder: ProgramBuilder, order: list[tuple[Any, ...]], operands: list[tuple[Any, ...]],
         chunk: StampedChunk) -> None:  # fmt: skip
    """See module doc."""
    here: list[str | None] = []
    rec: Recorder | None = builder._rec
    while rec is not None:
        _tell_one(builder, rec, order, operands, chunk, here)
        rec = rec.parent


def _keys(rec: Recorder, operands: list[tuple[Any, ...]]) -> tuple[list[Any], list[int]]:
    """Per operand: its fixed key in `rec`'s log, or the child tile index (int) for a tile of the iteration; and
    the shift of its first integer (minus the byte offset of a known tile from before the loop)."""
    keys: list[Any] = []
    shift: list[int] = []
    for key, _ in operands:
        if key[0] == "T":
            keys.append(key[2][1])
            shift.append(0)
            continue
        hit = rec._named(key[2]) if key[0] == "P" else None
        if hit is None:
            keys.append(key)
            shift.append(0)
        else:
            keys.append(("T", key[1], (rec.iteration - hit[0], hit[1]), key[3], key[4], key[5]))
            shift.append(-hit[2].byte_offset)
    return keys, shift


class _Teller:
    """Tells one recorder the chunk's iterations (see module doc)."""

    def __init__(self, builder: ProgramBuilder, rec: Recorder, operands: list[tuple[Any, ...]], chunk: StampedChunk,
                 here: list[str | None]) -> None:  # fmt: skip
        self.builder, self.rec, self.operands, self.chunk, self.here = builder, rec, operands, chunk, here
        self.keys, self.shift = _keys(rec, operands)
        self.made = chunk.made.tolist()
        self.row = 0
        self.variants: dict[tuple[int, int, int], tuple[Any, ...]] = {}  # (event, what, acc) -> its instruction

    def variant(self, op: int, what: int, acc: int) -> tuple[Any, ...]:
        """(engine, opcode, outs, ins, attrs) of the instruction `what` of event `op` (operand numbers)."""
        hit = self.variants.get((op, what, acc))
        if hit is None:
            engine, opcode, outs, ins, attrs_, _, _ = self.chunk.ops[op]
            if what == 0:
                hit = (engine, opcode, outs, ins, attrs_)
            elif what == 1:
                hit = (Engine.TENSOR, Opcode.LDWEIGHTS, (), ins[:1], ())
            else:
                hit = (Engine.TENSOR, Opcode.MATMUL, outs, ins, _ACCUMULATE[acc])
            self.variants[(op, what, acc)] = hit
        return hit

    def ints(self) -> list[int]:
        """The integers of every instruction made, in order (per operand, outs then ins: its two integers, the
        first shifted as `_keys` says)."""
        cols: list[int] = []
        shifts: list[int] = []
        operands, shift = self.operands, self.shift
        per_row = []
        for ev, _, what, acc in self.made:
            _, _, o, i, _ = self.variant(ev, what, acc)
            per_row.append(len(o) + len(i))
            for k in (*o, *i):
                col = operands[k][1]
                cols += (col, col + 1)
                shifts += (shift[k], 0)
        if not cols:
            return []
        iteration = np.repeat(self.chunk.made[:, 1], 2 * np.asarray(per_row, np.int64))
        values = self.chunk.values[iteration, np.asarray(cols, np.int64)] + np.asarray(shifts, np.int64)
        return values.tolist()

    def source(self, source: str | None) -> str | None:
        if source is None:
            if not self.here:
                self.here.append(self.builder.source())
            source = self.here[0]
        return source

    def iteration(self, order: list[tuple[Any, ...]], j: int, first: int) -> None:
        """The events of iteration j, its tiles numbered from `first` in the recorder."""
        keys = [k if not isinstance(k, int) else _tile_key(spec[0], first + k)
                for k, spec in zip(self.keys, self.operands, strict=True)]  # fmt: skip
        events = self.rec.events
        made, row = self.made, self.row
        for step in order:
            kind = step[0]
            if kind == "op":
                op = step[1]
                while row < len(made) and made[row][0] == op and made[row][1] == j:
                    _, _, what, acc = made[row]
                    eng, opc, o, i, at = self.variant(op, what, acc)
                    source = self.chunk.ops[op][6]
                    events.append(("app", eng, opc, tuple([keys[k] for k in o]), tuple([keys[k] for k in i]), at,
                                   source))  # fmt: skip
                    row += 1
            elif kind == "alloc":
                events.append(step[1])
            elif kind == "mat":
                events.append(("mat", (0, first + step[1]), self.source(step[2])))
            else:
                events.append(("free", (0, first + step[1])))
        self.row = row


def _tile_key(spec: tuple[Any, ...], number: int) -> tuple[Any, ...]:
    """The recorder's key of an operand (`spec`, keyed "T" in the chunk) on its tile numbered `number`."""
    return ("T", spec[1], (0, number), spec[3], spec[4], spec[5])


def _tell_one(builder: ProgramBuilder, rec: Recorder, order: list[tuple[Any, ...]], operands: list[tuple[Any, ...]],
              chunk: StampedChunk, here: list[str | None]) -> None:  # fmt: skip
    teller = _Teller(builder, rec, operands, chunk, here)
    per = sum(1 for step in order if step[0] == "alloc")
    base = rec.count
    rec.ints += teller.ints()
    for j in range(len(chunk.values)):
        teller.iteration(order, j, base + j * per)
    rec.count = base + per * len(chunk.values)
