"""The `opcodes` pass: one row per (engine, opcode) with counts, durations, FLOPs and bytes.

Contract: columns engine, opcode, count, total_ns, avg_ns, max_ns, flops
(model FLOPs), hw_flops, bytes (all SBUF/PSUM/HBM bytes read and written by
the instructions); rows sorted by total_ns descending, then engine, opcode.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.analysis.facts import facts
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("engine", pa.string(), nullable=False),
        pa.field("opcode", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("total_ns", pa.int64(), nullable=False),
        pa.field("avg_ns", pa.float64(), nullable=False),
        pa.field("max_ns", pa.int64(), nullable=False),
        pa.field("flops", pa.int64(), nullable=False),
        pa.field("hw_flops", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
    ]
)

BYTE_COLUMNS = tuple(f"{m}_{w}_bytes" for m in ("hbm", "sbuf", "psum") for w in ("read", "write"))


def instruction_bytes(profile: Profile) -> np.ndarray:
    """Bytes read and written by each instruction, all memories together (`nprof.store.lean` presets it,
    read once, for a profile without the byte columns)."""
    return facts(profile).take("instruction_bytes", lambda: _instruction_bytes(profile))


def _instruction_bytes(profile: Profile) -> np.ndarray:
    f = facts(profile)
    total = np.zeros(profile.instructions.num_rows, dtype=np.int64)
    for col in BYTE_COLUMNS:
        values = f.i_col(col)
        if values.any():  # a read-only test is cheaper than an add, and many columns are all zero
            total += values
    return total


def opcodes(profile: Profile) -> pa.Table:
    """Per engine and opcode aggregates (see module doc)."""
    if profile.instructions.num_rows == 0:
        return SCHEMA.empty_table()
    f = facts(profile)
    eng_codes, eng_names = f.engine
    op_codes, op_names = f.strings("instructions", "opcode")
    table = pa.table(
        {
            "e": eng_codes,
            "o": op_codes,
            "d": f.i_dur,
            "fl": f.i_col("flops"),
            "hw": f.i_col("hw_flops"),
            "b": instruction_bytes(profile),
        }
    )
    g = table.group_by(["e", "o"], use_threads=False).aggregate(
        [("d", "count"), ("d", "sum"), ("d", "max"), ("fl", "sum"), ("hw", "sum"), ("b", "sum")]
    )
    count = g["d_count"].to_numpy()
    total = g["d_sum"].to_numpy()
    out = pa.table(
        {
            "engine": pa.array(np.asarray(eng_names, dtype=object)[g["e"].to_numpy()], pa.string()),
            "opcode": pa.array(np.asarray(op_names, dtype=object)[g["o"].to_numpy()], pa.string()),
            "count": count,
            "total_ns": total,
            "avg_ns": total / np.maximum(count, 1),
            "max_ns": g["d_max"].to_numpy(),
            "flops": g["fl_sum"].to_numpy(),
            "hw_flops": g["hw_sum"].to_numpy(),
            "bytes": g["b_sum"].to_numpy(),
        },
        schema=SCHEMA,
    )
    return out.sort_by([("total_ns", "descending"), ("engine", "ascending"), ("opcode", "ascending")])
