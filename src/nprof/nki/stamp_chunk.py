"""Stamped loop iterations as a columnar chunk of a Program's instructions (`nprof.program.lazy.Chunk`).

Contract: `StampedChunk(ops, operands, values, offsets, names, made, deps, dep_off, scope)` holds what
`nprof.nki.stamp` computed: the loop body's instruction templates (`ops`: per event engine, opcode, outs and ins
operand numbers, attrs, queue, source; a matmul event (engine None) makes an optional LDWEIGHTS and a MATMUL),
its operand descriptions (`operands`: key as `nprof.nki.replay` logs it, first integer column), every
iteration's integers (`values` [iterations, columns]), tile byte offsets and names, and the instructions made
(`made` rows: event, iteration, 0 the event's instruction / 1 LDWEIGHTS / 2 MATMUL, accumulate) with their
dependencies in CSR form. `materialize()` builds exactly the `Instruction`s `replay.replay` would have appended;
`in_bounds` checks the HBM operands vectorised; `columns(start)` gives the simulator's columns
(`nprof.device.columns.Columns`) without building an `Instruction` (operands not yet deduplicated: the merge
does that, `nprof.device.columns_merge`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space

_FIELDS = ("space", "tensor", "dtype", "offset", "partitions", "free", "partition_start", "partition_stride")
_ACCESS_SET = [Access.__dict__[f].__set__ for f in _FIELDS]  # (slots: frozen __init__ is twice as slow)
_INSTR_FIELDS = ("engine", "opcode", "outs", "ins", "attrs", "deps", "queue", "source", "layer", "hlo_name")
_INSTR_SET = [Instruction.__dict__[f].__set__ for f in _INSTR_FIELDS]
_ACCUMULATE = ((("accumulate", False),), (("accumulate", True),))
_SPACE_CODE = {Space.HBM: 0, Space.SBUF: 1, Space.PSUM: 2}  # nprof.arch.isa.SPACES


def make_access(space: Space, tensor: str, dtype: str, offset: int, parts: int, free: Any, start: int, stride: int
            ) -> Access:  # fmt: skip
    """Access(...) with the same field values, built through the slot descriptors (twice as fast as the frozen
    dataclass's __init__; for the tracer's replay paths)."""
    a = object.__new__(Access)
    s0, s1, s2, s3, s4, s5, s6, s7 = _ACCESS_SET
    s0(a, space), s1(a, tensor), s2(a, dtype), s3(a, offset), s4(a, parts), s5(a, free), s6(a, start), s7(a, stride)
    return a


def _instruction(*values: Any) -> Instruction:
    ins = object.__new__(Instruction)
    for setter, value in zip(_INSTR_SET, values, strict=True):
        setter(ins, value)
    return ins


class StampedChunk:
    """Instructions of stamped loop iterations, kept as columns (see module doc)."""

    def __init__(self, ops: list[tuple[Any, ...]], operands: list[tuple[Any, ...]], values: np.ndarray,
                 offsets: np.ndarray, names: list[list[str]], made: np.ndarray, deps: np.ndarray, dep_off: np.ndarray,
                 scope: tuple[str | None, str | None]) -> None:  # fmt: skip
        self.ops, self.operands, self.values, self.offsets, self.names = ops, operands, values, offsets, names
        self.made, self.deps, self.dep_off, self.scope = made, deps, dep_off, scope

    def __len__(self) -> int:
        return len(self.made)

    def _operand_numbers(self, ev: int, what: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(outs, ins) operand numbers of an instruction made by event `ev` (`what` as in `made`)."""
        _, _, outs, ins, _, _, _ = self.ops[ev]
        if what == 0:
            return outs, ins
        return ((), ins[:1]) if what == 1 else (outs, ins)

    def _make(self, k: int, vals: list[int], tile_off: list[int], tile_names: list[str]) -> Access:
        key, col = self.operands[k]
        x, y = vals[col], vals[col + 1]
        if key[0] == "H":
            return make_access(Space.HBM, key[1], key[2], x, key[3], key[4], 0, y)
        if key[0] == "P":
            return make_access(key[1], key[2], key[3], x, key[4], key[5], y, 1)
        tile = key[2][1]
        return make_access(key[1], tile_names[tile], key[3], tile_off[tile] + x, key[4], key[5], y, 1)

    def operand(self, row: int, which: str, position: int) -> Access:
        """The Access of operand `position` of the `which` ("ins"/"outs") of instruction `row` of the chunk."""
        ev, j, what = (int(v) for v in self.made[row, :3])
        outs, ins = self._operand_numbers(ev, what)
        k = (ins if which == "ins" else outs)[position]
        return self._make(k, self.values[j].tolist(), self.offsets[j].tolist(), self.names[j])

    def kinds(self) -> list[tuple[Opcode, tuple[Access, ...]]]:
        """(opcode, read operands of the first iteration) of each kind of instruction the chunk may hold (for
        scans of opcodes and operand dtypes, which do not change from iteration to iteration)."""
        vals, tile_off, tile_names = self.values[0].tolist(), self.offsets[0].tolist(), self.names[0]
        out: list[tuple[Opcode, tuple[Access, ...]]] = []
        for _, opcode, _, ins, _, _, _ in self.ops:
            made = tuple(self._make(k, vals, tile_off, tile_names) for k in ins)
            out += [(opcode, made)] if opcode is not None else [(Opcode.LDWEIGHTS, made[:1]), (Opcode.MATMUL, made)]
        return out

    def materialize(self) -> list[Instruction]:
        """The chunk's `Instruction`s (see module doc)."""
        layer, hlo = self.scope
        bounds = self.dep_off.tolist()
        flat = self.deps[: bounds[-1]].tolist()
        values, offsets, names = self.values.tolist(), self.offsets.tolist(), self.names
        cache: dict[int, Access] = {}
        row_j = -1
        vals: list[int] = []
        tile_off: list[int] = []
        tile_names: list[str] = []
        made: list[Instruction] = []
        append = made.append

        def access(k: int) -> Access:
            a = cache.get(k)
            if a is None:
                a = cache[k] = self._make(k, vals, tile_off, tile_names)
            return a

        for i, (ev, j, what, acc) in enumerate(self.made.tolist()):
            if j != row_j:
                row_j, vals, tile_off, tile_names = j, values[j], offsets[j], names[j]
                cache.clear()
            engine, opcode, outs, ins, attrs_, queue, source = self.ops[ev]
            dep = tuple(flat[bounds[i] : bounds[i + 1]])
            if what == 0:
                made_outs, made_ins = tuple(map(access, outs)), tuple(map(access, ins))
                append(_instruction(engine, opcode, made_outs, made_ins, attrs_, dep, queue, source, layer, hlo))
            elif what == 1:
                append(_instruction(Engine.TENSOR, Opcode.LDWEIGHTS, (), (access(ins[0]),), (), dep, -1, source,
                                    layer, hlo))  # fmt: skip
            else:
                append(_instruction(Engine.TENSOR, Opcode.MATMUL, (access(outs[0]),), (access(ins[0]), access(ins[1])),
                                    _ACCUMULATE[acc], dep, -1, source, layer, hlo))  # fmt: skip
        return made

    def in_bounds(self, elements: dict[str, int]) -> bool:
        """Does every HBM operand of every iteration stay within its declared tensor (`Program.validate`'s rule)?"""
        hbm = [(key, col) for key, col in self.operands if key[0] == "H"]
        if not hbm:
            return True
        if any(key[1] not in elements for key, _ in hbm):
            return False
        cols = np.asarray([col for _, col in hbm], np.int64)
        parts = np.asarray([key[3] for key, _ in hbm], np.int64)
        reach = [[(n - 1) * stride for stride, n in key[4]] for key, _ in hbm]  # (negative strides reach down)
        down = np.asarray([sum(r for r in rs if r < 0) for rs in reach], np.int64)
        up = np.asarray([sum(r for r in rs if r > 0) for rs in reach], np.int64)
        size = np.asarray([elements[key[1]] for key, _ in hbm], np.int64)
        offset, stride = self.values[:, cols], self.values[:, cols + 1]
        across = (parts - 1) * stride
        lowest = offset + down + np.minimum(across, 0)
        return bool((lowest >= 0).all() and (offset + up + np.maximum(across, 0) < size).all())

    def columns(self) -> Any:
        """The chunk as `nprof.device.columns.Columns` (one access row per operand of every iteration)."""
        from nprof.device.columns import Columns

        made = self.made
        n = len(made)
        variant = (made[:, 0] * 3 + made[:, 2]) * 2 + made[:, 3]
        used, local = np.unique(variant, return_inverse=True)
        table = _VariantTable(self)
        for v in used.tolist():
            table.add(v // 6, (v % 6) // 2, v % 2)
        local = local.reshape(-1)
        ins_off, ins = table.operand_csr(local, made[:, 1], "ins", len(self.operands))
        outs_off, outs = table.operand_csr(local, made[:, 1], "outs", len(self.operands))
        layer, hlo = self.scope
        return Columns(
            table.array("opcode")[local], list(Opcode), table.array("engine")[local], list(Engine),
            table.array("attrs")[local], table.attrs_values, table.array("queue")[local], self.dep_off.astype(np.int64),
            self.deps[: int(self.dep_off[-1])].astype(np.int64), ins_off, ins, outs_off, outs, self._access_columns(),
            pa.array(table.sources, pa.string()).take(pa.array(table.array("source")[local])),
            _constant(layer, n), _constant(hlo, n),
        )  # fmt: skip

    def _access_columns(self) -> Any:
        """AccessColumns of operand k of iteration j at row j * operands + k."""
        from nprof.device.columns import AccessColumns

        iterations, nk = len(self.values), len(self.operands)
        names: dict[str, int] = {}
        dtypes: dict[str, int] = {}
        fixed_name = np.full(nk, -1, np.int64)
        tile_of = np.full(nk, -1, np.int64)
        space, dtype, parts = (np.zeros(nk, np.int64) for _ in range(3))
        hbm = np.zeros(nk, bool)
        for k, (key, _) in enumerate(self.operands):
            hbm[k] = key[0] == "H"
            space[k] = 0 if hbm[k] else _SPACE_CODE[key[1]]
            dtype[k] = dtypes.setdefault(key[2] if hbm[k] else key[3], len(dtypes))
            parts[k] = key[3] if hbm[k] else key[4]
            if key[0] == "T":
                tile_of[k] = key[2][1]
            else:
                fixed_name[k] = names.setdefault(key[1] if hbm[k] else key[2], len(names))
        tile_names = np.asarray([[names.setdefault(x, len(names)) for x in row] for row in self.names], np.int64)
        cols = np.asarray([col for _, col in self.operands], np.int64)
        x, y = self.values[:, cols], self.values[:, cols + 1]
        tiles = np.maximum(tile_of, 0)
        is_tile = tile_of >= 0
        tensor = np.where(is_tile, tile_names[:, tiles] if tile_names.size else 0, fixed_name)
        offset = x + np.where(is_tile, self.offsets[:, tiles] if self.offsets.size else 0, 0)
        frees = [key[4] if key[0] == "H" else key[5] for key, _ in self.operands]
        nf = np.asarray([len(f) for f in frees], np.int64)
        f_off = np.zeros(iterations * nk + 1, np.int64)
        np.cumsum(np.tile(nf, iterations), out=f_off[1:])
        dims = [d for f in frees for d in f]
        stride = np.tile(np.asarray([d[0] for d in dims], np.int64), iterations)
        size = np.tile(np.asarray([d[1] for d in dims], np.int64), iterations)
        flat = lambda a: np.broadcast_to(a, (iterations, nk)).reshape(-1)  # noqa: E731
        return AccessColumns(
            flat(space), flat(tensor), list(names), flat(dtype), list(dtypes), flat(offset), flat(parts),
            flat(np.where(hbm, 0, y)), flat(np.where(hbm, y, 1)), f_off, stride, size,
        )  # fmt: skip


def _constant(value: str | None, n: int) -> pa.Array:
    """A string column of `n` copies of `value` (nulls for None)."""
    if value is None:
        return pa.nulls(n, pa.string())
    return pa.array([value], pa.string()).take(pa.array(np.zeros(n, np.int64)))


class _VariantTable:
    """Per distinct (event, what, accumulate) of a chunk: opcode, engine, attrs, queue, source and operands."""

    def __init__(self, chunk: StampedChunk) -> None:
        self.chunk = chunk
        self.rows: dict[str, list[Any]] = {"opcode": [], "engine": [], "attrs": [], "queue": [], "source": []}
        self.attrs_values: list[Any] = []
        self.sources: list[str | None] = []
        self.operands: dict[str, list[tuple[int, ...]]] = {"ins": [], "outs": []}
        self._attrs: dict[Any, int] = {}
        self._sources: dict[str | None, int] = {}

    def add(self, ev: int, what: int, acc: int) -> None:
        engine, opcode, _, _, attrs_, queue, source = self.chunk.ops[ev]
        if what == 1:
            engine, opcode, attrs_, queue = Engine.TENSOR, Opcode.LDWEIGHTS, (), -1
        elif what == 2:
            engine, opcode, attrs_, queue = Engine.TENSOR, Opcode.MATMUL, _ACCUMULATE[acc], -1
        outs, ins = self.chunk._operand_numbers(ev, what)
        code = self._attrs.setdefault(attrs_, len(self._attrs))
        if code == len(self.attrs_values):
            self.attrs_values.append(attrs_)
        where = self._sources.setdefault(source, len(self._sources))
        if where == len(self.sources):
            self.sources.append(source)
        for name, value in (("opcode", _OPCODE_CODE[opcode]), ("engine", _ENGINE_CODE[engine]), ("attrs", code),
                            ("queue", queue), ("source", where)):  # fmt: skip
            self.rows[name].append(value)
        self.operands["ins"].append(ins)
        self.operands["outs"].append(outs)

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self.rows[name], np.int64)

    def operand_csr(self, local: np.ndarray, iteration: np.ndarray, which: str, nk: int) -> tuple[np.ndarray, ...]:
        """(offsets, access rows) of the `which` operands of the rows with variants `local` and `iteration`s."""
        lists = self.operands[which]
        width = max((len(x) for x in lists), default=0)
        pad = np.full((len(lists), max(width, 1)), -1, np.int64)
        for v, x in enumerate(lists):
            pad[v, : len(x)] = x
        lengths = np.asarray([len(x) for x in lists], np.int64)[local] if lists else np.zeros(0, np.int64)
        offsets = np.zeros(len(local) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        numbers = pad[local]
        keep = numbers >= 0
        rows = (iteration[:, None] * nk + numbers)[keep]
        return offsets, rows.astype(np.int64)


_OPCODE_CODE = {o: k for k, o in enumerate(Opcode)}
_ENGINE_CODE = {e: k for k, e in enumerate(Engine)}
