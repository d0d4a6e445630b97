"""The simulator's instruction columns of a Program whose instructions are partly columnar chunks.

Contract: `lazy_columns(instructions)` gives the `Columns` (nprof.device.columns) of an
`nprof.program.lazy.Instructions` without making its chunks into `Instruction` objects: each list segment through
`instruction_columns`, each chunk through its own `columns()`, then `merge_columns` concatenates them. The merge
re-codes opcodes and engines into the enums' order, attrs and tensor/dtype names by first occurrence, and
deduplicates the operands exactly (`row_codes` over every Access field), so equal Accesses share one code as
they do in `instruction_columns`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from nprof.arch.isa import Engine, Opcode
from nprof.device.columns import AccessColumns, Columns, instruction_columns
from nprof.device.rowcodes import padded, row_codes


def lazy_columns(instructions: Any) -> Columns:
    """Columns of an `Instructions` sequence (see module doc)."""
    parts = [instruction_columns(seg) if isinstance(seg, list) else seg.columns() for _, seg in instructions.segments()]
    return merge_columns(parts)


def _remap(values: list[Any], intern: dict[Any, int]) -> np.ndarray:
    """Global codes of a part's distinct values (new values numbered in order)."""
    return np.asarray([intern.setdefault(v, len(intern)) for v in values] or [0], np.int64)


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)


def _csr_concat(offsets: list[np.ndarray]) -> np.ndarray:
    """One CSR offsets array of consecutive parts' offsets (each starting at 0)."""
    out, base = [np.zeros(1, np.int64)], 0
    for off in offsets:
        out.append(off[1:] + base)
        base += int(off[-1])
    return np.concatenate(out)


def _merged_accesses(parts: list[Columns]) -> tuple[AccessColumns, list[int], dict[str, int], dict[str, int]]:
    """All parts' access rows in one AccessColumns (not deduplicated), each part's first row, the name codes."""
    tensors: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    fields: dict[str, list[np.ndarray]] = {k: [] for k in AccessColumns._fields if not k.endswith("_names")}
    offsets, bases, base = [], [], 0
    for p in parts:
        a = p.acc
        bases.append(base)
        base += a.operands
        fields["tensor"].append(_remap(a.tensor_names, tensors)[a.tensor])
        fields["dtype"].append(_remap(a.dtype_names, dtypes)[a.dtype])
        for k in ("space", "offset", "partitions", "partition_start", "partition_stride", "free_stride", "free_size"):
            fields[k].append(getattr(a, k))
        offsets.append(a.free_offsets)
    acc = AccessColumns(
        _concat(fields["space"]), _concat(fields["tensor"]), list(tensors), _concat(fields["dtype"]), list(dtypes),
        _concat(fields["offset"]), _concat(fields["partitions"]), _concat(fields["partition_start"]),
        _concat(fields["partition_stride"]), _csr_concat(offsets), _concat(fields["free_stride"]),
        _concat(fields["free_size"]),
    )  # fmt: skip
    return acc, bases, tensors, dtypes


def _distinct(acc: AccessColumns) -> tuple[AccessColumns, np.ndarray]:
    """(the distinct rows of `acc` in order of first occurrence, each row's code)."""
    key = [acc.space, acc.tensor, acc.dtype, acc.offset, acc.partitions, acc.partition_start, acc.partition_stride,
           *padded(acc.free_offsets, acc.free_stride, acc.free_size)]  # fmt: skip
    codes, first = row_codes(key, acc.operands)
    lengths = np.diff(acc.free_offsets)[first]
    at = np.zeros(len(first) + 1, np.int64)
    np.cumsum(lengths, out=at[1:])
    dim_rows = np.repeat(acc.free_offsets[first], lengths) + (np.arange(at[-1]) - np.repeat(at[:-1], lengths))
    return AccessColumns(
        acc.space[first], acc.tensor[first], acc.tensor_names, acc.dtype[first], acc.dtype_names, acc.offset[first],
        acc.partitions[first], acc.partition_start[first], acc.partition_stride[first], at, acc.free_stride[dim_rows],
        acc.free_size[dim_rows],
    ), codes  # fmt: skip


def merge_columns(parts: list[Columns]) -> Columns:
    """The columns of consecutive parts as one program's (see module doc)."""
    opcodes, engines = list(Opcode), list(Engine)
    op_code, eng_code = {o: k for k, o in enumerate(opcodes)}, {e: k for k, e in enumerate(engines)}
    attrs: dict[Any, int] = {}
    acc, bases, _, _ = _merged_accesses(parts)
    distinct, codes = _distinct(acc)
    cols: dict[str, list[Any]] = {k: [] for k in ("op", "eng", "attrs", "queue", "deps", "ins", "outs")}
    offs: dict[str, list[np.ndarray]] = {"deps": [], "ins": [], "outs": []}
    for p, base in zip(parts, bases, strict=True):
        cols["op"].append(np.asarray([op_code[o] for o in p.opcodes] or [0], np.int64)[p.opcode])
        cols["eng"].append(np.asarray([eng_code[e] for e in p.engines] or [0], np.int64)[p.engine])
        cols["attrs"].append(_remap(p.attrs_values, attrs)[p.attrs])
        cols["queue"].append(p.queue)
        cols["deps"].append(p.deps_flat)
        cols["ins"].append(codes[base + p.ins])
        cols["outs"].append(codes[base + p.outs])
        offs["deps"].append(p.deps_offsets)
        offs["ins"].append(p.ins_offsets)
        offs["outs"].append(p.outs_offsets)
    strings = [pa.concat_arrays([getattr(p, k) for p in parts]) if parts else pa.nulls(0, pa.string())
               for k in ("source", "layer", "hlo_name")]  # fmt: skip
    return Columns(
        _concat(cols["op"]), opcodes, _concat(cols["eng"]), engines, _concat(cols["attrs"]), list(attrs),
        _concat(cols["queue"]), _csr_concat(offs["deps"]), _concat(cols["deps"]), _csr_concat(offs["ins"]),
        _concat(cols["ins"]), _csr_concat(offs["outs"]), _concat(cols["outs"]), distinct, *strings,
    )  # fmt: skip
