"""The Program file (our NEFF-like format): `save_program` and `load_program`.

Contract: a single-file container (`nprof.container`) of format
"nprof-program", schema version 1, whose manifest carries the program name,
preset, SBUF/PSUM high-water marks, meta, and a producer string, with tables:

* `instructions`: one row per instruction in program order — engine, opcode,
  queue, deps (list<int64>), source, layer, hlo_name, attrs (JSON text: a list
  of [name, value] pairs; tuples are stored as lists and restored as tuples),
  ins and outs (list<struct{space, tensor, dtype, offset, partitions,
  free: list<struct{stride, size}>, partition_start, partition_stride}>).
* `tensors`: name, shape (list<int64>), dtype, kind.
* `constants`: name, npy (the value as `.npy` bytes; bfloat16/float8 are
  stored as their raw bits with the ISA dtype in `dtype`).

`load_program` refuses, with one line naming the file: a missing/empty/
truncated/corrupt file, a real AWS NEFF (nprof runs its own programs), an nprof
profile given as a program (use it with -s), another format, a newer schema,
and a program that fails `Program.validate()`.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nprof import __version__
from nprof.arch.isa import DTYPES, Access, Space, numpy_dtype
from nprof.arch.presets import PRESETS
from nprof.container import open_container, write_container
from nprof.errors import FormatError, NprofError
from nprof.program.columns import operand_lists
from nprof.program.model import Program, TensorDecl
from nprof.program.npy import read_npy
from nprof.program.table import ACCESS, INSTRUCTIONS, attach_table, instruction_table, instructions_of  # noqa: F401 (ACCESS: part of the schema)
from nprof.program.validate import check_access, check_manifest, check_row, check_tensor

FORMAT = "nprof-program"
SCHEMA_VERSION = 1

TENSORS = pa.schema(
    [("name", pa.string()), ("shape", pa.list_(pa.int64())), ("dtype", pa.string()), ("kind", pa.string())]
)
CONSTANTS = pa.schema([("name", pa.string()), ("dtype", pa.string()), ("npy", pa.binary())])


def _npy_bytes(value: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(value)
    if arr.dtype.kind == "V" or arr.dtype.name in ("bfloat16",) or arr.dtype.name.startswith("float8"):
        arr = arr.view(np.dtype(f"u{arr.dtype.itemsize}"))
    sink = io.BytesIO()
    np.save(sink, arr, allow_pickle=False)
    return sink.getvalue()


def save_program(program: Program, path: str | os.PathLike[str]) -> Path:
    """Write `program` atomically to `path` and return the path."""
    table = instruction_table(program)
    tensors = pa.Table.from_pydict(
        {
            "name": [t.name for t in program.tensors],
            "shape": [list(t.shape) for t in program.tensors],
            "dtype": [t.dtype for t in program.tensors],
            "kind": [t.kind for t in program.tensors],
        },
        schema=TENSORS,
    )
    decls = {t.name: t for t in program.tensors}
    names = sorted(program.constants)
    constants = pa.Table.from_pydict(
        {
            "name": names,
            "dtype": [decls[n].dtype if n in decls else str(np.asarray(program.constants[n]).dtype) for n in names],
            "npy": [_npy_bytes(np.asarray(program.constants[n])) for n in names],
        },
        schema=CONSTANTS,
    )
    manifest = {
        "name": program.name,
        "preset": program.preset,
        "sbuf_bytes": program.sbuf_bytes,
        "psum_bytes": program.psum_bytes,
        "meta": dict(program.meta),
        "producer": f"nprof {__version__}",
        "instruction_count": table.num_rows,
    }
    tables = {"instructions": table, "tensors": tensors, "constants": constants}
    return write_container(path, FORMAT, SCHEMA_VERSION, manifest, tables)


def _describe_other(found: str) -> str | None:
    if found == "nprof-profile":
        return "this is an nprof profile, not a program; pass it with -s (e.g. nprof view -s FILE)"
    return None


def _load_constant(name: str, dtype: str, blob: bytes) -> np.ndarray:
    if not isinstance(blob, bytes):
        raise ValueError(f"constant {name!r} has no .npy bytes")
    arr = read_npy(blob, f"constant {name!r}")
    if dtype in DTYPES and arr.dtype != numpy_dtype(dtype) and arr.dtype.kind == "u":
        arr = arr.view(numpy_dtype(dtype))
    return arr


def _access_reader(partitions: int, typed: bool) -> Any:
    """A function turning a stored operand (dict) into an `Access`, every distinct operand checked once.
    Identical operands share one `Access`; when the table has the exact schema this module writes (`typed`:
    every field's type is then fixed by the file), an operand equal to one already checked is not checked
    again, so each distinct operand is validated exactly once. Otherwise every operand is checked."""
    memo: dict[tuple[Any, ...], Access] = {}

    def acc(d: dict[str, Any]) -> Access:
        if not typed:
            check_access(d, partitions)
        try:
            free = tuple((f["stride"], f["size"]) for f in d["free"])
            key = (
                d["space"], d["tensor"], d["dtype"], d["offset"], d["partitions"], free,
                d["partition_start"], d["partition_stride"],
            )  # fmt: skip
        except TypeError:  # a null operand or free dim: say which
            check_access(d, partitions)
            raise
        hit = memo.get(key)
        if hit is None:
            check_access(d, partitions)
            if d["dtype"] not in DTYPES:
                raise ValueError(f"unknown dtype {d['dtype']!r}")
            hit = memo[key] = Access(Space(d["space"]), *key[1:])
        return hit

    return acc


def _check_rows(table: pa.Table, rows: dict[str, list[Any]], queues: int, typed: bool) -> None:
    """`check_row` on every instruction; with the exact schema this module writes (`typed`: the file fixes
    every column's type) the same checks run on whole columns: no nulls where a value is required, queues in
    [-1, queues)."""
    if not typed:
        for i in range(len(rows.get("opcode", ()))):
            check_row(rows, i, queues)
        return
    import pyarrow.compute as pc

    for key in ("engine", "opcode", "queue", "deps", "ins", "outs"):
        column = table.column(key)
        if column.null_count:
            i = next(i for i, v in enumerate(rows[key]) if v is None)
            check_row(rows, i, queues)  # raises, naming the instruction
        if key == "deps" and pc.list_flatten(column).null_count:
            raise ValueError("deps must be a list of instruction indices")
    if table.num_rows:
        bounds = pc.min_max(table.column("queue"))
        if bounds["min"].as_py() < -1 or bounds["max"].as_py() > queues - 1:
            i = next(i for i, q in enumerate(rows["queue"]) if not -1 <= q <= queues - 1)
            check_row(rows, i, queues)  # raises, naming the instruction


def _operands(table: pa.Table, partitions: int, typed: bool) -> tuple[list[Any], list[Any]] | None:
    """(ins, outs) Access tuples per instruction decoded by columns (`columns.operand_lists`) when the table has
    the exact schema and no nulls; None otherwise (decode row by row)."""
    if not typed:
        return None
    ins = operand_lists(table.column("ins"), partitions)
    outs = operand_lists(table.column("outs"), partitions) if ins is not None else None
    return None if ins is None or outs is None else (ins, outs)


def load_program(path: str | os.PathLike[str]) -> Program:
    """Read, check and validate a program file (see the module doc for what it refuses)."""
    box = open_container(path, FORMAT, SCHEMA_VERSION, "program", _describe_other)
    try:
        m = box.manifest
        try:
            check_manifest(m)
            preset = PRESETS[m.get("preset", "trn1")]
            table = box.read_table("instructions")
            typed = table.schema.equals(INSTRUCTIONS)
            operands = _operands(table, preset.partitions, typed)
            rows = table.drop_columns(["ins", "outs"]).to_pydict() if operands else table.to_pydict()
            tens = box.read_table("tensors").to_pylist()
            consts = box.read_table("constants").to_pylist()
            for t in tens:
                check_tensor(t)
            _check_rows(table, rows, preset.dma_queues, typed)
            if operands is None:
                acc = _access_reader(preset.partitions, typed)
                ins, outs = ([tuple(acc(a) for a in ops) for ops in rows[key]] for key in ("ins", "outs"))
                operands = (ins, outs)
            instructions = instructions_of(rows, *operands)
            tensors = tuple(TensorDecl(t["name"], tuple(t["shape"]), t["dtype"], t["kind"]) for t in tens)
            constants = {c["name"]: _load_constant(c["name"], c["dtype"], c["npy"]) for c in consts}
            program = Program(
                name=m.get("name", ""),
                preset=preset.name,
                tensors=tensors,
                instructions=instructions,
                constants=constants,
                sbuf_bytes=m.get("sbuf_bytes", 0),
                psum_bytes=m.get("psum_bytes", 0),
                meta={str(k): str(v) for k, v in dict(m.get("meta") or {}).items()},
            )
            if typed and operands is not None:  # the columns as read: timing-only plans skip the Instructions
                attach_table(program, table)
        except FormatError:
            raise
        except (KeyError, ValueError, TypeError, RecursionError, json.JSONDecodeError, pa.ArrowException) as exc:
            raise FormatError(f"{box.path}: invalid program file ({exc}); re-create it") from exc
    finally:
        box.close()
    for t in program.tensors:
        if t.dtype not in DTYPES or t.kind not in ("input", "output", "weight", "internal"):
            raise FormatError(f"{box.path}: tensor {t.name!r} has an invalid dtype or kind; re-create the file")
    try:
        program.validate()
    except NprofError as exc:
        raise FormatError(f"{box.path}: {exc}") from exc
    return program
