"""Waits and fixed DMA latencies: how much of a run the device spends idle waiting, and where.

Contract:
* `engine_wait_ns(profile, engine)`: the time the engine had an instruction waiting at the head of one of its
  tracks (its semaphore wait, [ts - wait_ns, ts)) while it ran nothing at all — the union over its tracks, so
  TensorE's two tracks (weights and matmuls) waiting at the same time count once, and time spent running on
  one track while the other waits is not a wait. Never more than the run.
* `latency_idle(profile)`: the fixed DMA latencies on the run's critical path (first iteration): walking back
  from the last event to whichever dependency or same-track predecessor ended last, every DMA that waited
  for a dependency (or for time 0) before starting counts that wait, up to the preset's fixed DMA latency
  (`dma_latency_ns`: semaphore to transfer start) — time the run is longer only because a DMA waited out its
  fixed cost. Returns (total ns, DMA rows paying it, ns per row); zeros when the profile's device preset is
  unknown (real hardware).
* `dma_latency_ns(profile)`: that fixed latency of the profile's preset, 0.0 when unknown.
* `latency_share(profile)`: that total as a fraction of the run (None when unknown); at and above
  `Thresholds.latency_share` (0.5 by default) the summary's `bound` field says "latency".
* `latency_findings(profile, at_share)`: the `latency_bound` finding (a warning) when the share reaches
  `at_share`, naming the share, the number of DMAs, and the layers and source lines whose DMAs waited
  longest, with what to do.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis import intervals as iv
from nprof.analysis.facts import ENGINE_COMPILED_FROM, facts, to_numpy
from nprof.compiled import load_compiled
from nprof.profile import Profile

MAX_LAYERS = 3
COMPILED_FROM = ENGINE_COMPILED_FROM  # an engine's rows from which its waits run compiled (see facts)


def engine_wait_ns(profile: Profile, engine: str) -> int:
    """Union of the engine's head-of-track waits minus the time it was busy (see module doc); memoised per
    profile and engine (the engines and findings passes both ask)."""
    return facts(profile).memo(f"engine_wait_ns:{engine}", lambda: _engine_wait_ns(profile, engine))


def _engine_wait_ns(profile: Profile, engine: str) -> int:
    """`engine_wait_ns` computed as |W ∪ B| - |B| (= |W| - |W ∩ B|), W the waits [ts - wait, ts) and B the busy
    time: by the compiled loop (`nprof.analysis.engine_core`) for a big engine with time-sorted rows, else by
    merges. With time-sorted rows the waits end in order, so W is merged without a sort and W ∪ B merges two
    sorted runs (linear); else all intervals merge at once."""
    f = facts(profile)
    wait_all = f.i_col("wait_ns")
    core = load_compiled("nprof.analysis.engine_core", f.engine_counts.get(engine, 0), COMPILED_FROM, loaded="numba")
    if core is not None and f.i_ts_sorted and engine in f.engine[1]:  # the engine's rows read in place
        union, busy_ns = core.wait_union_code(f.engine[0], f.engine[1].index(engine), f.i_ts, f.i_dur, wait_all)
        return max(0, int(union) - int(busy_ns))
    everyone = f.engine_rows(engine)  # ascending: the engine's rows, grouped once for every engine
    rows = everyone[wait_all[everyone] > 0]
    if rows.size == 0:
        return 0
    busy = f.engine_merged(engine)
    ts = f.i_ts[rows]
    if iv.is_sorted(ts):
        start, end = iv.merge_by_end(ts - wait_all[rows], ts)
    else:
        start, end = ts - wait_all[rows], ts
    return max(0, iv.union_length(np.concatenate([busy[0], start]), np.concatenate([busy[1], end]))
               - int((busy[1] - busy[0]).sum()))  # fmt: skip


def dma_latency_ns(profile: Profile) -> float:
    """The profile's device preset's fixed DMA latency (semaphore to transfer start), ns; 0.0 when the preset is
    unknown (real hardware, or a preset this version does not know)."""
    preset = profile.info.preset
    if not preset:
        return 0.0
    from nprof.arch.presets import get_preset

    try:
        return float(get_preset(preset).dma_latency_ns)
    except Exception:
        return 0.0


def latency_idle(profile: Profile) -> tuple[int, np.ndarray, np.ndarray]:
    """(critical-path ns spent in fixed DMA latencies, DMA rows paying them, ns per row) — see module doc."""
    return facts(profile).memo("latency_idle", lambda: _latency_path(profile))


def _columns(profile: Profile) -> tuple[np.ndarray, ...]:
    """pc, ts, end, track code, is-DMA, row in its table, deps offsets and values of the first iteration's
    instructions and DMAs together."""
    cols = []
    for table, track, is_dma in ((profile.instructions, "track", False), (profile.dma, "queue", True)):
        it = to_numpy(table["iteration"]) if table.num_rows else np.empty(0, np.int64)
        rows = np.flatnonzero(it == it.min()) if it.size else it
        deps = table["deps"].combine_chunks() if table.num_rows else pa.array([], pa.list_(pa.int64()))
        offsets = to_numpy(deps.offsets)
        lengths = np.diff(offsets)[rows]
        values = to_numpy(deps.values)[np.repeat(np.isin(np.arange(len(deps)), rows), np.diff(offsets))]
        names = table[track].combine_chunks().dictionary_encode() if table.num_rows else None
        codes = to_numpy(names.indices)[rows] if names is not None else rows
        ts = to_numpy(table["ts"])[rows]
        end = ts + to_numpy(table["duration"])[rows]
        track_code = codes + (1 << 20 if is_dma else 0)
        pcs = to_numpy(table["pc"])[rows]
        cols.append((pcs, ts, end, track_code, np.full(rows.size, is_dma), rows, lengths, values))
    return tuple(np.concatenate([a[k] for a in cols]) for k in range(8))


def _latency_path(profile: Profile) -> tuple[int, np.ndarray, np.ndarray]:
    """Walk the critical path back from the last event: each step goes to the dependency or track predecessor
    that ended last; a DMA started by a dependency (or from time 0) pays up to the fixed latency there."""
    lat = int(dma_latency_ns(profile))
    unknown = (-1, np.empty(0, np.int64), np.empty(0, np.int64))
    if lat <= 0:
        return unknown
    if profile.dma.num_rows == 0:
        return (0, *unknown[1:])
    tables = [t for t in (profile.instructions, profile.dma) if t.num_rows]
    if any((pc.min(t["pc"]).as_py() or 0) < 0 or t["pc"].null_count for t in tables):
        return unknown  # no program counters (a hand-built or imported profile): no path to walk
    pcs, ts, end, track, is_dma, rows, lengths, values = _columns(profile)
    if np.unique(pcs).size != pcs.size:
        return unknown
    n = int(pcs.max()) + 1
    at = np.full(n, -1, np.int64)
    at[pcs] = np.arange(pcs.size)
    order = np.lexsort((ts, track))
    prev = np.full(pcs.size, -1, np.int64)
    same = track[order[1:]] == track[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    at_list, end_list = at.tolist(), end.tolist()
    k = int(np.argmax(end))
    hits: list[tuple[int, int]] = []
    seen = np.zeros(pcs.size, bool)
    while k >= 0 and not seen[k]:  # a malformed profile (a dependency that ends later) cannot loop
        seen[k] = True
        deps = [at_list[v] for v in values[starts[k] : starts[k + 1]].tolist() if 0 <= v < n]
        best = max((d for d in deps if d >= 0), key=end_list.__getitem__, default=-1)
        p = int(prev[k])
        if is_dma[k]:
            ready = end[best] if best >= 0 else 0
            if (p < 0 or end[p] <= ready) and ts[k] > ready:
                hits.append((int(rows[k]), int(min(ts[k] - ready, lat))))
        k = best if best >= 0 and (p < 0 or end[best] >= end[p]) else p
    if not hits:
        return (0, *unknown[1:])
    arr = np.asarray(hits, np.int64)
    return int(arr[:, 1].sum()), arr[:, 0], arr[:, 1]


def latency_share(profile: Profile) -> float | None:
    """Critical-path DMA latency as a fraction of the run; None when unknown (no preset or no pcs)."""
    total, idle = facts(profile).total_ns, latency_idle(profile)[0]
    return idle / total if total > 0 and idle >= 0 else None


def latency_findings(profile: Profile, at_share: float) -> list[dict]:
    """The `latency_bound` finding rows (zero, or one when the latency share is at least `at_share`), in the
    findings table's row format."""
    from nprof.analysis.findings import finding_row
    from nprof.analysis.sources import human_ns, top_sources

    f = facts(profile)
    idle, rows, ns = latency_idle(profile)
    share = latency_share(profile)
    if share is None or share < at_share:
        return []
    layer_codes, layer_names = f.strings("dma", "layer")
    codes = layer_codes[rows]
    per_layer = np.bincount(codes[codes >= 0], weights=ns[codes >= 0], minlength=len(layer_names))
    top = [i for i in np.argsort(-per_layer, kind="stable")[:MAX_LAYERS] if per_layer[i] > 0]
    where = ", ".join(f"{layer_names[i]} ({human_ns(per_layer[i])})" for i in top)
    text = (f"{human_ns(idle)} of the run's critical path ({100 * share:.0f}% of the run) is {rows.size} DMAs waiting "
            f"out their fixed ~{human_ns(dma_latency_ns(profile))} latency one after another"
            f"{'; most in ' + where if where else ''}: fixed DMA latencies, not bandwidth or FLOPs, limit this "
            "run; keep intermediates in SBUF (fuse operations), move more per transfer and issue loads early "
            "on several queues so their latencies overlap")  # fmt: skip
    ts = int(f.d_ts[rows].min()) if rows.size else 0
    worst = rows[np.argsort(-ns, kind="stable")]
    ids = f.d_id[worst]
    return [finding_row("warning", "latency_bound", "Latency-bound", text, ts, f.total_ns, idle, ids,
                 top_sources(profile.dma, worst))]  # fmt: skip
