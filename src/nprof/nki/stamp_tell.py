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

from collections.abc import Callable
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


class Told:
    """The events a replay of a stamped chunk's iterations would have logged in one recorder, made on demand (an
    outer loop's log compares them, and lays them out only for the log it replays or stamps). Two are equal when
    their events are (a sufficient test on what makes them: the loop body's events, the instructions made, the
    operand keys in the recorder, the recorder's first tile number)."""

    __slots__ = ("_events", "_signature", "chunk", "first", "keys", "mat_sources", "operands", "order", "per")

    def __init__(self, builder: ProgramBuilder, rec: Recorder, order: list[tuple[Any, ...]],
                 operands: list[tuple[Any, ...]], chunk: StampedChunk, here: list[str | None]) -> None:  # fmt: skip
        self.order, self.operands, self.chunk = order, operands, chunk
        self.keys, shift = _keys(rec, operands)
        self.first = rec.count
        self.per = sum(1 for step in order if step[0] == "alloc")
        self.mat_sources = [_source(builder, step[2], here) for step in order if step[0] == "mat"]
        self._events: list[tuple[Any, ...]] | None = None
        self._signature: tuple[Any, ...] | None = None
        rec.ints += _ints(self, shift)
        rec.count = self.first + self.per * len(chunk.values)

    def signature(self) -> tuple[Any, ...]:
        if self._signature is None:
            made = self.chunk.made
            self._signature = (self.first, self.per, made.shape, made.tobytes(), self.order, self.chunk.ops,
                               [key if key[0] == "T" else None for key, _ in self.operands], self.keys,
                               self.mat_sources)  # fmt: skip
        return self._signature

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Told) and (other is self or self.signature() == other.signature())

    __hash__ = None  # type: ignore[assignment]

    def own_tiles(self) -> bool:
        """Do its operands name only tiles of the recorder's iteration (or from before the recorder's loop)?"""
        return all(isinstance(k, int) or k[0] != "T" or k[2][0] == 0 for k in self.keys)

    def events(self) -> list[tuple[Any, ...]]:
        """The events, in order (see module doc)."""
        if self._events is None:
            out: list[tuple[Any, ...]] = []
            self.walk(out.append, lambda *app: out.append(("app", *app)))
            self._events = out
        return self._events

    def walk(self, event: Callable[[tuple[Any, ...]], Any], app: Callable[..., Any]) -> None:
        """Call `event(ev)` for each alloc, mat and free event and `app(engine, opcode, out keys, in keys, attrs,
        source)` for each instruction's "app" event, in order (what `events` lays out)."""
        made = self.chunk.made.tolist()
        row = 0
        for j in range(len(self.chunk.values)):
            row = self.walk_iteration(j, made, row, event, app)

    def walk_iteration(self, j: int, made: list[list[int]], row: int, event: Callable[[tuple[Any, ...]], Any],
                       app: Callable[..., Any]) -> int:  # fmt: skip
        """`walk` for iteration j alone, its instructions from `made` (the chunk's, as lists) row `row` on; returns
        the row after its last."""
        ops = self.chunk.ops
        first = self.first + j * self.per
        keys = [k if not isinstance(k, int) else _tile_key(spec[0], first + k)
                for k, spec in zip(self.keys, self.operands, strict=True)]  # fmt: skip
        sources = iter(self.mat_sources)
        for step in self.order:
            kind = step[0]
            if kind == "op":
                op = step[1]
                while row < len(made) and made[row][0] == op and made[row][1] == j:
                    eng, opc, o, i, at = _variant(ops[op], made[row][2], made[row][3])
                    app(eng, opc, tuple([keys[k] for k in o]), tuple([keys[k] for k in i]), at, ops[op][6])
                    row += 1
            elif kind == "alloc":
                event(step[1])
            elif kind == "mat":
                event(("mat", (0, first + step[1]), next(sources), step[3]))
            else:
                event(("free", (0, first + step[1])))
        return row


def _variant(op: tuple[Any, ...], what: int, acc: int) -> tuple[Any, ...]:
    """(engine, opcode, outs, ins, attrs) of the instruction `what` (0 the event's own, 1 LDWEIGHTS, 2 MATMUL) of
    a chunk event `op` (operand numbers)."""
    engine, opcode, outs, ins, attrs_, _, _ = op
    if what == 0:
        return engine, opcode, outs, ins, attrs_
    if what == 1:
        return Engine.TENSOR, Opcode.LDWEIGHTS, (), ins[:1], ()
    return Engine.TENSOR, Opcode.MATMUL, outs, ins, _ACCUMULATE[acc]


def _ints(told: Told, shift: list[int]) -> list[int]:
    """The integers of every instruction the chunk made, in order (per operand, outs then ins: its two integers,
    the first shifted as `_keys` says)."""
    chunk, operands = told.chunk, told.operands
    made = chunk.made
    if not len(made):
        return []
    variant = (made[:, 0] * 3 + made[:, 2]) * 2 + made[:, 3]
    used, local = np.unique(variant, return_inverse=True)
    lists = []
    for v in used.tolist():
        _, _, o, i, _ = _variant(chunk.ops[v // 6], (v % 6) // 2, v % 2)
        lists.append([(operands[k][1], shift[k]) for k in (*o, *i)])
    width = max(len(x) for x in lists)
    if not width:
        return []
    cols = np.zeros((len(lists), 2 * width), np.int64)
    shifts = np.zeros((len(lists), 2 * width), np.int64)
    for v, pairs in enumerate(lists):
        for p, (col, sh) in enumerate(pairs):
            cols[v, 2 * p : 2 * p + 2] = (col, col + 1)
            shifts[v, 2 * p] = sh
    valid = np.arange(2 * width)[None, :] < 2 * np.asarray([len(x) for x in lists], np.int64)[:, None]
    local = local.reshape(-1)
    keep = valid[local]
    values = chunk.values[made[:, 1][:, None], cols[local]] + shifts[local]
    return values[keep].tolist()


def _source(builder: ProgramBuilder, source: str | None, here: list[str | None]) -> str | None:
    """A tile's recorded source (the running kernel line when it has none, looked up once per stamp)."""
    if source is None:
        if not here:
            here.append(builder.source())
        source = here[0]
    return source


def _tile_key(spec: tuple[Any, ...], number: int) -> tuple[Any, ...]:
    """The recorder's key of an operand (`spec`, keyed "T" in the chunk) on its tile numbered `number`."""
    return ("T", spec[1], (0, number), spec[3], spec[4], spec[5])


def flat(events: list[Any]) -> list[tuple[Any, ...]]:
    """A log's events with every `Told` laid out."""
    if not any(type(e) is Told for e in events):
        return events
    out: list[tuple[Any, ...]] = []
    for e in events:
        if type(e) is Told:
            out += e.events()
        else:
            out.append(e)
    return out


def _tell_one(builder: ProgramBuilder, rec: Recorder, order: list[tuple[Any, ...]], operands: list[tuple[Any, ...]],
              chunk: StampedChunk, here: list[str | None]) -> None:  # fmt: skip
    rec.events.append(Told(builder, rec, order, operands, chunk, here))
