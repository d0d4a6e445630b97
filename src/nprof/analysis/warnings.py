"""The `warnings` pass: timeline warning annotations.

Contract: columns kind, message, ts, end (ns: the box to draw), event_ids
(list<int64>: the events inside the box to highlight), tensor, source (most
frequent source locations, comma-separated), count, bytes. Kinds:
* `tensor_reload`: a tensor loaded from HBM more than `Thresholds.reload_limit` times (twice by
  default; one row per tensor, box around all its loads);
* `small_dma`: DMA transfers below `Thresholds.small_dma_partition_bytes` per partition or
  `small_dma_bytes` in total (2 KiB and 32 KiB by default; one row per tensor; transfers without a
  tensor name form one row);
* `throttling`: each region where a profile counter whose name contains
  "throttl" is above zero (one row per region; no event ids).
Rows are ordered by kind, then tensor.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis import intervals as iv
from nprof.analysis.dma_queues import small_mask
from nprof.analysis.facts import facts, to_numpy
from nprof.analysis.sources import group_rows, human_bytes, human_ns, top_per_group
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("end", pa.int64(), nullable=False),
        pa.field("event_ids", pa.list_(pa.int64())),
        pa.field("tensor", pa.string()),
        pa.field("source", pa.string()),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
    ]
)
# the message of one grouped warning: (tensor, count, bytes, mean partitions, sources) -> text
Message = Callable[[str, int, int, float, list[str]], str]

RELOAD_LIMIT = DEFAULT_THRESHOLDS.reload_limit  # a tensor loaded more than this many times from HBM is flagged


def _table(cols: dict[str, list], offsets: np.ndarray, ids: np.ndarray) -> pa.Table:
    event_ids = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(ids, pa.int64()))
    arrays = [event_ids if n == "event_ids" else pa.array(cols[n], SCHEMA.field(n).type) for n in SCHEMA.names]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _grouped_warnings(profile: Profile, kind: str, rows: np.ndarray, codes: np.ndarray, message: Message) -> pa.Table:
    """One warning per distinct code among DMA `rows` (ascending; codes aligned with rows; -1 = skip)."""
    f = facts(profile)
    group_codes, offsets, order = group_rows(codes)
    if group_codes.size == 0:
        return SCHEMA.empty_table()
    starts = offsets[:-1]
    firsts = rows[order[starts]]  # each group's first row (table order)
    counts = np.diff(offsets)
    # per-group figures accumulated in table order (sequential reads; exact int64 sums, min and max)
    slot = np.zeros(int(group_codes[-1]) + 1, np.intp)
    slot[group_codes] = np.arange(group_codes.size)
    kept = codes >= 0
    group, picked = (slot[codes], rows) if kept.all() else (slot[codes[kept]], rows[kept])
    nbytes, parts = np.zeros(group_codes.size, np.int64), np.zeros(group_codes.size, np.int64)
    np.add.at(nbytes, group, f.d_bytes[picked])
    np.add.at(parts, group, f.d_partitions[picked])
    end = np.full(group_codes.size, np.iinfo(np.int64).min)
    np.maximum.at(end, group, f.d_end[picked])
    if iv.is_sorted(f.d_ts):  # the first member of a group (table order) starts earliest
        ts = f.d_ts[firsts]
    else:
        ts = np.full(group_codes.size, np.iinfo(np.int64).max)
        np.minimum.at(ts, group, f.d_ts[picked])
    tensors = profile.dma["tensor"].take(pa.array(firsts)).to_pylist()
    src_codes, src_names = f.source("dma")
    sources = top_per_group(group, src_codes[picked], src_names, group_codes.size)
    cols: dict[str, list] = {n: [] for n in SCHEMA.names if n != "event_ids"}
    for g in range(group_codes.size):
        n = int(counts[g])
        cols["kind"].append(kind)
        cols["message"].append(message(tensors[g], n, int(nbytes[g]), parts[g] / n, sources[g]))
        cols["ts"].append(int(ts[g]))
        cols["end"].append(int(end[g]))
        cols["tensor"].append(tensors[g])
        cols["source"].append(", ".join(sources[g]) or None)
        cols["count"].append(n)
        cols["bytes"].append(int(nbytes[g]))
    ids = f.d_id[rows][order]  # grouped, table order within groups: one random gather
    return _table(cols, offsets - offsets[0], ids)


def _tensor_reloads(profile: Profile, limit: int) -> pa.Table:
    f = facts(profile)
    loads = np.flatnonzero(f.direction_mask(src="hbm"))
    if loads.size == 0:
        return SCHEMA.empty_table()
    codes = f.tensor[0][loads]
    valid = codes >= 0
    flag = np.zeros(codes.size, dtype=bool)
    if valid.any():
        flag[valid] = np.bincount(codes[valid])[codes[valid]] > limit
    codes = np.where(flag, codes, -1)

    def message(tensor: str, count: int, nbytes: int, partitions: float, sources: list[str]) -> str:
        where = f" at {', '.join(sources)}" if sources else ""
        return (
            f"tensor '{tensor}' is loaded {count} times from HBM ({human_bytes(nbytes)} in total){where}; "
            "keep it in SBUF between uses or reorder the loops to load it once"
        )

    return _grouped_warnings(profile, "tensor_reload", loads, codes, message)


def small_dmas(profile: Profile, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> pa.Table:
    """The `small_dma` rows: transfers under the sizes of `thresholds`, one row per tensor (see module doc)."""
    small = np.flatnonzero(small_mask(profile, thresholds))
    if small.size == 0:
        return SCHEMA.empty_table()
    codes = facts(profile).tensor[0][small]
    codes = np.where(codes >= 0, codes, int(codes.max(initial=-1)) + 1)  # transfers without a tensor: one group

    def message(tensor: str | None, count: int, nbytes: int, partitions: float, sources: list[str]) -> str:
        what = f"of '{tensor}'" if tensor else "without a tensor name"
        where = f" at {', '.join(sources)}" if sources else ""
        plural = "s" if count > 1 else ""
        return (
            f"{count} small DMA transfer{plural} {what}{where}: average {human_bytes(nbytes / count)} "
            f"over {partitions:.0f} partition{'s' if round(partitions) != 1 else ''} "
            f"(efficient: >= {human_bytes(thresholds.small_dma_partition_bytes)} per partition "
            f"and >= {human_bytes(thresholds.small_dma_bytes)} per transfer); each pays a fixed per-transfer overhead, "
            "so merge them into larger ones"
        )

    return _grouped_warnings(profile, "small_dma", small, codes, message)


def throttling(profile: Profile) -> pa.Table:
    c = profile.counters
    if c.num_rows == 0:
        return SCHEMA.empty_table()
    names = pc.unique(c["name"]).to_pylist()
    cols: dict[str, list] = {n: [] for n in SCHEMA.names if n != "event_ids"}
    total = facts(profile).total_ns
    for name in sorted(n for n in names if "throttl" in n.lower()):
        series = c.filter(pc.equal(c["name"], name)).sort_by("ts")
        ts, value = to_numpy(series["ts"]), to_numpy(series["value"], np.float64)
        on = value > 0
        edges = np.diff(np.concatenate([[0], on.astype(np.int8), [0]]))
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        for a, b in zip(starts, stops, strict=True):
            t0 = int(ts[a])
            t1 = int(ts[b]) if b < ts.size else max(total, t0)
            peak = float(value[a:b].max())
            cols["kind"].append("throttling")
            cols["message"].append(
                f"'{name}' reports throttling for {human_ns(t1 - t0)} (peak {peak:g}): the device slowed its clocks, "
                "so instructions in this region run slower than the cost model says"
            )
            cols["ts"].append(t0)
            cols["end"].append(t1)
            cols["tensor"].append(None)
            cols["source"].append(None)
            cols["count"].append(int(b - a))
            cols["bytes"].append(0)
    n = len(cols["kind"])
    return _table(cols, np.zeros(n + 1, np.int64), np.empty(0, np.int64))


def tensor_reloads(profile: Profile, limit: int = RELOAD_LIMIT) -> pa.Table:
    """`tensor_reload` warnings: tensors loaded more than `limit` times (memoised per profile and limit: the
    findings pass reuses them)."""
    return facts(profile).memo(f"tensor_reloads:{limit}", lambda: _tensor_reloads(profile, limit))


def warnings(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> pa.Table:
    """All warning annotations of `profile` (see module doc); `thresholds` sets `tensor_reload` (reload_limit)
    and `small_dma` (the small_dma_* sizes)."""
    reloads = tensor_reloads(profile, thresholds.reload_limit)
    parts = [t for t in (reloads, small_dmas(profile, thresholds), throttling(profile)) if t.num_rows]
    if not parts:
        return SCHEMA.empty_table()
    return pa.concat_tables(parts)
