"""Per-signature facts of the plan: what each distinct instruction costs and shows, from the columns.

Contract: `signatures(cols, preset, name, reps) -> Signatures` gives, for the representative instructions
`reps` (the first instruction of each distinct signature, ascending), the index of its `Template` (cost and
checks, `device.template`), its operand text, its DMA facts (partitions, HBM tensor, spill/reload) and
whether it is a PSUM zero-fill or an accumulating MATMUL (`device.psum`). Templates are computed once per
distinct (opcode, engine, attrs, queue, operand shapes) key, in program order, so the first malformed
instruction of the program raises `NprofError` naming it; every other fact is an array operation over the
representatives, except the operand text, which is formatted once per distinct operand and joined per
representative.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from nprof.arch.isa import ITEMSIZE, Opcode
from nprof.arch.presets import Preset
from nprof.device.accinfo import AccessCache, access_text
from nprof.device.columns import AccessColumns, Columns
from nprof.device.psum import attr, is_zero_fill_attrs
from nprof.device.rowcodes import padded, row_codes
from nprof.device.template import Template, template

_HBM, _PSUM = 0, 2  # device.columns.SPACES


class Signatures(NamedTuple):
    """Per signature (one entry per representative)."""

    templates: list[Template]  # the distinct templates
    template: np.ndarray  # int64: index into `templates`
    operands: list[str]  # display text ("" for DMAs)
    partitions: np.ndarray  # int64: DMA partitions (0 otherwise)
    tensor: list[str | None]  # DMA: the HBM tensor moved
    spill: np.ndarray  # bool: DMA attr spill
    reload: np.ndarray  # bool: DMA attr reload
    zero_fill: np.ndarray  # bool: a MEMSET of 0 into one PSUM region
    acc_matmul: np.ndarray  # bool: a MATMUL with attr accumulate


def shape_codes(acc: AccessColumns) -> np.ndarray:
    """Per distinct operand, the code of what the cost model reads of it: (space, dtype, partitions, free dims,
    partition stride) (`device.accinfo.AccessCache` signatures)."""
    itemsize = np.asarray([ITEMSIZE[d] for d in acc.dtype_names], np.int64)
    key = [acc.space, itemsize[acc.dtype], acc.dtype, acc.partitions, acc.partition_stride]
    return row_codes([*key, *padded(acc.free_offsets, acc.free_stride, acc.free_size)], acc.count)[0]


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
    cache = AccessCache()
    out: list[Template] = []
    for i in reps[first].tolist():
        ins = cols.instruction(i)
        ii, oo = list(map(cache.get, ins.ins)), list(map(cache.get, ins.outs))
        out.append(template(name, preset, i, ins, ii, oo)._replace(opcode=ins.opcode.value))
    return out, codes


def _texts(cols: Columns, dma: np.ndarray, ins: tuple, outs: tuple, attr_text: list[str]) -> list[str]:
    """Operand text per representative: outputs <- inputs, then the attrs ("" for DMAs)."""
    used = np.unique(np.concatenate([ins[1], outs[1]]))
    text = dict(zip(used.tolist(), (access_text(cols.acc.access(k)) for k in used.tolist()), strict=True))
    get = text.__getitem__
    in_at, in_v = ins[0].tolist(), ins[1].tolist()
    out_at, out_v = outs[0].tolist(), outs[1].tolist()
    return [
        "" if d else ", ".join(map(get, out_v[out_at[j] : out_at[j + 1]])) + " <- "
        + ", ".join(map(get, in_v[in_at[j] : in_at[j + 1]])) + attr_text[j]
        for j, d in enumerate(dma.tolist())
    ]  # fmt: skip


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
    if not acc.count:
        acc = acc._replace(space=np.zeros(1, np.int64), tensor=np.zeros(1, np.int64), partitions=np.zeros(1, np.int64))
    d_hbm = acc.space[o0] == _HBM
    tensor_code = np.where((acc.space[a0] == _HBM) | ~d_hbm, acc.tensor[a0], acc.tensor[o0])
    attr_of = cols.attrs_values
    flag = {k: np.asarray([bool(attr(a, k, False)) for a in attr_of], bool)[attrs] for k in ("spill", "reload")}
    is_op = {o: np.asarray([x is o for x in cols.opcodes], bool)[op] for o in (Opcode.MEMSET, Opcode.MATMUL)}
    fills = is_op[Opcode.MEMSET] & (np.diff(outs[0]) == 1) & (acc.space[o0] == _PSUM)
    zero = np.zeros(len(attr_of), bool)
    for a in np.unique(attrs[fills]).tolist():  # (the value of other instructions' attrs may be anything)
        zero[a] = is_zero_fill_attrs(attr_of[a])
    attr_text = [templates[t].attr_text for t in which.tolist()]
    return Signatures(
        templates=templates,
        template=which,
        operands=_texts(cols, dma, ins, outs, attr_text),
        partitions=np.where(dma, np.where(d_hbm, acc.partitions[a0], acc.partitions[o0]), 0),
        tensor=[acc.tensor_names[t] if d else None for t, d in zip(tensor_code.tolist(), dma.tolist(), strict=True)],
        spill=flag["spill"] & dma,
        reload=flag["reload"] & dma,
        zero_fill=fills & zero[attrs],
        acc_matmul=is_op[Opcode.MATMUL] & np.asarray([bool(attr(a, "accumulate", False)) for a in attr_of])[attrs],
    )
