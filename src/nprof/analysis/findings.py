"""The `findings` pass: performance problems in plain words, with evidence.

Contract: columns severity ("warning" or "info"), kind, title, message (plain
words with the evidence numbers), ts/end (ns: the region it is about),
impact_ns (time at stake, for ranking), event_ids (list<int64>, at most
MAX_IDS, the instructions/DMAs responsible) and sources (list<string>, their
most frequent source locations). When a finding is reported is set by `thresholds`
(`nprof.analysis.thresholds.Thresholds`, documented defaults). Kinds: `bound` (memory/compute verdict),
`serial_engines` (compute engines that never overlap), `exposed_dma` (DMA time
with no compute running), `idle_gap` (nothing running, the longest few),
`small_dma`, `tensor_reload`, `semaphore_wait`, `latency_bound` (`nprof.analysis.latency`), and for
system profiles `recompile`, `host_bound`, `launch_gap`, `repeated_copies` (`nprof.analysis.system`). Rows:
warnings first, then by impact_ns descending. A finding appears only when its evidence exists.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from nprof.analysis import intervals as iv
from nprof.analysis.dma_queues import small_mask
from nprof.analysis.facts import COMPUTE_ENGINES, facts
from nprof.analysis.latency import dma_latency_ns, engine_wait_ns, latency_findings
from nprof.analysis.metrics import summary_metrics
from nprof.analysis.sources import human_bytes, human_ns, top_sources
from nprof.analysis.system import system_findings
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.analysis.verdict import low_utilisation
from nprof.analysis.warnings import tensor_reloads
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("severity", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("end", pa.int64(), nullable=False),
        pa.field("impact_ns", pa.int64(), nullable=False),
        pa.field("event_ids", pa.list_(pa.int64())),
        pa.field("sources", pa.list_(pa.string())),
    ]
)
MAX_IDS = 10_000


def finding_row(severity: str, kind: str, title: str, message: str, ts: int, end: int, impact: int,
                ids: np.ndarray | list[int], sources: list[str]) -> dict:  # fmt: skip
    """One row of the findings table (at most MAX_IDS event ids kept)."""
    ids = np.asarray(ids, dtype=np.int64)[:MAX_IDS]
    return dict(severity=severity, kind=kind, title=title, message=message, ts=int(ts), end=int(end),
                impact_ns=int(impact), event_ids=ids.tolist(), sources=sources)  # fmt: skip


def _bound(profile: Profile, metrics: dict) -> list[dict]:
    ai, ratio = metrics.get("mm_arithmetic_intensity"), metrics.get("peak_flops_bandwidth_ratio")
    if ai is None or ratio is None:
        return []  # no roofline to compare with
    total = facts(profile).total_ns
    low = low_utilisation(metrics)
    if low:  # the verdict's latency/overhead-bound (`nprof.analysis.verdict`)
        return [finding_row("warning", "bound", "Low utilisation", low, 0, total, 0, [], [])]
    if metrics.get("bound") not in ("memory", "compute"):
        return []  # "latency": the latency_bound finding (nprof.analysis.latency) says it
    if metrics["bound"] == "memory":
        text = (f"arithmetic intensity is {ai:.3g} FLOP per HBM byte, below the device's {ratio:.3g} FLOP/B "
                f"(peak FLOP/s / HBM bandwidth): HBM traffic, not the Tensor engine, limits this run; "
                "reuse data in SBUF, fuse operations or use larger tiles")  # fmt: skip
        return [finding_row("warning", "bound", "Memory-bound", text, 0, total, 0, [], [])]
    text = (f"arithmetic intensity is {ai:.3g} FLOP per HBM byte, above the device's {ratio:.3g} FLOP/B: "
            "the Tensor engine limits this run; lower precision (bf16/fp8) or fewer FLOPs help most")  # fmt: skip
    return [finding_row("info", "bound", "Compute-bound", text, 0, total, 0, [], [])]


def _on_neuroncore(profile: Profile) -> bool:
    """True for a NeuronCore's own profile (engines, DMA queues, semaphores); False for host and imported
    traces (cpu, cuda, chrome-trace), whose "engines" are op categories run by host threads."""
    return profile.info.device == "virtual-neuroncore"


def _serial_engines(profile: Profile, th: Thresholds) -> list[dict]:
    f = facts(profile)
    total = f.total_ns
    busy = [e for e in f.engines_present if e in COMPUTE_ENGINES]
    active = {e: int((f.engine_merged(e)[1] - f.engine_merged(e)[0]).sum()) for e in busy}
    busy = [e for e in busy if total and active[e] >= th.min_engine_share * total]
    if len(busy) < 2:
        return []
    tracks = engine_tracks(profile)
    never = [(a, b) for a, b in itertools.combinations(busy, 2)
             if _could_overlap(tracks, a, b) and not _overlap(f.engine_merged(a), f.engine_merged(b))]  # fmt: skip
    if not never:
        return []
    involved = sorted({e for pair in never for e in pair}, key=busy.index)
    rows = np.flatnonzero(np.isin(f.engine[0], [f.engine[1].index(e) for e in involved]))
    pairs = ", ".join(f"{a} & {b}" for a, b in never)
    impact = min(sum(active[e] for e in involved) - max(active[e] for e in involved), total)
    if len(never) == len(busy) * (len(busy) - 1) // 2:
        title = "Engines run one at a time"
        text = (f"the {', '.join(busy)} engines never run at the same time: their "
                f"{human_ns(sum(active.values()))} of work is fully serialised in a {human_ns(total)} run; "
                "split the work into tiles and double-buffer so one engine works while another does")  # fmt: skip
    else:
        title = "Engine pairs never overlap"
        text = (f"these engine pairs never run at the same time: {pairs}; up to {human_ns(impact)} could be "
                "hidden by pipelining the tiles between them")  # fmt: skip
    return [finding_row("warning", "serial_engines", title, text, 0, total, impact, f.i_id[rows],
                 top_sources(profile.instructions, rows))]  # fmt: skip


def engine_tracks(profile: Profile) -> dict[str, set[str]]:
    """The timeline tracks each engine's instructions run on (one count over the pair codes; both columns
    are non-nullable, and their encodings are shared with the other passes and the store)."""
    f = facts(profile)
    (engine, engines), (track, names) = f.engine, f.track
    seen = np.bincount(engine * np.int64(len(names)) + track, minlength=len(engines) * len(names))
    tracks: dict[str, set[str]] = {}
    for k in np.flatnonzero(seen).tolist():
        tracks.setdefault(engines[k // len(names)], set()).add(names[k % len(names)])
    return tracks


def _could_overlap(tracks: dict[str, set[str]], a: str, b: str) -> bool:
    """False when both engines' work runs on one and the same track (one CPU thread): it is serial by nature."""
    shared = tracks.get(a, set())
    return not (len(shared) == 1 and shared == tracks.get(b, set()))


