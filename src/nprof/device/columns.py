"""A Program's instructions as flat, dictionary-encoded columns: what the vectorised plan reads.

Contract: `program_columns(program) -> Columns` gives one row per instruction (opcode/engine/attrs as small-int
codes into their distinct values, queue, dependency and operand lists in CSR form) and one row per *distinct*
operand (`AccessColumns`: the `Access` fields as arrays; an instruction's operands are indices into it).
Two sources give the same columns: the program's Arrow instruction table in the program file's `INSTRUCTIONS`
schema (`table_columns`, when the program carries one: loaded from a file or attached by a columnar producer;
no `Instruction` is built) and its `Instruction` objects (`instruction_columns`: C-level attribute getters and
one dictionary lookup per operand). `with_columns(program)` gives a program of `Instruction` objects (the
compiler's) its columns and, made from them, its instruction table (`program.table.columns_table`: the table
`instruction_table` builds from the objects, ~5x faster), both cached on it: the file writer and the plan
then read them and nothing converts the objects again. A producer that made the columns itself (the compiler's
list scheduler: a permutation of columns made once, `device.columns_order`) attaches them with
`attach_columns`, and `with_columns` then builds only the table.
Equal codes mean equal values: as Python compares them (the `Instruction` source) or as the file stores them
(the table source: JSON attrs text); distinct operands are numbered in order of first occurrence (ins of all
instructions, then outs, for the table source; in the order met for the `Instruction` source).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from operator import attrgetter, is_not
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.arch.isa import ITEMSIZE, SPACES, Access, Engine, Instruction, Opcode
from nprof.device.accinfo import VALUE_KEY
from nprof.device.rowcodes import padded, row_codes
from nprof.program.table import attach_table, attached_table, columns_table

_SPACE_CODE = {s.value: k for k, s in enumerate(SPACES)}
_OPCODES, _ENGINES = {o: k for k, o in enumerate(Opcode)}, {e: k for k, e in enumerate(Engine)}
_INS, _OUTS, _DEPS = attrgetter("ins"), attrgetter("outs"), attrgetter("deps")
_OPCODE, _ENGINE, _ATTRS, _QUEUE = attrgetter("opcode"), attrgetter("engine"), attrgetter("attrs"), attrgetter("queue")
_SOURCE, _LAYER, _HLO = attrgetter("source"), attrgetter("layer"), attrgetter("hlo_name")


class AccessColumns(NamedTuple):
    """One row per distinct operand: the `Access` fields (free dims in CSR form)."""

    space: np.ndarray  # int64: index into SPACES
    tensor: np.ndarray  # int64 code into tensor_names
    tensor_names: list[str]
    dtype: np.ndarray  # int64 code into dtype_names
    dtype_names: list[str]
    offset: np.ndarray
    partitions: np.ndarray
    partition_start: np.ndarray
    partition_stride: np.ndarray
    free_offsets: np.ndarray  # free dims of operand k: free_stride/free_size[free_offsets[k]:free_offsets[k + 1]]
    free_stride: np.ndarray
    free_size: np.ndarray

    @property
    def operands(self) -> int:
        return len(self.space)

    def accesses(self, codes: np.ndarray) -> dict[int, Access]:
        """The `Access` of each distinct operand in `codes` (what `access` gives, from the columns gathered once)."""
        ks = np.unique(codes)
        lo, hi = self.free_offsets[ks].tolist(), self.free_offsets[ks + 1].tolist()
        stride, size = self.free_stride.tolist(), self.free_size.tolist()
        fields = (self.space[ks], self.tensor[ks], self.dtype[ks], self.offset[ks], self.partitions[ks],
                  self.partition_start[ks], self.partition_stride[ks])  # fmt: skip
        sp, te, dt, off, parts, p0, ps = (f.tolist() for f in fields)
        spaces, tensors, dtypes = SPACES, self.tensor_names, self.dtype_names
        return {
            k: Access(spaces[sp[j]], tensors[te[j]], dtypes[dt[j]], off[j], parts[j],
                      tuple(zip(stride[lo[j] : hi[j]], size[lo[j] : hi[j]], strict=True)), p0[j], ps[j])
            for j, k in enumerate(ks.tolist())
        }  # fmt: skip

    def access(self, k: int) -> Access:
        """The `Access` of distinct operand `k`."""
        lo, hi = int(self.free_offsets[k]), int(self.free_offsets[k + 1])
        free = tuple(zip(self.free_stride[lo:hi].tolist(), self.free_size[lo:hi].tolist(), strict=True))
        return Access(
            SPACES[int(self.space[k])], self.tensor_names[int(self.tensor[k])], self.dtype_names[int(self.dtype[k])],
            int(self.offset[k]), int(self.partitions[k]), free, int(self.partition_start[k]),
            int(self.partition_stride[k]),
        )  # fmt: skip


class Columns(NamedTuple):
    """One row per instruction (see module doc); int64 arrays unless stated."""

    opcode: np.ndarray  # code into opcodes
    opcodes: list[Opcode]
    engine: np.ndarray  # code into engines
    engines: list[Engine]
    attrs: np.ndarray  # code into attrs_values
    attrs_values: list[tuple[tuple[str, Any], ...]]
    queue: np.ndarray
    deps_offsets: np.ndarray  # [n + 1]
    deps_flat: np.ndarray
    ins_offsets: np.ndarray  # [n + 1]; operands are rows of `acc`
    ins: np.ndarray
    outs_offsets: np.ndarray
    outs: np.ndarray
    acc: AccessColumns
    source: pa.Array  # string (null where none)
    layer: pa.Array
    hlo_name: pa.Array

    @property
    def n(self) -> int:
        return len(self.opcode)

    def instruction(self, i: int, accesses: dict[int, Access] | None = None) -> Instruction:
        """Instruction `i` (for the cost model and messages; deps are not needed there and left empty); its
        operands from `accesses` (`AccessColumns.accesses` of them) when given."""
        get = self.acc.access if accesses is None else accesses.__getitem__
        ins = tuple(map(get, self.ins[self.ins_offsets[i] : self.ins_offsets[i + 1]].tolist()))
        outs = tuple(map(get, self.outs[self.outs_offsets[i] : self.outs_offsets[i + 1]].tolist()))
        return Instruction(
            self.engines[int(self.engine[i])], self.opcodes[int(self.opcode[i])], outs, ins,
            self.attrs_values[int(self.attrs[i])], (), int(self.queue[i]), self.source[i].as_py(),
        )  # fmt: skip


class _Intern(dict):
    """value -> dense code in order of first lookup (`intern[value]`)."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


