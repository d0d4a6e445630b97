"""The `engines` pass: one row per engine with its instruction time, active time and count.

Contract: columns engine, instruction_count, instruction_time_ns (sum of
durations), active_time_ns (union of busy intervals, clipped to the profile
window), active_time_percent (of the window), wait_ns (semaphore waits: their union over the engine's
tracks while it ran nothing, `nprof.analysis.latency`),
flops. On the virtual device the five NeuronCore engines are always listed
(zero rows included); other devices list the engines that ran something.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.analysis.facts import NEURON_ENGINES, facts
from nprof.analysis.latency import engine_wait_ns
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("engine", pa.string(), nullable=False),
        pa.field("instruction_count", pa.int64(), nullable=False),
        pa.field("instruction_time_ns", pa.int64(), nullable=False),
        pa.field("active_time_ns", pa.int64(), nullable=False),
        pa.field("active_time_percent", pa.float64(), nullable=False),
        pa.field("wait_ns", pa.int64(), nullable=False),
        pa.field("flops", pa.int64(), nullable=False),
    ]
)


def engine_list(profile: Profile) -> list[str]:
    """Engines to report: the NeuronCore engines on the virtual device, plus any other engine that ran."""
    present = facts(profile).engines_present
    if profile.info.device == "virtual-neuroncore":
        return list(NEURON_ENGINES) + [e for e in present if e not in NEURON_ENGINES]
    return list(present)


def engines(profile: Profile) -> pa.Table:
    """Per-engine time and counts (see module doc)."""
    f = facts(profile)
    total = f.total_ns
    rows: dict[str, list] = {n: [] for n in SCHEMA.names}
    for engine in engine_list(profile):
        ms, me = f.engine_merged(engine)
        active = int((np.minimum(me, total) - np.minimum(ms, total)).sum()) if ms.size else 0
        rows["engine"].append(engine)
        rows["instruction_count"].append(f.engine_counts.get(engine, 0))
        rows["instruction_time_ns"].append(f.engine_sum(engine, "duration"))
        rows["active_time_ns"].append(active)
        rows["active_time_percent"].append(100.0 * active / total if total else 0.0)
        rows["wait_ns"].append(engine_wait_ns(profile, engine))
        rows["flops"].append(f.engine_sum(engine, "flops"))
    return pa.table(rows, schema=SCHEMA)
