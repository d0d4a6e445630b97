"""A Program's instructions as one Arrow table (the program file's `instructions` schema).

Contract: `instruction_table(program)` returns a `pa.Table` with exactly the schema `INSTRUCTIONS` (the one
`nprof.program.file` writes), one row per instruction in program order:

* engine, opcode: the enum values (strings); queue: int32 (-1 when not a DMA);
* deps: list<int64> of earlier instruction indices (sorted, as the producer recorded them);
* source, layer, hlo_name: strings or null;
* attrs: JSON text of a list of [name, value] pairs ("" when none; tuples stored as lists);
* ins, outs: list<struct ACCESS> (space, tensor, dtype, offset, partitions, free: list<struct{stride, size}>,
  partition_start, partition_stride) — the `Access` fields.

The table is built once per Program and cached on it (a Program is immutable), so consumers (the file writer,
the simulator's plan) may call this freely. A producer that already holds the columns (a columnar trace)
attaches them with `attach_table(program, table)`; `instruction_table` then returns them without touching
`Program.instructions`. Instructions still partly held as columnar chunks (`nprof.program.lazy`: stamped loop
iterations of a trace) are written from the chunks' columns (`columns_table`), no `Instruction` made: the same
table as from the objects.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from nprof.arch.isa import SPACES, Access, Engine, Instruction, Opcode
from nprof.gcpause import gc_paused
from nprof.program.columns import operand_column, operand_lists

if TYPE_CHECKING:
    from nprof.program.model import Program

_FREE = pa.list_(pa.struct([("stride", pa.int64()), ("size", pa.int64())]))
ACCESS = pa.struct(
    [
        ("space", pa.string()),
        ("tensor", pa.string()),
        ("dtype", pa.string()),
        ("offset", pa.int64()),
        ("partitions", pa.int32()),
        ("free", _FREE),
        ("partition_start", pa.int32()),
        ("partition_stride", pa.int64()),
    ]
)
INSTRUCTIONS = pa.schema(
    [
        ("engine", pa.string()),
        ("opcode", pa.string()),
        ("queue", pa.int32()),
        ("deps", pa.list_(pa.int64())),
        ("source", pa.string()),
        ("layer", pa.string()),
        ("hlo_name", pa.string()),
        ("attrs", pa.string()),
        ("ins", pa.list_(ACCESS)),
        ("outs", pa.list_(ACCESS)),
    ]
)
_CACHE_ATTR = "_instruction_table"


def instruction_table(program: Program) -> pa.Table:
    """The instructions of `program` as a table in the `INSTRUCTIONS` schema (see module doc); cached."""
    cached = attached_table(program)
    if cached is not None:
        return cached
    from nprof.program.lazy import Instructions

    instrs = program.instructions
    with gc_paused():  # (millions of live objects: a full collection per batch of new lists would dominate)
        if isinstance(instrs, Instructions) and not instrs.materialized:
            parts = [_build(seg) if isinstance(seg, list) else columns_table(seg.columns()) for _, seg in
                     instrs.segments()]  # fmt: skip
            table = pa.concat_tables(parts) if parts else _build(())
        else:
            table = _build(instrs)
    attach_table(program, table)
    return table


def _text(attrs: tuple[tuple[str, Any], ...]) -> str:
    """The attrs column's JSON text of one instruction's attrs ("" when none)."""
    return json.dumps([[k, v] for k, v in attrs]) if attrs else ""


def columns_table(cols: Any) -> pa.Table:
    """The `INSTRUCTIONS` table of instructions given as `nprof.device.columns.Columns` (deps absolute): what
    `_build` gives for the same instructions as objects."""
    acc = cols.acc

    def strings(values: list[Any], codes: np.ndarray) -> pa.Array:
        return pa.array(values, pa.string()).take(pa.array(np.asarray(codes, np.int64)))

    free_type = ACCESS.field("free").type
    dims = pa.StructArray.from_arrays([pa.array(acc.free_stride, pa.int64()), pa.array(acc.free_size, pa.int64())],
                                      fields=list(free_type.value_type))  # fmt: skip
    children = {
        "space": strings([str.__str__(s) for s in SPACES], acc.space),
        "tensor": strings(acc.tensor_names, acc.tensor),
        "dtype": strings(acc.dtype_names, acc.dtype),
        "offset": pa.array(acc.offset, pa.int64()),
        "partitions": pa.array(acc.partitions, pa.int32()),
        "free": pa.ListArray.from_arrays(pa.array(acc.free_offsets.astype(np.int32)), dims, type=free_type),
        "partition_start": pa.array(acc.partition_start, pa.int32()),
        "partition_stride": pa.array(acc.partition_stride, pa.int64()),
    }
    structs = pa.StructArray.from_arrays([children[f.name] for f in ACCESS], fields=list(ACCESS))

    def operands(offsets: np.ndarray, rows: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), structs.take(pa.array(rows, pa.int64())))

    deps_at = pa.array(cols.deps_offsets.astype(np.int32))
    return pa.Table.from_pydict(
        {
            "engine": strings([e.value for e in cols.engines], cols.engine),
            "opcode": strings([o.value for o in cols.opcodes], cols.opcode),
            "queue": pa.array(cols.queue, pa.int32()),
            "deps": pa.ListArray.from_arrays(deps_at, pa.array(cols.deps_flat, pa.int64())),
            "source": cols.source,
            "layer": cols.layer,
            "hlo_name": cols.hlo_name,
            "attrs": strings([_text(a) for a in cols.attrs_values], cols.attrs),
            "ins": operands(cols.ins_offsets, cols.ins),
            "outs": operands(cols.outs_offsets, cols.outs),
        },
        schema=INSTRUCTIONS,
    )


def _build(instrs: tuple[Instruction, ...]) -> pa.Table:
    """The table of `instrs` (identical enums and attrs converted once)."""
    names: dict[Any, str] = {}
    texts: dict[tuple[tuple[str, Any], ...], str] = {(): ""}

    def name(value: Any) -> str:
        hit = names.get(value)
        if hit is None:
            hit = names[value] = value.value
        return hit

    def text(attrs: tuple[tuple[str, Any], ...]) -> str:
        hit = texts.get(attrs)
        if hit is None:
            hit = texts[attrs] = _text(attrs)
        return hit

    deps = [i.deps for i in instrs]
    offsets = np.zeros(len(instrs) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in deps], out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(deps), dtype=np.int64, count=int(offsets[-1]))
    return pa.Table.from_pydict(
        {
            "engine": [name(i.engine) for i in instrs],
            "opcode": [name(i.opcode) for i in instrs],
            "queue": [i.queue for i in instrs],
            "deps": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)),
            "source": [i.source for i in instrs],
            "layer": [i.layer for i in instrs],
            "hlo_name": [i.hlo_name for i in instrs],
            "attrs": [text(i.attrs) for i in instrs],
            "ins": operand_column([i.ins for i in instrs], ACCESS),
            "outs": operand_column([i.outs for i in instrs], ACCESS),
        },
        schema=INSTRUCTIONS,
    )


def attach_table(program: Program, table: pa.Table) -> None:
    """Cache `table` (schema `INSTRUCTIONS`, one row per instruction of `program`) as its instruction table."""
    if not table.schema.equals(INSTRUCTIONS):
        raise ValueError("an instruction table must have the program file's INSTRUCTIONS schema")
    object.__setattr__(program, _CACHE_ATTR, table)


def attached_table(program: Program) -> pa.Table | None:
    """The instruction table cached on `program` (by `attach_table`, `instruction_table` or `load_program`), or
    None when none is: a consumer that only wants the columns if they are free asks this, not `instruction_table`."""
    table: pa.Table | None = program.__dict__.get(_CACHE_ATTR)
    return table


def decode_instructions(table: pa.Table, partitions: int) -> tuple[Instruction, ...]:
    """The `Instruction`s of a table in the `INSTRUCTIONS` schema without nulls in its operands (the inverse of
    `instruction_table`); ValueError on unknown engines/opcodes or nulls."""
    ins = operand_lists(table.column("ins"), partitions)
    outs = operand_lists(table.column("outs"), partitions)
    if ins is None or outs is None:
        raise ValueError("an instruction table's operands must not be null")
    return instructions_of(table.drop_columns(["ins", "outs"]).to_pydict(), ins, outs)


def _restore(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_restore(v) for v in value)
    return value


_ENGINES = {e.value: e for e in Engine}
_OPCODES = {o.value: o for o in Opcode}


def instructions_of(
    rows: dict[str, list[Any]], ins_of: list[tuple[Access, ...]], outs_of: list[tuple[Access, ...]]
) -> tuple[Instruction, ...]:
    """The Instructions of the table columns `rows` and their decoded operands (identical attrs texts parsed
    once). Unknown engines/opcodes raise ValueError."""
    attrs_of: dict[str, tuple[tuple[str, Any], ...]] = {"": ()}

    def attrs(text: str | None) -> tuple[tuple[str, Any], ...]:
        if not text:
            return ()
        hit = attrs_of.get(text)
        if hit is None:
            hit = attrs_of[text] = tuple((k, _restore(v)) for k, v in json.loads(text))
        return hit

    def enum(table: dict[str, Any], value: str, what: str) -> Any:
        hit = table.get(value)
        if hit is None:
            raise ValueError(f"unknown {what} {value!r}")
        return hit

    return tuple(
        Instruction(
            engine=enum(_ENGINES, engine, "engine"),
            opcode=enum(_OPCODES, opcode, "opcode"),
            outs=outs,
            ins=ins,
            attrs=attrs(attr_text),
            deps=tuple(deps),
            queue=queue,
            source=source,
            layer=layer,
            hlo_name=hlo_name,
        )
        for engine, opcode, outs, ins, attr_text, deps, queue, source, layer, hlo_name in zip(
            rows["engine"], rows["opcode"], outs_of, ins_of, rows["attrs"], rows["deps"],
            rows["queue"], rows["source"], rows["layer"], rows["hlo_name"], strict=True,
        )
    )
