"""Stamping out replayed loop iterations in bulk: what `nprof.nki.replay.replay` does per iteration, for all of them.

Contract: `stamp(builder, events, ints, step, first, last)` makes the builder requests of iterations
first..last-1 of a loop whose template (`replay.template`: events, the integers of iteration first-1, their step)
is known, and leaves the builder exactly as calling `replay.replay` for each iteration would: the same
instructions (operands, attrs, dependencies, DMA queues, sources), tile names, allocator state and allocation
records, dependency-tracker state and loaded matmul weights. It is used only where no enclosing loop is being
logged (then nothing else observes the individual requests).

How: the tiles are placed by the builder's own allocator, iteration by iteration in event order (allocations
and frees only: no tile objects); every operand's integers are computed for all iterations at once (numpy); one
call of compiled code (`nprof.nki.depbatch`) registers every instruction with the dependency tracker's core and
makes the matmul decisions in order; the `Instruction`s are then built from the results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Engine, Instruction, Opcode, Space
from nprof.nki import depbatch
from nprof.nki.alloc import OutOfMemory
from nprof.nki.deps import ONCHIP_MEMORY
from nprof.nki.tiles import MAX_ALLOC_RECORDS

if TYPE_CHECKING:
    from nprof.nki.trace import ProgramBuilder

_FIELDS = ("space", "tensor", "dtype", "offset", "partitions", "free", "partition_start", "partition_stride")
_ACCESS_SET = [Access.__dict__[f].__set__ for f in _FIELDS]  # (slots: frozen __init__ is twice as slow)
_INSTR_FIELDS = ("engine", "opcode", "outs", "ins", "attrs", "deps", "queue", "source", "layer", "hlo_name")
_INSTR_SET = [Instruction.__dict__[f].__set__ for f in _INSTR_FIELDS]


def _access(space: Space, tensor: str, dtype: str, offset: int, parts: int, free: Any, start: int, stride: int
            ) -> Access:  # fmt: skip
    """Access(...) with the same field values, built through the slot descriptors."""
    a = object.__new__(Access)
    s0, s1, s2, s3, s4, s5, s6, s7 = _ACCESS_SET
    s0(a, space), s1(a, tensor), s2(a, dtype), s3(a, offset), s4(a, parts), s5(a, free), s6(a, start), s7(a, stride)
    return a


def _instruction(*values: Any) -> Instruction:
    ins = object.__new__(Instruction)
    for setter, value in zip(_INSTR_SET, values, strict=True):
        setter(ins, value)
    return ins


class _Codes(dict[Any, int]):
    """Small-int codes of names and dtypes (equal strings, equal codes)."""

    def of(self, value: Any) -> int:
        code = self.get(value)
        if code is None:
            code = self[value] = len(self)
        return code


class _Template:
    """The loop body's events turned into a stream row with holes (see depbatch) and operand descriptions."""

    def __init__(self, builder: ProgramBuilder, events: list[Any]) -> None:
        self.builder = builder
        self.codes = _Codes()
        self.row: list[int] = []
        self.holes: dict[str, list[tuple[int, int]]] = {"int": [], "tile": [], "name": []}  # (row position, col)
        self.tile_of_hole: list[int] = []  # tile of each "tile" hole
        self.tiles: list[tuple[Space, str, tuple[int, ...], int, int, int | None, int]] = []
        self.steps: list[tuple[Any, ...]] = []  # allocation order: ("a", t) / ("m", t, source) / ("f", t)
        self.ops: list[tuple[Any, ...]] = []  # per event index: what builds its instructions
        self.operands: list[tuple[Any, ...]] = []
        self.col = 0  # next integer column
        self.per_iteration = 0  # instructions at most
        self.width = 0  # longest access encoding
        for ev in events:
            self._event(ev)

    def _event(self, ev: tuple[Any, ...]) -> None:
        kind, b = ev[0], self.builder
        if kind == "alloc":
            shape, dtype, space, axis = ev[1], ev[2], ev[3], ev[4]
            nbytes, align, _ = b.placement(shape, dtype, space, axis)
            parts = shape[axis] if shape else 1
            self.tiles.append((space, dtype, shape, axis, nbytes, align, parts))
            self.steps.append(("a", len(self.tiles) - 1))
        elif kind == "mat":
            self.steps.append(("m", ev[1][1], ev[2]))
            self.row += (depbatch.MAT, ev[1][1])
        elif kind == "free":
            self.steps.append(("f", ev[1][1]))
        elif kind == "app":
            _, engine, opcode, outs_k, ins_k, attrs_, source = ev
            outs = [self._operand(k) for k in outs_k]  # (the integers are logged outs first, then ins)
            ins = [self._operand(k) for k in ins_k]
            queue = -1
            if opcode is Opcode.DMA_DIRECT2D:
                queue = b._dma_sites.setdefault(source, len(b._dma_sites)) % b.preset.dma_queues
            self.row += (depbatch.APP, len(self.ops), int(opcode is Opcode.TRANSPOSE), len(ins), len(outs))
            for k in (*ins, *outs):
                self._encode(k)
            self.ops.append((engine, opcode, tuple(outs), tuple(ins), attrs_, queue, source))
            self.per_iteration += 1
        else:  # "mm"
            _, stat_k, mov_k, out_k, asked, checked, placed, source = ev
            stat, mov, out = self._operand(stat_k), self._operand(mov_k), self._operand(out_k)
            fixed = placed[0] == "P"
            self.row += (depbatch.MM, len(self.ops), int(asked), int(checked), 0 if fixed else 1,
                         placed[1] if fixed else placed[2])  # fmt: skip
            for k in (stat, mov, out):
                self._encode(k)
            self.ops.append((None, None, (out,), (stat, mov), None, -1, source))
            self.per_iteration += 2

    def _operand(self, key: tuple[Any, ...]) -> int:
        """Number an operand; its two integers are the next two columns."""
        self.operands.append((key, self.col))
        self.col += 2
        return len(self.operands) - 1

    def _encode(self, k: int) -> None:
        """Append operand k's access to the row, holes where it varies."""
        key, col = self.operands[k]
        row, holes, codes = self.row, self.holes, self.codes
        if key[0] == "H":
            _, tensor, dtype, parts, free = key
            sid = self.builder._deps._hbm_memory(tensor)
            row += (codes.of(("n", tensor)), codes.of(("d", dtype)), sid, ITEMSIZE[dtype], 0, parts, 0, 0, len(free))
            holes["int"] += [(len(row) - 5, col), (len(row) - 2, col + 1)]
        else:
            space, dtype, parts, free = key[1], key[3], key[4], key[5]
            name = codes.of(("n", key[2])) if key[0] == "P" else 0
            row += (name, codes.of(("d", dtype)), ONCHIP_MEMORY[space], ITEMSIZE[dtype], 0, parts, 0, 1, len(free))
            holes["int"].append((len(row) - 3, col + 1))
            if key[0] == "P":
                holes["int"].append((len(row) - 5, col))
            else:
                holes["tile"].append((len(row) - 5, col))
                self.tile_of_hole.append(key[2][1])
                holes["name"].append((len(row) - 9, key[2][1]))
        for pair in free:
            row += pair
        self.width = max(self.width, 7 + 2 * len(free))


