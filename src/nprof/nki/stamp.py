"""Stamping out replayed loop iterations in bulk: what `nprof.nki.replay.replay` does per iteration, for all of them.

Contract: `stamp(builder, events, ints, step, first, last)` makes the builder requests of iterations
first..last-1 of a loop whose template (`replay.template`: events, the integers of iteration first-1, their step)
is known, and leaves the builder exactly as calling `replay.replay` for each iteration would: the same
instructions (operands, attrs, dependencies, DMA queues, sources), tile names, allocator state and allocation
records, dependency-tracker state and loaded matmul weights; and the recorders of enclosing loops being logged
get the events a replay would have given them (`nprof.nki.stamp_tell`).

How: the tiles are placed by the builder's own allocator, iteration by iteration in event order (allocations
and frees only: no tile objects); every operand's integers are computed for all iterations at once (numpy); one
call of compiled code (`nprof.nki.depbatch`) registers every instruction with the dependency tracker's core and
makes the matmul decisions in order. The results are kept as a columnar chunk of the builder's instructions
(`nprof.nki.stamp_chunk`), made into `Instruction` objects only when someone reads them.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Opcode, Space
from nprof.nki import alloc_batch, depbatch
from nprof.nki.alloc import OutOfMemory
from nprof.nki.deps import ONCHIP_MEMORY
from nprof.nki.stamp_chunk import StampedChunk
from nprof.nki.stamp_tell import Told, tell
from nprof.nki.tiles import MAX_ALLOC_RECORDS

if TYPE_CHECKING:
    from nprof.nki.trace import ProgramBuilder


_WEIGHTS_OPS = (Opcode.TRANSPOSE, Opcode.LDWEIGHTS)  # (instructions that change the loaded weights)


class _Codes(dict[Any, int]):
    """Small-int codes of names and dtypes (equal strings, equal codes; `reserve`d codes stand for strings met
    nowhere else)."""

    next = 0

    def of(self, value: Any) -> int:
        code = self.get(value)
        if code is None:
            code = self[value] = self.next
            self.next += 1
        return code

    def reserve(self, n: int) -> int:
        """The first of `n` codes no string has."""
        self.next += n
        return self.next - n


class _Template:
    """The loop body's events turned into a stream row with holes (see depbatch) and operand descriptions."""

    def __init__(self, builder: ProgramBuilder, events: list[Any]) -> None:
        self.builder = builder
        self.codes = _Codes()
        self.row = array("q")  # (int64, read by numpy without a copy)
        self.holes = {"int": array("q"), "tile": array("q"), "name": array("q")}  # row position, col (tile), ...
        self.tile_of_hole: list[int] = []  # tile of each "tile" hole
        self._segments: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # operand key -> its encoding (`_segment`)
        self._placements: dict[tuple[Any, ...], tuple[int, int | None, int]] = {}  # alloc event -> placement
        self.tiles: list[tuple[Space, str, tuple[int, ...], int, int, int | None, int]] = []
        self.steps: list[tuple[Any, ...]] = []  # allocation order: ("a", t) / ("m", t, source, where) / ("f", t)
        self.ops: list[tuple[Any, ...]] = []  # per event index: what builds its instructions
        self.order: list[tuple[Any, ...]] = []  # the events: ("alloc", event) / ("mat", tile, source, where) / ("free",
        # tile) / ("op", index into ops), for recorders of enclosing loops (nprof.nki.stamp_tell)
        self.operands: list[tuple[Any, ...]] = []
        self.col = 0  # next integer column
        self.per_iteration = 0  # instructions at most
        self.width = 0  # longest access encoding
        self.op_at, self.tile_at = array("q"), array("q")  # row positions holding an op index / a tile number
        self.hole_operand: list[int] = []  # operand of each "tile" hole
        for ev in events:
            self._event(ev)

    def _event(self, ev: tuple[Any, ...]) -> None:
        if type(ev) is Told:  # an inner loop's stamped iterations (nprof.nki.stamp_tell), not laid out as tuples
            self._told(ev)
            return
        kind = ev[0]
        if kind == "alloc":
            shape, dtype, space, axis = ev[1], ev[2], ev[3], ev[4]
            placed = self._placements.get(ev)
            if placed is None:
                placed = self._placements[ev] = self.builder.placement(shape, dtype, space, axis)
            nbytes, align, _ = placed
            parts = shape[axis] if shape else 1
            self.tiles.append((space, dtype, shape, axis, nbytes, align, parts))
            self.steps.append(("a", len(self.tiles) - 1))
            self.order.append(("alloc", ev))
        elif kind == "mat":
            self.steps.append(("m", ev[1][1], ev[2], ev[3]))
            self.order.append(("mat", ev[1][1], ev[2], ev[3]))
            self.tile_at.append(len(self.row) + 1)
            self.row.extend((depbatch.MAT, ev[1][1]))
        elif kind == "free":
            self.steps.append(("f", ev[1][1]))
            self.order.append(("free", ev[1][1]))
        elif kind == "app":
            self._app(*ev[1:])
        else:  # "mm"
            _, stat_k, mov_k, out_k, asked, checked, placed, source = ev
            stat, mov, out = self._operand(stat_k), self._operand(mov_k), self._operand(out_k)
            fixed = placed[0] == "P"
            self.row.extend((depbatch.MM, len(self.ops), int(asked), int(checked), 0 if fixed else 1,
                             placed[1] if fixed else placed[2]))  # fmt: skip
            for k in (stat, mov, out):
                self._encode(k)
            self.order.append(("op", len(self.ops)))
            self.ops.append((None, None, (out,), (stat, mov), None, -1, source))
            self.per_iteration += 2

    def _app(self, engine: Any, opcode: Opcode, outs_k: tuple[Any, ...], ins_k: tuple[Any, ...], attrs_: Any,
             source: str | None) -> None:  # fmt: skip
        """An "app" event: one instruction with operand keys `outs_k`, `ins_k`."""
        b, operands, col = self.builder, self.operands, self.col
        first, n_out = len(operands), len(outs_k)  # (the integers are logged outs first, then ins)
        for key in (*outs_k, *ins_k):
            operands.append((key, col))
            col += 2
        self.col = col
        outs, ins = tuple(range(first, first + n_out)), tuple(range(first + n_out, len(operands)))
        queue = -1
        if opcode is Opcode.DMA_DIRECT2D:
            queue = b._dma_sites.setdefault(source, len(b._dma_sites)) % b.preset.dma_queues
        effect = depbatch.weights_effect(opcode, len(ins)) if opcode in _WEIGHTS_OPS else 0
        op = len(self.ops)
        self.op_at.append(len(self.row) + 1)
        self.row.extend((depbatch.APP, op, effect, len(ins), n_out))
        for k in (*ins, *outs):
            self._encode(k)
        self.order.append(("op", op))
        self.ops.append((engine, opcode, outs, ins, attrs_, queue, source))
        self.per_iteration += 1

    def _told(self, told: Told) -> None:
        """A Told's iterations in order: one whose instructions are made as the previous one's (same events,
        LDWEIGHTS and accumulate decisions) is that one's contribution shifted (`_repeat`), else walked."""
        made = told.chunk.made
        n, fixed = len(told.chunk.values), {id(k) for k in told.keys if not isinstance(k, int)}
        bounds = np.searchsorted(made[:, 1], np.arange(n + 1)).tolist()
        pattern = made[:, [0, 2, 3]]
        before, last = None, b""
        j = 0
        while j < n:
            this = pattern[bounds[j] : bounds[j + 1]].tobytes()
            if before is not None and this == last:  # a run of such iterations is copied in one go
                times = 1
                while j + times < n and pattern[bounds[j + times] : bounds[j + times + 1]].tobytes() == last:
                    times += 1
                before = self._repeat(before, told.per, fixed, times)
                j += times
                continue
            mark = self._mark()
            told.walk_iteration(j, made[bounds[j] : bounds[j + 1]].tolist(), 0, self._event, self._app)
            before, last = (mark, self._mark()), this
            j += 1

    def _mark(self) -> tuple[int, ...]:
        """The lengths of what an iteration appends to (and the column and instruction counters)."""
        h = self.holes
        return (len(self.row), len(h["int"]), len(h["tile"]), len(h["name"]), len(self.tiles), len(self.ops),
                len(self.operands), len(self.op_at), len(self.tile_at), self.col, self.per_iteration, len(self.order),
                len(self.steps))  # fmt: skip

    def _repeat(self, span: tuple[tuple[int, ...], tuple[int, ...]], per: int, fixed: set[int], times: int = 1
                ) -> tuple[tuple[int, ...], tuple[int, ...]]:  # fmt: skip
        """Append the contribution between marks `span` again `times` times, for the next iterations: copy t (1..)
        with its tiles numbered t * `per` on, its operands, columns, instructions and row positions t spans after
        the span's; returns the span of the last copy."""
        a, b = span
        drow, dops, dopd, dcol = b[0] - a[0], b[5] - a[5], b[6] - a[6], b[9] - a[9]
        t = np.arange(1, times + 1, dtype=np.int64)[:, None]  # (copy number down the rows)
        op_at = np.frombuffer(self.op_at, np.int64)[a[7] : b[7]].copy()  # (copies: the arrays grow below)
        tile_at = np.frombuffer(self.tile_at, np.int64)[a[8] : b[8]].copy()
        seg = np.tile(np.frombuffer(self.row, np.int64)[a[0] : b[0]], (times, 1))
        seg[:, op_at - a[0]] += t * dops
        seg[:, tile_at - a[0]] += t * per
        self.row.frombytes(seg.tobytes())
        self.op_at.frombytes((op_at + t * drow).tobytes())
        self.tile_at.frombytes((tile_at + t * drow).tobytes())
        operands, h0, h1 = self.operands, a[2] // 2, b[2] // 2
        moved = np.asarray([0 if id(operands[k][0]) in fixed else per for k in self.hole_operand[h0:h1]], np.int64)
        for kind, k, shift in (("int", 1, (drow, dcol)), ("tile", 2, (drow, dcol)), ("name", 3, (drow, 0))):
            holes = np.frombuffer(self.holes[kind], np.int64)[a[k] : b[k]].reshape(1, -1, 2) + t[:, :, None] * shift
            if kind == "name":
                holes[:, :, 1] += t * moved
            self.holes[kind].frombytes(holes.tobytes())
        self.tile_of_hole += (np.asarray(self.tile_of_hole[h0:h1], np.int64) + t * moved).reshape(-1).tolist()
        self.hole_operand += (np.asarray(self.hole_operand[h0:h1], np.int64) + t * dopd).reshape(-1).tolist()
        self.tiles += self.tiles[a[4] : b[4]] * times
        steps, order, ops, kept = (self.steps[a[12] : b[12]], self.order[a[11] : b[11]], self.ops[a[5] : b[5]],
                                   self.operands[a[6] : b[6]])  # fmt: skip
        for c in range(1, times + 1):
            self._copy(steps, order, ops, kept, c * per, c * dops, c * dopd, c * dcol, fixed)
        self.col += dcol * times
        self.per_iteration += (b[10] - a[10]) * times
        end = self._mark()
        return tuple(e - (y - x) for e, x, y in zip(end, a, b, strict=True)), end

    def _copy(self, steps: list[Any], order: list[Any], ops: list[Any], kept: list[Any], per: int, dops: int,
              dopd: int, dcol: int, fixed: set[int]) -> None:  # fmt: skip
        """Append one copy of a span's steps, order, ops and operands, shifted: tiles by `per`, ops by `dops`,
        operands by `dopd`, columns by `dcol` (operands of `fixed` keys keep them)."""
        self.steps += [(s[0], s[1] + per, *s[2:]) for s in steps]
        by_kind = {"op": dops, "mat": per, "free": per}
        self.order += [s if s[0] == "alloc" else (s[0], s[1] + by_kind[s[0]], *s[2:]) for s in order]
        add = dopd.__add__
        self.ops += [(e, o, tuple(map(add, outs)), tuple(map(add, ins)), at, q, src)
                     for e, o, outs, ins, at, q, src in ops]  # fmt: skip
        self.operands += [(key if id(key) in fixed else ("T", key[1], (0, key[2][1] + per), key[3], key[4], key[5]),
                           col + dcol) for key, col in kept]  # fmt: skip

    def _operand(self, key: tuple[Any, ...]) -> int:
        """Number an operand; its two integers are the next two columns."""
        self.operands.append((key, self.col))
        self.col += 2
        return len(self.operands) - 1

    def _encode(self, k: int) -> None:
        """Append operand k's access to the row, holes where it varies."""
        key, col = self.operands[k]
        seg = self._segments.get(key)
        if seg is None:
            if key[0] == "T":  # (the encoding does not depend on which tile: made once per kind of operand)
                spec = ("T", key[1], None, *key[3:])
                base = self._segments.get(spec)
                if base is None:
                    base = self._segments[spec] = self._segment(key)
                seg = self._segments[key] = (base[0], base[1], "T", key[2][1])
            else:
                seg = self._segments[key] = self._segment(key)
        row, holes = self.row, self.holes
        at = len(row)
        row += seg[0]
        ints = holes["int"]
        ints.extend((at + seg[1], col + 1))
        if seg[2] == "T":
            holes["tile"].extend((at + 4, col))
            self.tile_of_hole.append(seg[3])
            self.hole_operand.append(k)
            holes["name"].extend((at, seg[3]))
        else:
            ints.extend((at + 4, col))
        self.width = max(self.width, len(seg[0]) - 2)

    def _segment(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """(encoding with zeros at the holes, position of the second integer's hole, kind, tile of a "T" key)."""
        codes = self.codes
        if key[0] == "H":
            _, tensor, dtype, parts, free = key
            sid = self.builder._deps._hbm_memory(tensor)
            head = (codes.of(("n", tensor)), codes.of(("d", dtype)), sid, ITEMSIZE[dtype], 0, parts, 0, 0, len(free))
            return array("q", (*head, *(x for pair in free for x in pair))), 7, "H", -1
        space, dtype, parts, free = key[1], key[3], key[4], key[5]
        name = codes.of(("n", key[2])) if key[0] == "P" else 0
        head = (name, codes.of(("d", dtype)), ONCHIP_MEMORY[space], ITEMSIZE[dtype], 0, parts, 0, 1, len(free))
        return array("q", (*head, *(x for pair in free for x in pair))), 6, key[0], key[2][1] if key[0] == "T" else -1


def _place(builder: ProgramBuilder, t: _Template, iterations: int) -> tuple[np.ndarray, list[list[str]]]:
    """Place every iteration's tiles with the builder's allocator, in event order: (byte offsets [iterations,
    tiles], names); allocation records and the tile counter as the plain replay leaves them."""
    listeners = builder._sbuf.listener, builder._psum.listener
    builder._sbuf.listener = builder._psum.listener = None  # (enclosing loops' recorders are told by stamp_tell)
    try:
        return _placed(builder, t, iterations)
    finally:
        builder._sbuf.listener, builder._psum.listener = listeners


def _placed(builder: ProgramBuilder, t: _Template, iterations: int) -> tuple[np.ndarray, list[list[str]]]:
    """`_place` with the listeners off: SBUF and PSUM placed by the compiled allocator (`nprof.nki.alloc_batch`,
    each memory on its own: a step touches one), then names and allocation records."""
    offsets = np.zeros((iterations, len(t.tiles)), np.int64)
    failures = []
    for memory, allocator in ((Space.SBUF, builder._sbuf), (Space.PSUM, builder._psum)):
        steps = [(1 if step[0] == "m" else 2, step[1], t.tiles[step[1]][4], t.tiles[step[1]][5] or 0, p)
                 for p, step in enumerate(t.steps) if step[0] != "a" and t.tiles[step[1]][0] is memory]  # fmt: skip
        if not steps:
            continue
        state, starts, ends, pinned = alloc_batch.load(allocator)
        placed, starts, ends = alloc_batch.run(state, starts, ends, pinned, np.asarray(steps, np.int64), iterations,
                                               len(t.tiles))  # fmt: skip
        alloc_batch.store(allocator, state, starts, ends)
        if state[alloc_batch.FAIL]:  # (the first failure in event order is the one a replay meets)
            step = steps[int(state[alloc_batch.FAIL_R])]
            err = OutOfMemory(int(state[alloc_batch.FAIL]), int(state[alloc_batch.LIVE]), allocator.capacity)
            failures.append(((int(state[alloc_batch.FAIL_J]), step[4]), t.tiles[step[1]], err, t.steps[step[4]][3]))
        mine = [k for k, tile in enumerate(t.tiles) if tile[0] is memory]
        offsets[:, mine] = placed[:, mine]
    if failures:
        _, tile, err, where = min(failures, key=lambda f: f[0])
        raise builder.over_capacity(_stand_in(builder, tile), err, where)
    return offsets, _names(builder, t, iterations, offsets)


def _names(builder: ProgramBuilder, t: _Template, iterations: int, offsets: np.ndarray) -> list[list[str]]:
    """The tiles' names (the builder's counter advanced as `new_tile` advances it) and allocation records."""
    names: list[list[str]] = []
    records = builder.allocations
    prefix = ["sbuf" if tile[0] is Space.SBUF else "psum" for tile in t.tiles]
    mats = [step[:3] for step in t.steps if step[0] == "m"]
    here = None
    for j in range(iterations):
        counter = builder._counter
        row = [f"{prefix[k]}_{counter + k + 1}" for k in range(len(t.tiles))]
        builder._counter = counter + len(t.tiles)
        names.append(row)
        if len(records) < MAX_ALLOC_RECORDS:
            at = offsets[j].tolist()
            for _, k, source in mats:
                if len(records) >= MAX_ALLOC_RECORDS:
                    break
                if source is None:
                    here = here or builder.source()
                    source = here
                tile = t.tiles[k]
                records.append([str.__str__(tile[0]), row[k], at[k], tile[4], tile[6], source])
    return names


def _stand_in(builder: ProgramBuilder, tile: tuple[Any, ...]) -> Any:
    """A tile object for the over-capacity message."""
    from nprof.nki.tensor import OnChip

    return OnChip(tile[0], "", tile[1], tile[2], tile[3], -1, 0, builder)


def _stream(t: _Template, values: np.ndarray, offsets: np.ndarray, names: list[list[str]]) -> np.ndarray:
    """One stream row per iteration: the template's row with its holes filled."""
    stream = np.tile(np.frombuffer(t.row, np.int64), (len(values), 1))
    at, col = np.frombuffer(t.holes["int"], np.int64).reshape(-1, 2).T
    stream[:, at] = values[:, col]
    at, col = np.frombuffer(t.holes["tile"], np.int64).reshape(-1, 2).T
    stream[:, at] = offsets[:, np.array(t.tile_of_hole, np.int64)] + values[:, col]
    if t.holes["name"]:  # (the iterations' tiles have new names, each its own code)
        first = t.codes.reserve(len(names) * len(t.tiles))
        name_codes = np.arange(first, first + len(names) * len(t.tiles), dtype=np.int64).reshape(len(names), -1)
        at, tile = np.frombuffer(t.holes["name"], np.int64).reshape(-1, 2).T
        stream[:, at] = name_codes[:, tile]
    return stream


def _tracker_state(builder: ProgramBuilder, t: _Template) -> np.ndarray:
    """depbatch's `state` for the builder's loaded weights."""
    state = np.zeros(depbatch.KEY + 8 + t.width, np.int64)
    state[0], state[4] = len(builder._instructions), -1
    loaded = builder._stationary
    if loaded is not None:
        a: Access = loaded[0]
        key = [t.codes.of(("n", a.tensor)), t.codes.of(("d", a.dtype))]
        enc: list[int] = []
        builder._deps._encode((a,), enc)
        key += enc
        if len(key) <= state.shape[0] - depbatch.KEY:  # (a longer key cannot equal any of the body's)
            state[1], state[2], state[3] = 1, loaded[1], len(key)
            state[depbatch.KEY : depbatch.KEY + len(key)] = key
        else:
            state[1], state[2], state[3] = 1, loaded[1], 0
    return state


def stamp(builder: ProgramBuilder, events: list[Any], ints: list[int], step: list[int], first: int, last: int
          ) -> None:  # fmt: skip
    """Make iterations first..last-1 (see module doc)."""
    count = last - first
    if count <= 0:
        return
    builder.flush()
    t = _Template(builder, events)
    shifts = np.arange(1, count + 1, dtype=np.int64)
    values = np.asarray(ints, np.int64)[None, :] + shifts[:, None] * np.asarray(step, np.int64)[None, :]
    offsets, names = _place(builder, t, count)
    stream = _stream(t, values, offsets, names)
    state = _tracker_state(builder, t)
    made = count * t.per_iteration
    tracker = builder._deps
    tracker._count = max(tracker._count, int(state[0]))
    io = np.zeros(len(t.row) + tracker._count + made + 16, np.int64)
    out = np.zeros((made, 4), np.int64)
    dep_off = np.zeros(made + 1, np.int64)
    E, P, T, deps, n, _ = depbatch.run(tracker._e, tracker._p, tracker._h, tracker._m, tracker._t, stream, io, state,
                                       out, np.empty(4 * made + 16, np.int64), dep_off, len(t.tiles))  # fmt: skip
    tracker._e, tracker._p, tracker._t = E, P, T
    tracker._count = max(tracker._count, int(state[0]))
    layer, hlo = (builder._scopes[-1][0], builder._scopes[-1][1]) if builder._scopes else (None, None)
    chunk = StampedChunk(t.ops, t.operands, values, offsets, names, out[:n], deps, dep_off[: n + 1], (layer, hlo))
    start = len(builder._instructions)
    builder._instructions.add_chunk(chunk)
    if state[4] == -2:
        builder._stationary = None
    elif state[4] >= 0:
        row = int(state[4])
        builder._stationary = (chunk.operand(row, "ins", 0), start + row)
    if builder._rec is not None:  # an enclosing loop is being logged: told what a replay would have told it
        tell(builder, t.order, t.operands, chunk)
