"""A program's instruction columns in another order, made from its columns: no `Instruction` is converted again.

Contract: `permuted_columns(cols, order, attrs)` takes the `device.columns.Columns` of a program, a permutation
`order` (new position -> old index, a topological order of its dependencies) and each instruction's attrs in
that order (the objects' own: values Python compares equal but writes apart, 1 / 1.0 / True, are coded by the
first one met, which the columns alone do not tell for another order), and returns exactly the columns
`instruction_columns` gives the reordered instructions, i.e. of ``[instructions[i] for i in order]`` with every
dependency renumbered to its new position and each dependency list sorted (`compiler.listsched.reordered`):
rows taken in `order`, dependency lists renumbered and sorted within each row, and every first-occurrence
numbering (distinct operands, met in the ins of all instructions then their outs; tensor and dtype names of
the distinct operands) renumbered as the new order meets them, the attrs coded from `attrs` as
`instruction_columns` codes them. Vectorised (numpy gathers and
sorts), O(n log n). tests/device/test_columns_order.py holds it to `instruction_columns` of the reordered
objects on random programs and zoo graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nprof.device.columns import AccessColumns, Columns, value_codes


def first_occurrence(codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes renumbered 0, 1, ... in order of first occurrence, old code of each new code) for `codes` in
    [0, k) (codes that do not occur are left out of the second array)."""
    if not len(codes):
        return codes.astype(np.int64), np.zeros(0, np.int64)
    first = np.full(k, len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    present = np.flatnonzero(first < len(codes))
    old_of_new = present[np.argsort(first[present], kind="stable")]
    new_of_old = np.full(k, -1, np.int64)
    new_of_old[old_of_new] = np.arange(len(old_of_new), dtype=np.int64)
    return new_of_old[codes], old_of_new


def take_lists(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR lists (offsets, values) of `rows`, in that order."""
    lengths = np.diff(offsets)[rows]
    sub = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=sub[1:])
    at = np.repeat(offsets[rows] - sub[:-1], lengths) + np.arange(sub[-1], dtype=np.int64)
    return sub, values[at]


def _sorted_within_rows(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` with each CSR row's items sorted ascending."""
    if not len(values):
        return values
    row = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    return values[np.lexsort((values, row))]


def _access_rows(acc: AccessColumns, rows: np.ndarray) -> AccessColumns:
    """The distinct operands `rows` of `acc`, in that order, tensor and dtype names renumbered as met."""
    tensor, tensor_old = first_occurrence(acc.tensor[rows], len(acc.tensor_names))
    dtype, dtype_old = first_occurrence(acc.dtype[rows], len(acc.dtype_names))
    f_off, f_at = take_lists(acc.free_offsets, np.arange(len(acc.free_stride), dtype=np.int64), rows)
    return AccessColumns(
        acc.space[rows], tensor, [acc.tensor_names[k] for k in tensor_old.tolist()], dtype,
        [acc.dtype_names[k] for k in dtype_old.tolist()], acc.offset[rows], acc.partitions[rows],
        acc.partition_start[rows], acc.partition_stride[rows], f_off, acc.free_stride[f_at], acc.free_size[f_at],
    )  # fmt: skip


def permuted_columns(cols: Columns, order: np.ndarray | list[int], attrs: Sequence[Any]) -> Columns:
    """The columns of the program `cols` describes with its instructions in `order` (see module doc)."""
    rows = np.asarray(order, np.int64)
    n = cols.n
    if len(rows) != n or len(attrs) != n or (n and not np.array_equal(np.sort(rows), np.arange(n))):
        raise ValueError("permuted_columns: `order` must permute the instructions, `attrs` give one per instruction")
    new_index = np.empty(n, np.int64)
    new_index[rows] = np.arange(n, dtype=np.int64)
    deps_off, deps = take_lists(cols.deps_offsets, cols.deps_flat, rows)
    deps = _sorted_within_rows(deps_off, new_index[deps])
    attr_codes, attr_values = value_codes(attrs, n)
    ins_off, ins = take_lists(cols.ins_offsets, cols.ins, rows)
    outs_off, outs = take_lists(cols.outs_offsets, cols.outs, rows)
    operands, acc_old = first_occurrence(np.concatenate([ins, outs]), cols.acc.operands)
    return Columns(
        cols.opcode[rows], cols.opcodes, cols.engine[rows], cols.engines, attr_codes, attr_values,
        cols.queue[rows], deps_off, deps, ins_off,
        operands[: len(ins)], outs_off, operands[len(ins) :], _access_rows(cols.acc, acc_old),
        cols.source.take(rows), cols.layer.take(rows), cols.hlo_name.take(rows),
    )  # fmt: skip
