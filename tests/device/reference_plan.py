"""The plain per-instruction plan builder: the reference the vectorised `device.plan.build_plan` is held to.

It keys every instruction by its Python values (opcode, engine, attrs tuple, queue, every operand's fields),
numbers the signatures in order of first occurrence, and computes each signature's facts from its first
`Instruction` with `device.template` and `device.accinfo`, one instruction at a time; PSUM zero-fills are
found instruction by instruction. The result goes through the same assembly as the fast builder, so the two
plans must be equal field by field.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pyarrow as pa

from nprof.arch.isa import Instruction, Opcode, Space
from nprof.arch.presets import Preset
from nprof.device.accinfo import VALUE_KEY, AccessCache
from nprof.device.columns import optional_strings
from nprof.device.plan import Plan, assemble
from nprof.device.signatures import Signatures
from nprof.device.template import template
from nprof.errors import NprofError
from nprof.program.model import Program


def _is_zero_fill(ins: Instruction) -> bool:
    return (
        ins.opcode is Opcode.MEMSET
        and len(ins.outs) == 1
        and ins.outs[0].space is Space.PSUM
        and float(ins.attr("value", 0.0)) == 0.0
    )


def _elided(instrs: tuple[Instruction, ...]) -> np.ndarray:
    """PSUM zero-fills whose first dependent is a MATMUL accumulating into the same region."""
    out = np.zeros(len(instrs), bool)
    first_user: dict[int, int] = {}
    for u, ins in enumerate(instrs):
        for d in ins.deps:
            if _is_zero_fill(instrs[d]) and d not in first_user:
                first_user[d] = u
    for m, u in first_user.items():
        user = instrs[u]
        if user.opcode is Opcode.MATMUL and user.attr("accumulate", False) and user.outs[:1] == instrs[m].outs:
            out[m] = True
    return out


def _signature(program: Program, preset: Preset, reps: list[int], memo: dict) -> tuple:
    """The facts of each representative, one at a time (templates memoised on the shape key)."""
    cache = AccessCache()
    templates, which, operands, parts, tensors, spill, reload = [], [], [], [], [], [], []
    for i in reps:
        ins = program.instructions[i]
        ii, oo = [cache.get(a) for a in ins.ins], [cache.get(a) for a in ins.outs]
        key = (ins.opcode, ins.engine, ins.attrs, ins.queue, tuple(x.sig for x in ii), tuple(x.sig for x in oo))
        if key not in memo:
            memo[key] = len(templates)
            templates.append(template(program.name, preset, i, ins, ii, oo)._replace(opcode=ins.opcode.value))
        t = templates[memo[key]]
        which.append(memo[key])
        if t.is_dma:
            d_hbm = oo[0].mem == 0
            tensors.append(ins.ins[0].tensor if ii[0].mem == 0 or not d_hbm else ins.outs[0].tensor)
            parts.append(ii[0].partitions if d_hbm else oo[0].partitions)
            spill.append(bool(ins.attr("spill", False)))
            reload.append(bool(ins.attr("reload", False)))
            operands.append("")
        else:
            tensors.append(None)
            parts.append(0)
            spill.append(False)
            reload.append(False)
            texts = [x.text for x in oo], [x.text for x in ii]
            operands.append(", ".join(texts[0]) + " <- " + ", ".join(texts[1]) + t.attr_text)
    return templates, which, operands, parts, tensors, spill, reload


def _matmul_dtype(instrs: tuple[Instruction, ...]) -> str:
    mm = [ins for ins in instrs if ins.opcode is Opcode.MATMUL]
    if mm and all(any(a.dtype == "float32" for a in ins.ins[:2]) for ins in mm):
        return "float32"
    if mm and all(all(a.dtype.startswith("mxfp") for a in ins.ins[:2]) for ins in mm):
        return "mx"
    if mm and all(all(a.dtype.startswith(("float8", "mxfp")) for a in ins.ins[:2]) for ins in mm):
        return "float8"
    return "bfloat16"


def reference_plan(program: Program, preset: Preset) -> Plan:
    """The plan of `program` built instruction by instruction (see module doc)."""
    instrs = program.instructions
    memo: dict[tuple, int] = {}
    code = []
    for ins in instrs:
        key = (ins.opcode, ins.engine, ins.attrs, ins.queue, tuple(map(VALUE_KEY, ins.ins)),
               tuple(map(VALUE_KEY, ins.outs)))  # fmt: skip
        code.append(memo.setdefault(key, len(memo)))
    reps = [code.index(k) for k in range(len(memo))]
    templates, which, operands, parts, tensors, spill, reload = _signature(program, preset, reps, {})
    for i, ins in enumerate(instrs):
        for d in ins.deps:
            if not 0 <= d < i:
                raise NprofError(f"program {program.name!r}: instruction {i} ({ins.opcode.value}) waits for {d}")
    offsets = np.zeros(len(instrs) + 1, np.int64)
    np.cumsum([len(ins.deps) for ins in instrs], out=offsets[1:])
    flat = np.asarray([d for ins in instrs for d in ins.deps], np.int64)
    n_sig = len(reps)
    sigs = Signatures(
        templates, np.asarray(which, np.int64), pa.array(operands, pa.string()), np.asarray(parts, np.int64), tensors,
        np.asarray(spill, bool), np.asarray(reload, bool), np.zeros(n_sig, bool), np.zeros(n_sig, bool),
        _matmul_dtype(instrs),
    )  # fmt: skip
    strings = tuple(optional_strings(instrs, attrgetter(k)) for k in ("source", "layer", "hlo_name"))
    return assemble(preset, np.asarray(code, np.int64), sigs, offsets, flat, _elided(instrs), strings)