def _place(builder: ProgramBuilder, t: _Template, iterations: int) -> tuple[np.ndarray, list[list[str]]]:
    """Place every iteration's tiles with the builder's allocator, in event order: (byte offsets [iterations,
    tiles], names); allocation records and the tile counter as the plain replay leaves them."""
    offsets = np.zeros((iterations, len(t.tiles)), np.int64)
    names: list[list[str]] = []
    records = builder.allocations
    here = None
    for j in range(iterations):
        row_names = [""] * len(t.tiles)
        row_off = [0] * len(t.tiles)
        for step in t.steps:
            tile = t.tiles[step[1]]
            allocator = builder._sbuf if tile[0] is Space.SBUF else builder._psum
            if step[0] == "a":
                builder._counter += 1
                row_names[step[1]] = f"{'sbuf' if tile[0] is Space.SBUF else 'psum'}_{builder._counter}"
            elif step[0] == "m":
                try:
                    offset = allocator.alloc(tile[4], tile[5])
                except OutOfMemory as err:
                    raise builder.over_capacity(_stand_in(builder, tile), err) from None
                row_off[step[1]] = offset
                if len(records) < MAX_ALLOC_RECORDS:
                    source = step[2]
                    if source is None:
                        here = here or builder.source()
                        source = here
                    records.append([str.__str__(tile[0]), row_names[step[1]], offset, tile[4], tile[6], source])
            else:
                allocator.free(row_off[step[1]])
        offsets[j] = row_off
        names.append(row_names)
    return offsets, names


