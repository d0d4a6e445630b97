"""The `dma_queues` pass: one row per DMA queue.

Contract: columns queue, transfers, bytes, active_time_ns (union of the
queue's transfer intervals), active_time_percent (of the profile window),
avg_bytes, throughput_gbps (bytes / active time = GB/s, 0 when never active),
small_transfers (transfers below the efficient size: `Thresholds.small_dma_partition_bytes` per
partition or `small_dma_bytes` in all); queues in natural order (q2 before q10).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from nprof.analysis import intervals as iv
from nprof.analysis.facts import facts
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("queue", pa.string(), nullable=False),
        pa.field("transfers", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("active_time_ns", pa.int64(), nullable=False),
        pa.field("active_time_percent", pa.float64(), nullable=False),
        pa.field("avg_bytes", pa.float64(), nullable=False),
        pa.field("throughput_gbps", pa.float64(), nullable=False),
        pa.field("small_transfers", pa.int64(), nullable=False),
    ]
)


def natural_key(name: str) -> list[object]:
    """Sort key that orders embedded numbers numerically: q2 < q10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def small_mask(profile: Profile, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> np.ndarray:
    """The DMA transfers (a bool per row) smaller than `thresholds.small_dma_partition_bytes` per partition
    or `thresholds.small_dma_bytes` in all (2 KiB and 32 KiB by default); memoised per profile and sizes (the
    dma_queues, warnings and findings passes all ask: a byte per transfer kept, not `d_partitions`' eight)."""
    f = facts(profile)
    per_partition, total = thresholds.small_dma_partition_bytes, thresholds.small_dma_bytes
    return f.memo(f"small_mask:{per_partition}:{total}",
                  lambda: (f.d_bytes < per_partition * f.d_partitions) | (f.d_bytes < total))  # fmt: skip


def dma_queues(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> pa.Table:
    """Per-queue DMA transfers, bytes, activity and throughput; small transfers by `thresholds`
    (see module doc)."""
    if profile.dma.num_rows == 0:
        return SCHEMA.empty_table()
    f = facts(profile)
    codes, names = f.queue
    total = f.total_ns
    small = small_mask(profile, thresholds)
    counts = np.bincount(codes, minlength=len(names))
    byte_sums = np.bincount(codes, weights=f.d_bytes, minlength=len(names))
    small_counts = np.bincount(codes[small], minlength=len(names))
    rows: dict[str, list] = {n: [] for n in SCHEMA.names}
    group_codes, offsets, order = f.queue_groups
    where = {int(c): order[offsets[g] : offsets[g + 1]] for g, c in enumerate(group_codes)}
    for k in sorted(range(len(names)), key=lambda i: natural_key(names[i])):
        m = where.get(k, np.empty(0, np.int64))
        active = iv.union_length(f.d_ts[m], np.minimum(f.d_end[m], max(total, 0)))
        nbytes = int(byte_sums[k])
        rows["queue"].append(names[k])
        rows["transfers"].append(int(counts[k]))
        rows["bytes"].append(nbytes)
        rows["active_time_ns"].append(active)
        rows["active_time_percent"].append(100.0 * active / total if total else 0.0)
        rows["avg_bytes"].append(nbytes / counts[k] if counts[k] else 0.0)
        rows["throughput_gbps"].append(nbytes / active if active else 0.0)
        rows["small_transfers"].append(int(small_counts[k]))
    return pa.table(rows, schema=SCHEMA)