def _overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    """True when two disjoint sorted interval sets overlap; looks at a short prefix of `b` first."""
    head = max(1, b[0].size // 64)
    if iv.intersection_length(a, (b[0][:head], b[1][:head])) > 0:
        return True
    return iv.intersection_length(a, (b[0][head:], b[1][head:])) > 0


def _exposed_dma(profile: Profile, th: Thresholds) -> list[dict]:
    f = facts(profile)
    total = f.total_ns
    if f.d_ts.size == 0 or total <= 0:
        return []
    dma_active = int((f.dma_merged[1] - f.dma_merged[0]).sum())
    exposed = dma_active - iv.intersection_length(f.dma_merged, f.compute_merged)
    if exposed < th.exposed_dma_share * total:
        return []
    alone = iv.rows_within_gaps(f.compute_merged, f.d_ts, f.d_end)
    text = (f"{human_ns(exposed)} ({100 * exposed / total:.0f}% of the run) is spent on DMA transfers while no "
            f"compute engine runs; {alone.size} transfers overlap no compute at all; prefetch the next tile's "
            "data while computing the current one (double buffering)")  # fmt: skip
    ts = int(f.d_ts[alone].min()) if alone.size else 0
    end = int(f.d_end[alone].max()) if alone.size else total
    return [finding_row("warning", "exposed_dma", "DMA not overlapped with compute", text, ts, end, exposed,
                 f.d_id[alone], top_sources(profile.dma, alone))]  # fmt: skip


def _describe_event(profile: Profile, event_id: int) -> str:
    f = facts(profile)
    hit = np.flatnonzero(f.i_id == event_id)
    if hit.size:
        row = profile.instructions.slice(int(hit[0]), 1).to_pylist()[0]
        where = row["nki_source_location"] or row["hlo_name"] or row["layer"]
        return f"{row['engine']} {row['opcode']} (id {event_id}{', ' + where if where else ''})"
    hit = np.flatnonzero(f.d_id == event_id)
    row = profile.dma.slice(int(hit[0]), 1).to_pylist()[0]
    where = row["nki_source_location"] or row["hlo_name"] or row["layer"]
    return f"DMA {row['direction']} on {row['queue']} (id {event_id}{', ' + where if where else ''})"


def _idle_gaps(profile: Profile, th: Thresholds) -> list[dict]:
    f = facts(profile)
    total = f.total_ns
    if profile.event_count == 0 or total <= 0:
        return []
    # union of the already merged busy sets: a few sorted runs, cheap to merge
    parts = [f.compute_merged, f.dma_merged]
    parts += [f.engine_merged(e) for e in f.engines_present if e not in COMPUTE_ENGINES]
    busy = iv.merge(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    g0, g1 = iv.gaps(busy, 0, total)
    length = g1 - g0
    big = np.flatnonzero(length >= max(th.gap_share * total, th.gap_min_ns))
    big = big[np.argsort(-length[big], kind="stable")][: th.max_gaps]
    advice = ("look for a semaphore wait, a host synchronisation or a dependency that serialises the program here"
              if _on_neuroncore(profile) else "look for work the trace does not record here (Python between ops, "
              "data loading, compilation) or a wait on another thread or device")  # fmt: skip
    out = []
    i_end = f.i_end_now() if big.size else None  # the end times once for every gap (not kept: shed after layers)
    for k in big:
        a, b = int(g0[k]), int(g1[k])
        before = np.concatenate([f.i_id[i_end == a], f.d_id[f.d_end == a]])[:1]
        after = np.concatenate([f.i_id[f.i_ts == b], f.d_id[f.d_ts == b]])[:1]
        around = [x for x in (*before.tolist(), *after.tolist())]
        context: list[str] = []
        if before.size:
            context.append(f"after {_describe_event(profile, int(before[0]))}")
        if after.size:
            context.append(f"before {_describe_event(profile, int(after[0]))}")
        why = _latency_advice(profile, after, b - a) or advice
        text = (f"nothing runs for {human_ns(b - a)} ({100 * (b - a) / total:.0f}% of the run) from "
                f"{human_ns(a)} to {human_ns(b)}{' ' + ' and '.join(context) if context else ''}; "
                f"{why}")  # fmt: skip
        rows_i = np.flatnonzero(np.isin(f.i_id, around))
        rows_d = np.flatnonzero(np.isin(f.d_id, around))
        sources = top_sources(profile.instructions, rows_i) + top_sources(profile.dma, rows_d)
        out.append(finding_row("warning", "idle_gap", "Idle gap", text, a, b, b - a, around, sources))
    return out


def _latency_advice(profile: Profile, after: np.ndarray, gap_ns: int) -> str | None:
    """What to do about a gap that is no longer than the fixed DMA latency and ends where a DMA starts: that
    DMA was waiting out its fixed cost with nothing else ready to run. None for any other gap."""
    lat = dma_latency_ns(profile)
    if not after.size or lat <= 0 or gap_ns > lat or not np.isin(after, facts(profile).d_id).any():
        return None
    return (f"the DMA that ends it waits out its fixed ~{human_ns(lat)} latency (semaphore to transfer start, "
            "the device model's figure) while nothing else is ready to run; issue that transfer earlier, "
            "overlap it with compute, or merge small transfers so fewer of them pay it")  # fmt: skip


def _small_dma(profile: Profile, th: Thresholds) -> list[dict]:
    f = facts(profile)
    small = np.flatnonzero(small_mask(profile, th))
    if small.size == 0:
        return []
    busy = iv.union_length(f.d_ts[small], f.d_end[small])
    dma_active = int((f.dma_merged[1] - f.dma_merged[0]).sum())
    share = busy / dma_active if dma_active else 0.0
    severity = "warning" if share >= 0.25 or small.size >= 0.5 * f.d_ts.size else "info"
    text = (f"{small.size} of {f.d_ts.size} DMA transfers are small (average "
            f"{human_bytes(f.d_bytes[small].mean())}) and keep the queues busy {human_ns(busy)} "
            f"({100 * share:.0f}% of DMA active time); transfers of >= {human_bytes(th.small_dma_partition_bytes)} "
            f"per partition and >= {human_bytes(th.small_dma_bytes)} in total amortise the fixed per-transfer "
            "cost")  # fmt: skip
    return [finding_row(severity, "small_dma", "Small DMA transfers", text, int(f.d_ts[small].min()),
                 int(f.d_end[small].max()), busy, f.d_id[small], top_sources(profile.dma, small))]  # fmt: skip


def _reloads(profile: Profile, th: Thresholds) -> list[dict]:
    w = tensor_reloads(profile, th.reload_limit)
    if w.num_rows == 0:
        return []
    f = facts(profile)
    counts, nbytes, tensors = w["count"].to_numpy(), w["bytes"].to_numpy(), w["tensor"].to_pylist()
    extra = int((nbytes - nbytes / counts).sum())
    top = np.argsort(-nbytes, kind="stable")[:3]
    names = ", ".join(f"'{tensors[i]}' x{counts[i]}" for i in top)
    ids = w["event_ids"].combine_chunks().flatten().to_numpy()
    rows = np.flatnonzero(np.isin(f.d_id, ids[:MAX_IDS]))
    busy = int(iv.coverage(f.dma_merged, f.d_ts[rows], f.d_end[rows]).sum())
    times = {1: "once", 2: "twice"}.get(th.reload_limit, f"{th.reload_limit} times")
    text = (f"{w.num_rows} tensors are loaded from HBM more than {times} ({names}); about {human_bytes(extra)} "
            "is loaded again that could stay in SBUF")  # fmt: skip
    return [finding_row("warning", "tensor_reload", "Tensors reloaded from HBM", text, int(w["ts"].to_numpy().min()),
                 int(w["end"].to_numpy().max()), busy, ids, top_sources(profile.dma, rows))]  # fmt: skip


def _semaphore_waits(profile: Profile, th: Thresholds) -> list[dict]:
    f = facts(profile)
    total = f.total_ns
    if profile.instructions.num_rows == 0 or total <= 0:
        return []
    wait = f.i_col("wait_ns")
    out = []
    for engine in f.engines_present:
        m = f.engine_mask(engine)
        waited = engine_wait_ns(profile, engine)  # the union over the engine's tracks, never more than the run
        if waited < th.wait_share * total:
            continue
        rows = np.flatnonzero(m & (wait > 0))
        if rows.size > MAX_IDS:  # the MAX_IDS longest waits without sorting them all
            rows = rows[np.argpartition(-wait[rows], MAX_IDS - 1)[:MAX_IDS]]
        worst = rows[np.lexsort((rows, -wait[rows]))]
        text = (f"the {engine} engine waits {human_ns(waited)} on semaphores ({100 * waited / total:.0f}% of the run) "
                f"for data or other engines; the longest single wait is {human_ns(wait[worst[0]])}")  # fmt: skip
        out.append(finding_row("warning", "semaphore_wait", f"{engine} engine waits on semaphores", text, 0, total,
                        waited, f.i_id[worst], top_sources(profile.instructions, worst)))  # fmt: skip
    return out


def findings(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> pa.Table:
    """All findings of `profile` (see module doc), reported by the rules of `thresholds`."""
    metrics = summary_metrics(profile, thresholds=thresholds)
    rows = _bound(profile, metrics)
    for fn in (_serial_engines, _exposed_dma, _idle_gaps, _small_dma, _reloads, _semaphore_waits):
        rows.extend(fn(profile, thresholds))
    rows.extend(latency_findings(profile, thresholds.latency_share))
    rows.extend(system_findings(profile, thresholds=thresholds))
    rows.sort(key=lambda r: (r["severity"] != "warning", -r["impact_ns"]))
    return pa.Table.from_pylist(rows, schema=SCHEMA)
