"""Which NeuronCore generation a program needs.

Contract: `check_preset_runs(program, preset)` raises NprofError when `program` uses NeuronCore-v4 MX
instructions (QUANTIZE_MX, or any operand of a packed MX dtype) and the preset (default: the program's) is an
earlier core, which has none (as `nisa.*_mx` refuses at trace time). `simulate` and `simulate_workers` call it,
so a library user gets the same refusal as `nprof capture`. The scan is done once per Program object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from nprof.errors import NprofError

if TYPE_CHECKING:
    from nprof.arch.presets import Preset
    from nprof.program.model import Program

_USES_MX = "_uses_mx_instructions"


def uses_mx(program: Program) -> bool:
    """True when `program` has a QUANTIZE_MX instruction or reads a packed MX operand (cached on the program).
    Read from the instruction table when the program came from a file (it is attached), else by one pass over
    the Instructions (building the table for this alone would cost ~1 s per 10^5 instructions)."""
    cached: bool | None = program.__dict__.get(_USES_MX)
    if cached is not None:
        return cached
    from nprof.arch.isa import PACKED_MX, Opcode
    from nprof.program.table import attached_table

    table = attached_table(program)
    if table is not None:
        import pyarrow.compute as pc

        dtypes = pc.struct_field(pc.list_flatten(table.column("ins")), "dtype")
        quantize = pc.any(pc.equal(table.column("opcode"), pa.scalar(Opcode.QUANTIZE_MX.value, pa.string()))).as_py()
        found = bool(quantize or pc.any(pc.is_in(dtypes, pa.array(sorted(PACKED_MX), pa.string()))).as_py())
    else:
        from nprof.program.lazy import Instructions

        instrs = program.instructions
        segments = instrs.segments() if isinstance(instrs, Instructions) and not instrs.materialized else [(0, instrs)]
        kinds = (
            pair
            for _, seg in segments
            for pair in (((i.opcode, i.ins) for i in seg) if isinstance(seg, (list, tuple)) else seg.kinds())
        )  # (a columnar chunk of a trace tells its opcodes and read operands without making its instructions)
        found = any(op is Opcode.QUANTIZE_MX or any(a.dtype in PACKED_MX for a in ins) for op, ins in kinds)
    object.__setattr__(program, _USES_MX, found)
    return found


def check_preset_runs(program: Program, preset: str | Preset | None) -> None:
    """See the module doc."""
    from nprof.arch.presets import get_preset

    pre = get_preset(preset if preset is not None else program.preset)
    if pre.core != "NeuronCore-v4" and uses_mx(program):
        raise NprofError(
            f"program {program.name!r} uses NeuronCore-v4 MX instructions (quantize_mx / nc_matmul_mx); "
            f"{pre.name} ({pre.core}) has none: run it with --device-preset trn3"
        )
