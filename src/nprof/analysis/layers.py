"""The `layers` pass: one row per framework layer (compiled graphs), empty when no event has a layer.

Contract: columns layer, instruction_count, instruction_time_ns (sum of
durations), flops, dma_count, dma_bytes, start_ns (first event start), end_ns
(last event end); rows in order of first appearance on the timeline (start_ns).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.analysis.facts import facts
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("layer", pa.string(), nullable=False),
        pa.field("instruction_count", pa.int64(), nullable=False),
        pa.field("instruction_time_ns", pa.int64(), nullable=False),
        pa.field("flops", pa.int64(), nullable=False),
        pa.field("dma_count", pa.int64(), nullable=False),
        pa.field("dma_bytes", pa.int64(), nullable=False),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
    ]
)


def _grouped(codes: np.ndarray, names: list[str], cols: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    keep = codes >= 0
    if not keep.any():
        return {}
    if keep.all():  # no copies when every row has a layer
        table = pa.table({"k": codes, **cols})
    else:
        table = pa.table({"k": codes[keep], **{k: v[keep] for k, v in cols.items()}})
    aggs = [("ts", "min"), ("end", "max"), ("ts", "count")] + [(k, "sum") for k in cols if k not in ("ts", "end")]
    g = table.group_by("k", use_threads=False).aggregate(aggs).to_pydict()
    out: dict[str, dict[str, int]] = {}
    for i, k in enumerate(g["k"]):
        out[names[k]] = {name: g[name][i] for name in g if name != "k"}
    return out


def layers(profile: Profile) -> pa.Table:
    """Per-layer time, counts and FLOPs (see module doc)."""
    f = facts(profile)
    instr = dma = {}
    if profile.instructions.num_rows:
        codes, names = facts(profile).strings("instructions", "layer")
        instr = _grouped(codes, names, {"ts": f.i_ts, "end": f.i_end_now(), "dur": f.i_dur, "fl": f.i_col("flops")})
    if profile.dma.num_rows:
        codes, names = facts(profile).strings("dma", "layer")
        dma = _grouped(codes, names, {"ts": f.d_ts, "end": f.d_end, "b": f.d_bytes})
    rows: dict[str, list] = {n: [] for n in SCHEMA.names}
    for layer in set(instr) | set(dma):
        i, d = instr.get(layer, {}), dma.get(layer, {})
        starts = [x["ts_min"] for x in (i, d) if x]
        ends = [x["end_max"] for x in (i, d) if x]
        rows["layer"].append(layer)
        rows["instruction_count"].append(i.get("ts_count", 0))
        rows["instruction_time_ns"].append(i.get("dur_sum", 0))
        rows["flops"].append(i.get("fl_sum", 0))
        rows["dma_count"].append(d.get("ts_count", 0))
        rows["dma_bytes"].append(d.get("b_sum", 0))
        rows["start_ns"].append(min(starts))
        rows["end_ns"].append(max(ends))
    table = pa.table(rows, schema=SCHEMA)
    return table.sort_by([("start_ns", "ascending"), ("layer", "ascending")])