def value_codes(values: Iterable[Any], n: int) -> tuple[np.ndarray, list[Any]]:
    """Dense first-occurrence codes of `n` hashable values, and the distinct values (the first met of each set
    of values Python compares equal)."""
    intern = _Intern()
    codes = np.fromiter(map(intern.__getitem__, values), np.int64, n)
    return codes, list(intern)


def _offsets(lists: Sequence[Sequence[Any]]) -> np.ndarray:
    """CSR offsets [len + 1] of a sequence of sequences."""
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, lists), np.int64, len(lists)), out=offsets[1:])
    return offsets


def _csr(lists: Sequence[Sequence[Any]]) -> tuple[np.ndarray, list[Any]]:
    """(offsets [len + 1], the flattened items) of a sequence of sequences."""
    return _offsets(lists), list(chain.from_iterable(lists))


def optional_strings(items: Sequence[Any], get: Callable[[Any], str | None]) -> pa.Array:
    """String column of `get` over `items` (all-null without building a list when none has one)."""
    if not any(map(is_not, map(get, items), repeat(None))):  # C-level scan: a column of None costs little
        return pa.nulls(len(items), pa.string())
    return pa.array(list(map(get, items)), pa.string())


def _access_columns(keys: list[tuple]) -> AccessColumns:
    """AccessColumns of distinct `VALUE_KEY` tuples."""
    fields = list(zip(*keys, strict=True)) if keys else [()] * 8
    space, tensor, dtype, offset, parts, free, start, pstride = fields
    t_codes, t_names = value_codes(tensor, len(keys))
    d_codes, d_names = value_codes(dtype, len(keys))
    f_off, dims = _csr(free)
    i64 = np.int64
    return AccessColumns(
        np.fromiter(map(_SPACE_CODE.__getitem__, space), i64, len(keys)), t_codes, t_names, d_codes, d_names,
        np.asarray(offset, i64), np.asarray(parts, i64), np.asarray(start, i64), np.asarray(pstride, i64),
        f_off, np.asarray([s for s, _ in dims], i64), np.asarray([z for _, z in dims], i64),
    )  # fmt: skip