def _stand_in(builder: ProgramBuilder, tile: tuple[Any, ...]) -> Any:
    """A tile object for the over-capacity message."""
    from nprof.nki.tensor import OnChip

    return OnChip(tile[0], "", tile[1], tile[2], tile[3], -1, 0, builder)


def _stream(t: _Template, values: np.ndarray, offsets: np.ndarray, names: list[list[str]]) -> np.ndarray:
    """One stream row per iteration: the template's row with its holes filled."""
    stream = np.tile(np.asarray(t.row, np.int64), (len(values), 1))
    at, col = np.asarray(t.holes["int"], np.int64).reshape(-1, 2).T
    stream[:, at] = values[:, col]
    at, col = np.asarray(t.holes["tile"], np.int64).reshape(-1, 2).T
    stream[:, at] = offsets[:, np.asarray(t.tile_of_hole, np.int64)] + values[:, col]
    if t.holes["name"]:
        codes = t.codes
        name_codes = np.asarray([[codes.of(("n", n)) for n in row] for row in names], np.int64)
        at, tile = np.asarray(t.holes["name"], np.int64).T
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
    _instructions(builder, t, values.tolist(), offsets.tolist(), names, out[:n].tolist(), deps, dep_off[: n + 1])
    if state[4] == -2:
        builder._stationary = None
    elif state[4] >= 0:
        first_new = len(builder._instructions) - n
        ldw = builder._instructions[first_new + int(state[4])]
        builder._stationary = (ldw.ins[0], first_new + int(state[4]))


def _instructions(builder: ProgramBuilder, t: _Template, values: list[list[int]], offsets: list[list[int]],
                  names: list[list[str]], made: list[list[int]], deps: np.ndarray, dep_off: np.ndarray
                  ) -> None:  # fmt: skip
    """Append the `Instruction`s depbatch made (rows of `made`) to the builder's list."""
    layer, hlo = (builder._scopes[-1][0], builder._scopes[-1][1]) if builder._scopes else (None, None)
    bounds = dep_off.tolist()
    flat = deps[: bounds[-1]].tolist()
    operands = t.operands
    cache: dict[int, Access] = {}
    row_j = -1
    append = builder._instructions.append
    hbm = Space.HBM
    accumulate = ((("accumulate", False),), (("accumulate", True),))

    def access(k: int) -> Access:
        a = cache.get(k)
        if a is None:
            key, col = operands[k]
            x, y = vals[col], vals[col + 1]
            if key[0] == "H":
                a = _access(hbm, key[1], key[2], x, key[3], key[4], 0, y)
            elif key[0] == "P":
                a = _access(key[1], key[2], key[3], x, key[4], key[5], y, 1)
            else:
                tile = key[2][1]
                a = _access(key[1], tile_names[tile], key[3], tile_off[tile] + x, key[4], key[5], y, 1)
            cache[k] = a
        return a

    for i, (ev, j, what, acc) in enumerate(made):
        if j != row_j:
            row_j, vals, tile_off, tile_names = j, values[j], offsets[j], names[j]
            cache.clear()
        engine, opcode, outs, ins, attrs_, queue, source = t.ops[ev]
        dep = tuple(flat[bounds[i] : bounds[i + 1]])
        if what == 0:
            made_outs, made_ins = tuple(map(access, outs)), tuple(map(access, ins))
            append(_instruction(engine, opcode, made_outs, made_ins, attrs_, dep, queue, source, layer, hlo))
        elif what == 1:
            append(_instruction(Engine.TENSOR, Opcode.LDWEIGHTS, (), (access(ins[0]),), (), dep, -1, source, layer,
                                hlo))  # fmt: skip
        else:
            append(_instruction(Engine.TENSOR, Opcode.MATMUL, (access(outs[0]),), (access(ins[0]), access(ins[1])),
                                accumulate[acc], dep, -1, source, layer, hlo))  # fmt: skip
