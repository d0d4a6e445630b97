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
        self.first = 0  # the recorder's number of the iteration's first tile
        self.vals: list[int] = []
        self.made_keys: dict[int, Any] = {}

    def key_of(self, k: int) -> Any:
        hit = self.made_keys.get(k)
        if hit is None:
            key = self.keys[k]
            if isinstance(key, int):
                spec = self.operands[k][0]
                key = ("T", spec[1], (0, self.first + key), spec[3], spec[4], spec[5])
            hit = self.made_keys[k] = key
        return hit

    def source(self, source: str | None) -> str | None:
        if source is None:
            if not self.here:
                self.here.append(self.builder.source())
            source = self.here[0]
        return source

    def ops(self, op: int, j: int) -> None:
        """The `app` events of the instructions event `op` made in iteration j."""
        engine, opcode, outs, ins, attrs_, _, source = self.chunk.ops[op]
        made, rec, operands, shift, vals = self.made, self.rec, self.operands, self.shift, self.vals
        while self.row < len(made) and made[self.row][0] == op and made[self.row][1] == j:
            what, acc = made[self.row][2], made[self.row][3]
            if what == 0:
                o, i, eng, opc, at = outs, ins, engine, opcode, attrs_
            elif what == 1:
                o, i, eng, opc, at = (), ins[:1], Engine.TENSOR, Opcode.LDWEIGHTS, ()
            else:
                o, i, eng, opc, at = outs, ins, Engine.TENSOR, Opcode.MATMUL, _ACCUMULATE[acc]
            for k in (*o, *i):
                col = operands[k][1]
                rec.ints.append(vals[col] + shift[k])
                rec.ints.append(vals[col + 1])
            rec.events.append(("app", eng, opc, tuple(map(self.key_of, o)), tuple(map(self.key_of, i)), at, source))
            self.row += 1

    def iteration(self, order: list[tuple[Any, ...]], j: int, vals: list[int], first: int) -> None:
        self.vals, self.first, self.made_keys = vals, first, {}
        events = self.rec.events
        for step in order:
            kind = step[0]
            if kind == "alloc":
                events.append(step[1])
            elif kind == "mat":
                events.append(("mat", (0, first + step[1]), self.source(step[2])))
            elif kind == "free":
                events.append(("free", (0, first + step[1])))
            else:
                self.ops(step[1], j)


def _tell_one(builder: ProgramBuilder, rec: Recorder, order: list[tuple[Any, ...]], operands: list[tuple[Any, ...]],
              chunk: StampedChunk, here: list[str | None]) -> None:  # fmt: skip
    teller = _Teller(builder, rec, operands, chunk, here)
    per = sum(1 for step in order if step[0] == "alloc")
    base = rec.count
    values = chunk.values.tolist()
    for j, vals in enumerate(values):
        teller.iteration(order, j, vals, base + j * per)
    rec.count = base + per * len(values)