def instruction_columns(instrs: Sequence[Instruction]) -> Columns:
    """Columns of `Instruction` objects (operands interned by value, `device.accinfo.VALUE_KEY`)."""
    n = len(instrs)
    op = np.fromiter(map(_OPCODES.__getitem__, map(_OPCODE, instrs)), np.int64, n)
    eng = np.fromiter(map(_ENGINES.__getitem__, map(_ENGINE, instrs)), np.int64, n)
    attr_codes, attr_values = value_codes(map(_ATTRS, instrs), n)
    queue = np.fromiter(map(_QUEUE, instrs), np.int64, n)
    deps_lists = list(map(_DEPS, instrs))
    deps_off = _offsets(deps_lists)
    deps = np.fromiter(chain.from_iterable(deps_lists), np.int64, int(deps_off[-1]))
    ins_off, ins = _csr(list(map(_INS, instrs)))
    outs_off, outs = _csr(list(map(_OUTS, instrs)))
    intern = _Intern()
    get = intern.__getitem__
    in_codes = np.fromiter(map(get, map(VALUE_KEY, ins)), np.int64, len(ins))
    out_codes = np.fromiter(map(get, map(VALUE_KEY, outs)), np.int64, len(outs))
    return Columns(
        op, list(Opcode), eng, list(Engine), attr_codes, attr_values, queue, deps_off,
        deps, ins_off, in_codes, outs_off, out_codes, _access_columns(list(intern)),
        *(optional_strings(instrs, get) for get in (_SOURCE, _LAYER, _HLO)),
    )  # fmt: skip


def _array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _encode(column: pa.ChunkedArray, what: str, known: dict[str, Any] | None) -> tuple[np.ndarray, list[Any]]:
    """First-occurrence codes of a string column and its distinct values (mapped through `known`; an unknown
    value raises ValueError naming it)."""
    enc = pc.dictionary_encode(_array(column))
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    values = enc.dictionary.to_pylist()
    if known is None:
        return codes, values
    bad = [v for v in values if v not in known]
    if bad:
        raise ValueError(f"unknown {what} {bad[0]!r}")
    return codes, [known[v] for v in values]


def _restore(value: Any) -> Any:
    """A JSON attribute value as the Instruction holds it (lists become tuples)."""
    return tuple(map(_restore, value)) if isinstance(value, list) else value


