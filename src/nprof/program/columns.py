"""Columnar decoding of a Program file's operand columns (``ins``/``outs``: list<struct> per instruction).

Contract: `operand_lists(column, partitions)` returns, per instruction, the tuple of its `Access`es, decoded
field by field from the Arrow arrays (no per-operand Python dicts), or None when any list, operand, field or
free dim is null (the caller then decodes row by row, which names the bad value). It is only used on tables
with the exact schema `program.file` writes, so every field's type is fixed by the file; each distinct operand
is checked once with `validate.check_access` (identical operands share one `Access`).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np
import pyarrow as pa

from nprof.arch.isa import DTYPES, Access, Space
from nprof.program.validate import check_access

_FIELDS = ("space", "tensor", "dtype", "offset", "partitions", "partition_start", "partition_stride")
_FIELDS_OF = operator.attrgetter(
    "space", "tensor", "dtype", "offset", "partitions", "free", "partition_start", "partition_stride"
)


def _has_nulls(lists: pa.ListArray, values: pa.StructArray, free: pa.ListArray) -> bool:
    if lists.null_count or values.null_count or free.null_count or free.flatten().null_count:
        return True
    return any(values.field(name).null_count for name in _FIELDS) or any(
        free.flatten().field(name).null_count for name in ("stride", "size")
    )


def _offsets(lists: pa.ListArray) -> list[int]:
    return np.asarray(lists.offsets, dtype=np.int64).tolist()


def operand_lists(column: pa.ChunkedArray, partitions: int) -> list[tuple[Access, ...]] | None:
    """Each instruction's operands (see module doc); None when something is null."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(lists, pa.ChunkedArray):  # no chunks at all
        return []
    values = lists.values  # the operands of every row (slices of `lists` are accounted by its offsets)
    free = values.field("free")
    if _has_nulls(lists, values, free):
        return None
    cols = [values.field(name).to_pylist() for name in _FIELDS]
    fs = free.values
    strides, sizes = fs.field("stride").to_pylist(), fs.field("size").to_pylist()
    free_at = _offsets(free)
    memo: dict[tuple[Any, ...], Access] = {}
    accesses: list[Access] = []
    for j, (space, tensor, dtype, offset, parts, start, pstride) in enumerate(zip(*cols, strict=True)):
        lo, hi = free_at[j], free_at[j + 1]
        dims = tuple(zip(strides[lo:hi], sizes[lo:hi], strict=True))
        key = (space, tensor, dtype, offset, parts, dims, start, pstride)
        hit = memo.get(key)
        if hit is None:
            stored = dict(zip(_FIELDS, (space, tensor, dtype, offset, parts, start, pstride), strict=True))
            check_access({**stored, "free": [{"stride": s, "size": n} for s, n in dims]}, partitions)
            if dtype not in DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}")
            hit = memo[key] = Access(Space(space), *key[1:])
        accesses.append(hit)
    at = _offsets(lists)
    return [tuple(accesses[at[i] : at[i + 1]]) for i in range(len(lists))]


def operand_column(per_row: list[tuple[Access, ...]], access_type: pa.StructType) -> pa.Array:
    """The list<struct> column of the operands `per_row` (one list per instruction), each `Access` object
    converted once (the inverse of `operand_lists`)."""
    index: dict[int, int] = {}  # by identity: operand objects are shared (hashing a frozen Access is slow)
    distinct: list[Access] = []
    flat = []
    for ops in per_row:
        for a in ops:
            at = index.get(id(a))
            if at is None:
                at = index[id(a)] = len(distinct)
                distinct.append(a)
            flat.append(at)
    fields = list(zip(*map(_FIELDS_OF, distinct), strict=True)) or [()] * 8
    space, tensor, dtype, offset, parts, free, start, pstride = fields
    free_at = np.zeros(len(distinct) + 1, dtype=np.int32)
    np.cumsum([len(f) for f in free], out=free_at[1:])
    dims_of = list(itertools.chain.from_iterable(free))
    strides, sizes = [d[0] for d in dims_of], [d[1] for d in dims_of]
    free_type = access_type.field("free").type
    dims = pa.StructArray.from_arrays(
        [pa.array(strides, pa.int64()), pa.array(sizes, pa.int64())], fields=list(free_type.value_type)
    )
    children = {
        "space": pa.array([str.__str__(x) for x in space], pa.string()),
        "tensor": pa.array(tensor, pa.string()),
        "dtype": pa.array(dtype, pa.string()),
        "offset": pa.array(offset, pa.int64()),
        "partitions": pa.array(parts, pa.int32()),
        "free": pa.ListArray.from_arrays(pa.array(free_at), dims, type=free_type),
        "partition_start": pa.array(start, pa.int32()),
        "partition_stride": pa.array(pstride, pa.int64()),
    }
    structs = pa.StructArray.from_arrays([children[f.name] for f in access_type], fields=list(access_type))
    offsets = np.zeros(len(per_row) + 1, dtype=np.int32)
    np.cumsum([len(ops) for ops in per_row], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), structs.take(pa.array(flat, pa.int64())))
