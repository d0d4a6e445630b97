"""Per-signature facts of the plan: what each distinct instruction costs and shows, from the columns.

Contract: `signatures(cols, preset, name, reps) -> Signatures` gives, for the representative instructions
`reps` (the first instruction of each distinct signature, ascending), the index of its `Template` (cost and
checks, `device.template`), its operand text, its DMA facts (partitions, HBM tensor, spill/reload) and
whether it is a PSUM zero-fill or an accumulating MATMUL (`device.psum`). Templates are computed once per
distinct (opcode, engine, attrs, queue, operand shapes) key, in program order, so the first malformed
instruction of the program raises `NprofError` naming it; every other fact is an array operation over the
representatives, the operand text included (`device.optext`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from nprof.arch.isa import ITEMSIZE, Opcode
from nprof.arch.presets import Preset
from nprof.device.accinfo import AccessCache
from nprof.device.columns import AccessColumns, Columns
from nprof.device.optext import operand_texts, signature_texts
from nprof.device.psum import attr, is_zero_fill_attrs
from nprof.device.rowcodes import padded, row_codes
from nprof.device.template import Template, template

_HBM, _PSUM = 0, 2  # arch.isa.SPACES


class Signatures(NamedTuple):
    """Per signature (one entry per representative)."""

    templates: list[Template]  # the distinct templates
    template: np.ndarray  # int64: index into `templates`
    operands: pa.Array  # string: display text ("" for DMAs)
    partitions: np.ndarray  # int64: DMA partitions (0 otherwise)
    tensor: list[str | None]  # DMA: the HBM tensor moved
    spill: np.ndarray  # bool: DMA attr spill
    reload: np.ndarray  # bool: DMA attr reload
    zero_fill: np.ndarray  # bool: a MEMSET of 0 into one PSUM region
    acc_matmul: np.ndarray  # bool: a MATMUL with attr accumulate
    matmul_dtype: str  # the peak every MATMUL runs at: "float32" (all have an FP32 operand), "mx" (all read packed
    # MX data), "float8" (all are FP8 x FP8) or "bfloat16" (otherwise, or no MATMUL)


def shape_codes(acc: AccessColumns) -> np.ndarray:
    """Per distinct operand, the code of what the cost model reads of it: (space, dtype, partitions, free dims,
    partition stride) (`device.accinfo.AccessCache` signatures)."""
    itemsize = np.asarray([ITEMSIZE[d] for d in acc.dtype_names], np.int64)
    key = [acc.space, itemsize[acc.dtype], acc.dtype, acc.partitions, acc.partition_stride]
    return row_codes([*key, *padded(acc.free_offsets, acc.free_stride, acc.free_size)], acc.operands)[0]


def _sub(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR lists of `rows` only."""
    lengths = np.diff(offsets)[rows]
    sub = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=sub[1:])
    at = np.repeat(offsets[rows] - sub[:-1], lengths) + np.arange(sub[-1])
    return sub, values[at]


