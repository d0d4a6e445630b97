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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.arch.isa import DTYPES, Access, Space
from nprof.program.validate import MAX_DIMS, MAX_ELEMENTS, check_access

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


def _codes(strings: pa.Array) -> tuple[np.ndarray, list[str]]:
    """Dictionary codes (int64) of a string column and the strings they stand for."""
    encoded = pc.dictionary_encode(strings)
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary.to_pylist()


def _ints(values: pa.StructArray, name: str) -> np.ndarray:
    return values.field(name).to_numpy(zero_copy_only=False).astype(np.int64)


def _padded_dims(free: pa.ListArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ndims, strides, sizes) of every operand's free dims; strides/sizes padded with 0 to the widest."""
    at = np.asarray(free.offsets, dtype=np.int64)
    ndims = np.diff(at)
    dims = free.values
    lo, hi = int(at[0]), int(at[-1])
    strides = dims.field("stride").to_numpy(zero_copy_only=False)[lo:hi].astype(np.int64)
    sizes = dims.field("size").to_numpy(zero_copy_only=False)[lo:hi].astype(np.int64)
    width = int(ndims.max(initial=0))
    rows = np.repeat(np.arange(len(ndims)), ndims)
    cols = np.arange(lo, hi) - np.repeat(at[:-1], ndims)
    out = np.zeros((2, len(ndims), width), dtype=np.int64)
    out[0, rows, cols], out[1, rows, cols] = strides, sizes
    return ndims, out[0], out[1]


def _suspects(key: np.ndarray, names: dict[str, list[str]], partitions: int) -> np.ndarray:
    """Indices of the operands (rows of `key`, columns as `_operand_keys` lays them out) that may break a rule
    of `validate.check_access`, the dtype list or the Space names, in order; over-inclusion is harmless
    (each suspect is checked by those functions), missing one is a bug (held to them in the tests)."""
    space, _, dtype, offset, parts, start, pstride, ndims = key[:, :8].T
    strides, sizes = np.split(key[:, 8:], 2, axis=1)
    hbm = np.asarray([s == "hbm" for s in names["space"]] + [False], dtype=bool)[space]
    spaces = {s.value for s in Space}
    bad = ~np.asarray([s in spaces for s in names["space"]] + [True], dtype=bool)[space]
    bad |= ~np.asarray([d in DTYPES for d in names["dtype"]] + [True], dtype=bool)[dtype]
    bad |= (offset < 0) | (offset > MAX_ELEMENTS) | (pstride < 0) | (pstride > MAX_ELEMENTS)
    bad |= (parts < 1) | (parts > np.where(hbm, MAX_ELEMENTS, partitions)) | (start < 0) | (start >= partitions)
    bad |= ~hbm & (start + parts > partitions)
    used = np.arange(strides.shape[1]) < ndims[:, None]
    bad_dims = used & ((np.abs(strides) > MAX_ELEMENTS) | (sizes < 1) | (sizes > MAX_ELEMENTS))
    bad |= (ndims > MAX_DIMS) | bad_dims.any(axis=1)
    return np.flatnonzero(bad)


def _operand_keys(values: pa.StructArray, free: pa.ListArray) -> tuple[np.ndarray, dict[str, list[str]]]:
    """One int64 row per operand: codes of space/tensor/dtype, offset, partitions, partition_start/stride, the
    number of free dims, then the padded strides and sizes (equal rows = equal Accesses); and the code tables."""
    names: dict[str, list[str]] = {}
    columns = []
    for name in ("space", "tensor", "dtype"):
        codes, names[name] = _codes(values.field(name))
        columns.append(codes)
    columns += [_ints(values, name) for name in ("offset", "partitions", "partition_start", "partition_stride")]
    ndims, strides, sizes = _padded_dims(free)
    return np.column_stack([*columns, ndims, strides, sizes]), names


def distinct_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row's distinct row): `np.unique(key, axis=0, return_inverse=True)` by one
    lexsort (several times faster than unique's sort of whole rows as bytes)."""
    order = np.lexsort(key.T[::-1])
    ordered = key[order]
    starts = np.ones(len(key), dtype=bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(key), dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return ordered[starts], inverse


def _as_access(row: list[int], names: dict[str, list[str]]) -> Access:
    """The Access of one `_operand_keys` row."""
    space, tensor, dtype, offset, parts, start, pstride, ndims = row[:8]
    width = (len(row) - 8) // 2
    dims = tuple(zip(row[8 : 8 + ndims], row[8 + width : 8 + width + ndims], strict=True))
    return Access(Space(names["space"][space]), names["tensor"][tensor], names["dtype"][dtype], offset, parts,
                  dims, start, pstride)  # fmt: skip


def _check_one(row: list[int], names: dict[str, list[str]], partitions: int) -> None:
    """The scalar checks of one `_operand_keys` row (raise ValueError naming what is wrong)."""
    space, tensor, dtype = names["space"][row[0]], names["tensor"][row[1]], names["dtype"][row[2]]
    width, ndims = (len(row) - 8) // 2, row[7]
    strides, sizes = row[8 : 8 + ndims], row[8 + width : 8 + width + ndims]
    stored = dict(zip(_FIELDS, (space, tensor, dtype, *row[3:7]), strict=True))
    free = [{"stride": s, "size": n} for s, n in zip(strides, sizes, strict=True)]
    check_access({**stored, "free": free}, partitions)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    Space(space)


def operand_lists(column: pa.ChunkedArray, partitions: int) -> list[tuple[Access, ...]] | None:
    """Each instruction's operands (see module doc); None when something is null."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(lists, pa.ChunkedArray):  # no chunks at all
        return []
    values = lists.values  # the operands of every row (slices of `lists` are accounted by its offsets)
    free = values.field("free")
    if _has_nulls(lists, values, free):
        return None
    at = _offsets(lists)
    if not len(values):
        return [() for _ in range(len(lists))]
    key, names = _operand_keys(values, free)
    for i in _suspects(key, names, partitions).tolist():
        _check_one(key[i].tolist(), names, partitions)
    distinct, inverse = distinct_rows(key)
    shared = [_as_access(row, names) for row in distinct.tolist()]
    accesses = [shared[k] for k in inverse.tolist()]
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