def _list_csr(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """(offsets from 0, values) of a list column."""
    lists = _array(column)
    offsets = np.asarray(lists.offsets, np.int64)
    values = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return offsets - offsets[0], values


def _operand_rows(values: pa.StructArray) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The integer key columns of every stored operand (free dims padded) and its decoded fields."""
    field = {name: values.field(name) for name in ("space", "tensor", "dtype")}
    space_codes, spaces = _encode(field["space"], "memory space", _SPACE_CODE)
    tensor_codes, tensors = _encode(field["tensor"], "tensor", None)
    dtype_codes, dtypes = _encode(field["dtype"], "dtype", {d: d for d in ITEMSIZE})
    ints = {
        k: values.field(k).to_numpy(zero_copy_only=False).astype(np.int64)
        for k in ("offset", "partitions", "partition_start", "partition_stride")
    }
    f_off, dims = _list_csr(values.field("free"))
    stride = dims.field("stride").to_numpy(zero_copy_only=False).astype(np.int64)
    size = dims.field("size").to_numpy(zero_copy_only=False).astype(np.int64)
    fields = {
        "space": np.asarray(spaces, np.int64)[space_codes], "tensor": tensor_codes, "tensor_names": tensors,
        "dtype": dtype_codes, "dtype_names": dtypes, **ints, "f_off": f_off, "stride": stride, "size": size,
    }  # fmt: skip
    key = [fields["space"], tensor_codes, dtype_codes, *ints.values(), *padded(f_off, stride, size)]
    return key, fields


def table_columns(table: pa.Table) -> Columns:
    """Columns of an instruction table in the `INSTRUCTIONS` schema (no `Instruction` is built); ValueError on
    unknown engines, opcodes, spaces or dtypes."""
    op, opcodes = _encode(table.column("opcode"), "opcode", {o.value: o for o in Opcode})
    eng, engines = _encode(table.column("engine"), "engine", {e.value: e for e in Engine})
    attr_codes, texts = _encode(table.column("attrs"), "attrs", None)
    attrs = [tuple((k, _restore(v)) for k, v in json.loads(t)) if t else () for t in texts]
    deps_off, deps = _list_csr(table.column("deps"))
    ins_off, ins = _list_csr(table.column("ins"))
    outs_off, outs = _list_csr(table.column("outs"))
    key, f = _operand_rows(pa.concat_arrays([ins, outs]))
    codes, first = row_codes(key)
    lengths = np.diff(f["f_off"])[first]
    at = np.zeros(len(first) + 1, np.int64)
    np.cumsum(lengths, out=at[1:])
    dim_rows = np.repeat(f["f_off"][first], lengths) + (np.arange(at[-1]) - np.repeat(at[:-1], lengths))
    acc = AccessColumns(
        f["space"][first], f["tensor"][first], f["tensor_names"], f["dtype"][first], f["dtype_names"],
        f["offset"][first], f["partitions"][first], f["partition_start"][first], f["partition_stride"][first],
        at, f["stride"][dim_rows], f["size"][dim_rows],
    )  # fmt: skip
    strings = [_array(table.column(k)) for k in ("source", "layer", "hlo_name")]
    return Columns(
        op, opcodes, eng, engines, attr_codes, attrs, table.column("queue").to_numpy().astype(np.int64), deps_off,
        deps.to_numpy(zero_copy_only=False).astype(np.int64), ins_off, codes[: len(ins)], outs_off,
        codes[len(ins) :], acc, *strings,
    )  # fmt: skip


_COLUMNS_ATTR = "_instruction_columns"


def with_columns(program: Any) -> Any:
    """`program` (returned) with its columns and instruction table cached on it (see module doc); a program
    that already carries a table, or whose instructions are partly columnar chunks, is left as it is; columns a
    producer attached (`attach_columns`) are used as they are."""
    from nprof.program.lazy import Instructions

    instrs = program.instructions
    if attached_table(program) is not None or (isinstance(instrs, Instructions) and not instrs.materialized):
        return program
    cols = program.__dict__.get(_COLUMNS_ATTR)  # (a producer's, `attach_columns`)
    if cols is None:
        cols = instruction_columns(instrs)
        attach_columns(program, cols)
    attach_table(program, columns_table(cols))
    return program


def attach_columns(program: Any, cols: Columns) -> None:
    """Cache `cols` as the columns of `program` (they must be exactly what `instruction_columns` gives its
    instructions: a producer that made them another way holds that in its tests); `program_columns` and
    `with_columns` then read them and convert nothing. Their arrays are made read-only (every plan of the
    program shares them)."""
    for array in (*cols, *cols.acc):
        if isinstance(array, np.ndarray):
            array.setflags(write=False)
    object.__setattr__(program, _COLUMNS_ATTR, cols)


def attached_columns(program: Any) -> Columns | None:
    """The columns cached on `program` (`attach_columns`, `with_columns`), or None."""
    cols: Columns | None = program.__dict__.get(_COLUMNS_ATTR)
    return cols


def program_columns(program: Any) -> Columns:
    """The columns of `program`: those `with_columns` cached, else from its Arrow instruction table when it
    carries one, else its Instructions."""
    cols: Columns | None = program.__dict__.get(_COLUMNS_ATTR)
    if cols is not None:
        return cols
    table = attached_table(program)
    if table is not None:
        return table_columns(table)
    from nprof.program.lazy import Instructions

    instrs = program.instructions
    if isinstance(instrs, Instructions) and not instrs.materialized:  # columnar chunks of a trace: kept as columns
        from nprof.device.columns_merge import lazy_columns

        return lazy_columns(instrs)
    return instruction_columns(instrs)