def first_items(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each list's first item (-1 when empty)."""
    if not len(values):
        return np.full(len(offsets) - 1, -1, np.int64)
    return np.where(np.diff(offsets) > 0, values[np.minimum(offsets[:-1], len(values) - 1)], -1)


def _templates(cols: Columns, preset: Preset, name: str, reps: np.ndarray, keys: list) -> tuple[list, np.ndarray]:
    """The distinct templates (first occurrence first) and each representative's index into them."""
    codes, first = row_codes(keys, len(reps))
    rows = reps[first]
    operands = np.concatenate([_sub(cols.ins_offsets, cols.ins, rows)[1], _sub(cols.outs_offsets, cols.outs, rows)[1]])
    accesses = cols.acc.accesses(operands)  # (built in one pass: not one column lookup per field and operand)
    cache = AccessCache(text=False)
    out: list[Template] = []
    for i in rows.tolist():
        ins = cols.instruction(i, accesses)
        ii, oo = list(map(cache.get, ins.ins)), list(map(cache.get, ins.outs))
        out.append(template(name, preset, i, ins, ii, oo)._replace(opcode=ins.opcode.value))
    return out, codes


def _matmul_dtype(acc: AccessColumns, ins: tuple, mm: np.ndarray) -> str:
    """`Signatures.matmul_dtype` from the first two inputs of the MATMUL representatives `mm` (bool)."""
    if not mm.any():
        return "bfloat16"
    names = acc.dtype_names
    fp32 = np.asarray([d == "float32" for d in names], bool)
    fp8 = np.asarray([d.startswith(("float8", "mxfp")) for d in names], bool)
    mx = np.asarray([d.startswith("mxfp") for d in names], bool)  # packed MX: the preset's MX peak
    at, values = ins[0][:-1][mm], ins[1]
    dt = [acc.dtype[values[at]], acc.dtype[values[at + 1]]]  # a MATMUL has two inputs (device.template checks)
    if (fp32[dt[0]] | fp32[dt[1]]).all():
        return "float32"
    if (mx[dt[0]] & mx[dt[1]]).all():
        return "mx"
    return "float8" if (fp8[dt[0]] & fp8[dt[1]]).all() else "bfloat16"


def signatures(cols: Columns, preset: Preset, name: str, reps: np.ndarray) -> Signatures:
    """The per-signature facts of the representatives `reps` (see module doc)."""
    acc = cols.acc
    shape = shape_codes(acc)
    ins, outs = _sub(cols.ins_offsets, cols.ins, reps), _sub(cols.outs_offsets, cols.outs, reps)
    op, attrs = cols.opcode[reps], cols.attrs[reps]
    keys = [op, cols.engine[reps], attrs, cols.queue[reps], *padded(ins[0], shape[ins[1]]),
            *padded(outs[0], shape[outs[1]])]  # fmt: skip
    templates, which = _templates(cols, preset, name, reps, keys)
    dma = np.asarray([t.is_dma for t in templates], bool)[which]
    a0, o0 = np.maximum(first_items(*ins), 0), np.maximum(first_items(*outs), 0)  # (only read where they exist)
    space, tensor, parts = (np.append(x, 0) for x in (acc.space, acc.tensor, acc.partitions))  # (none: index 0)
    d_hbm = space[o0] == _HBM
    tensor_code = np.where((space[a0] == _HBM) | ~d_hbm, tensor[a0], tensor[o0])
    attr_of = cols.attrs_values
    names = ("spill", "reload", "accumulate")
    flag = {k: np.asarray([bool(attr(a, k, False)) for a in attr_of], bool)[attrs] for k in names}
    is_op = {o: np.asarray([x is o for x in cols.opcodes], bool)[op] for o in (Opcode.MEMSET, Opcode.MATMUL)}
    fills = is_op[Opcode.MEMSET] & (np.diff(outs[0]) == 1) & (space[o0] == _PSUM)
    zero = np.zeros(len(attr_of), bool)
    for a in np.unique(attrs[fills]).tolist():  # (the value of other instructions' attrs may be anything)
        zero[a] = is_zero_fill_attrs(attr_of[a])
    attr_text = pa.array([t.attr_text for t in templates], pa.string()).take(pa.array(which))
    return Signatures(
        templates=templates,
        template=which,
        operands=signature_texts(operand_texts(acc), ins, outs, attr_text, dma),
        partitions=np.where(dma, np.where(d_hbm, parts[a0], parts[o0]), 0),
        tensor=[acc.tensor_names[t] if d else None for t, d in zip(tensor_code.tolist(), dma.tolist(), strict=True)],
        spill=flag["spill"] & dma,
        reload=flag["reload"] & dma,
        zero_fill=fills & zero[attrs],
        acc_matmul=is_op[Opcode.MATMUL] & flag["accumulate"],
        matmul_dtype=_matmul_dtype(acc, ins, is_op[Opcode.MATMUL]),
    )
