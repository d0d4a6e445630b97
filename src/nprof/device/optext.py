"""Operand display text for many operands at once: `device.accinfo.access_text`, in array operations.

Contract: `operand_texts(acc)` returns a string array with, for every distinct operand of `acc`
(`device.columns.AccessColumns`), exactly `accinfo.access_text` of its `Access` (e.g. `sbuf x[0:128, 0:512]
bf16`, `hbm a[0:128:512, 0:128] bf16`); `signature_texts(...)` joins them per instruction as the profile
shows them: `outputs <- inputs` then the attrs text. Operands are grouped by their number of dims; each
group's integer arithmetic runs in numpy and its strings are assembled by Arrow kernels, so the cost does
not grow with Python work per operand. tests/device/test_optext.py holds them to `access_text`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.arch.isa import ITEMSIZE
from nprof.device.accinfo import SHORT_DTYPE
from nprof.device.columns import SPACES, AccessColumns

_HBM = 0


def _str(values: np.ndarray) -> pa.Array:
    return pa.array(values, pa.int64()).cast(pa.string())


def _scalar(part: pa.Array | str) -> pa.Array | pa.Scalar:
    """A plain string as an Arrow scalar (pyarrow 26 converts a Python str argument of a compute function at
    ~0.4 ms a call, trying to import dateutil each time when it is not installed); arrays as they are."""
    return pa.scalar(part, pa.string()) if isinstance(part, str) else part


_EMPTY = pa.scalar("", pa.string())


def _join(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation (plain strings are broadcast)."""
    return pc.binary_join_element_wise(*map(_scalar, parts), _EMPTY)


def _if_else(cond: np.ndarray, then: pa.Array | str, otherwise: pa.Array | str) -> pa.Array:
    """`pc.if_else` of a boolean numpy mask (plain strings are broadcast)."""
    return pc.if_else(pa.array(cond), _scalar(then), _scalar(otherwise))


def _dims_text(offset: np.ndarray, stride: np.ndarray, size: np.ndarray) -> pa.Array:
    """`accinfo._dims_text` of rows with the same number of dims ([rows, dims] strides and sizes)."""
    rows, dims = stride.shape
    natural = np.ones((rows, dims), np.int64)
    for k in range(dims - 2, -1, -1):
        natural[:, k] = natural[:, k + 1] * size[:, k + 1]
    rest = offset.copy()
    parts = []
    for k in range(dims):
        s = stride[:, k]
        start = np.where(s > 0, rest // np.where(s > 0, s, 1), 0)
        rest = rest - start * s
        step = _if_else(s == natural[:, k], "", _join(":", _str(s)))
        parts.append(_join(_str(start), ":", _str(start + size[:, k]), step))
    text = pc.binary_join_element_wise(*parts, _scalar(", ")) if parts else pa.array([""] * rows, pa.string())
    return _join(text, _if_else(rest != 0, _join(" +", _str(rest)), ""))


def _group(acc: AccessColumns, rows: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """[rows, count] strides and sizes of the free dims of operands `rows` (each has `count` free dims)."""
    at = acc.free_offsets[rows][:, None] + np.arange(count)[None, :]
    return acc.free_stride[at], acc.free_size[at]


def _texts_of(acc: AccessColumns, rows: np.ndarray, count: int, itemsize: np.ndarray) -> pa.Array:
    """The bracketed dims of operands `rows`, which all have `count` free dims and one space kind."""
    stride, size = _group(acc, rows, count)
    if acc.space[rows[0]] == _HBM:
        stride = np.concatenate([acc.partition_stride[rows][:, None], stride], axis=1)
        size = np.concatenate([acc.partitions[rows][:, None], size], axis=1)
        return _dims_text(acc.offset[rows], stride, size)
    item = itemsize[rows]
    offset = acc.offset[rows]
    p0 = acc.partition_start[rows]
    lead = _join(_str(p0), ":", _str(p0 + acc.partitions[rows]))
    if count:
        lead = _join(lead, ", ", _dims_text(offset // item, stride, size))
    extra = offset % item
    return _join(lead, _if_else(extra != 0, _join(" +", _str(extra), "B"), ""))


def operand_texts(acc: AccessColumns) -> pa.Array:
    """`access_text` of every distinct operand of `acc` (see module doc)."""
    n = acc.operands
    if n == 0:
        return pa.array([], pa.string())
    itemsize = np.asarray([ITEMSIZE[d] for d in acc.dtype_names], np.int64)[acc.dtype]
    counts = np.diff(acc.free_offsets)
    kind = (acc.space == _HBM).astype(np.int64)
    order, pieces = [], []
    for key in np.unique(kind * 1_000_000 + counts).tolist():
        rows = np.flatnonzero((kind * 1_000_000 + counts) == key)
        order.append(rows)
        pieces.append(_texts_of(acc, rows, key % 1_000_000, itemsize))
    where = np.empty(n, np.int64)
    where[np.concatenate(order)] = np.arange(n)  # operand k's text is piece row where[k]
    dims = pa.concat_arrays(pieces).take(pa.array(where))
    space = pa.array([s.value for s in SPACES], pa.string()).take(pa.array(acc.space))
    dtype = pa.array([SHORT_DTYPE.get(d, d) for d in acc.dtype_names], pa.string()).take(pa.array(acc.dtype))
    tensor = pa.array(acc.tensor_names, pa.string()).take(pa.array(acc.tensor))
    return _join(space, " ", tensor, "[", dims, "] ", dtype)


def _joined(texts: pa.Array, offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """Per list of operand codes (CSR), their texts joined by ', ' ('' for an empty list)."""
    count = np.diff(offsets)
    widest = int(count.max()) if len(count) else 0
    if widest == 0:
        return pa.array([""] * len(count), pa.string())
    cols = []
    for k in range(widest):
        has = count > k
        text = texts.take(pa.array(np.where(has, values[np.minimum(offsets[:-1] + k, len(values) - 1)], 0)))
        cols.append(_if_else(has, _join(", ", text) if k else text, ""))  # (null_handling="skip"
    return _join(*cols)  # drops rows whose items are all null in pyarrow 26, so the separators are explicit)


def signature_texts(texts: pa.Array, ins: tuple, outs: tuple, attr_text: pa.Array, blank: np.ndarray) -> pa.Array:
    """`outputs <- inputs` + attrs text per instruction (CSR operand codes `ins`/`outs` into `texts`); ''
    where `blank` (DMAs)."""
    line = _join(_joined(texts, *outs), " <- ", _joined(texts, *ins), attr_text)
    return _if_else(blank, "", line)
