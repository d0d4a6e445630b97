"""Summary metrics of a profile: `summary_metrics(profile) -> dict`, ordered.

Contract:
* Keys are the real profiler's summary field names (docs/hardware.md) plus `bound`;
  a field is present only when it applies to the profile (no PSUM bytes on a
  CPU profile, no cc fields without collectives, no MFU without a peak): values
  are never invented. Times are seconds, percentages 0..100, bytes and FLOPs ints.
* `describe(name) -> (group, unit, description)` documents every field; the
  `summary` pass, the exporters and `terminology_text()` use it. `summary_fields()`
  lists every field name in report order (docs/profile-format.md lists the same).
* Memory traffic: `<mem>_read_bytes` / `<mem>_write_bytes` add the instruction
  columns of that memory and the DMA transfers reading from / writing to it
  (direction "hbm->sbuf" reads HBM and writes SBUF). HBM bytes for MBU and the
  arithmetic intensity are hbm_read_bytes + hbm_write_bytes.
"""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from nprof.analysis import intervals as iv
from nprof.analysis.facts import NEURON_ENGINES, facts, to_numpy
from nprof.analysis.latency import latency_share
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.analysis.verdict import final_bound
from nprof.capture.host_collectives import ALGORITHM as HOST_ALGORITHM
from nprof.profile import ENGINES, Profile

Metric = int | float | str

FIXED_METRICS: dict[str, tuple[str, str, str]] = {
    "total_time": ("Overview", "s", "Execution time: the profile window from 0 to the end of the last event"),
    "event_count": ("Overview", "", "Number of recorded events (instructions plus DMA transfers)"),
    "nc_idx": ("Overview", "", "Index of the NeuronCore the program ran on"),
    "nd_idx": ("Overview", "", "Index of the Neuron device the program ran on"),
    "model_flops": ("FLOPs", "FLOP", "Useful floating-point operations of the model (2 x multiply-accumulates)"),
    "hardware_flops": ("FLOPs", "FLOP", "Floating-point operations the hardware executed, padding included"),
    "transpose_flops": ("FLOPs", "FLOP", "Hardware FLOPs spent on transposes done on the Tensor engine"),
    "mfu_estimated_percent": ("FLOPs", "%", "Model FLOPs utilisation: model_flops / (peak FLOP/s x total_time)"),
    "hfu_estimated_percent": ("FLOPs", "%", "Hardware FLOPs utilisation: hardware_flops / (peak FLOP/s x total_time)"),
    "mbu_estimated_percent": ("FLOPs", "%", "Memory bandwidth utilisation: HBM bytes / total_time / HBM bandwidth"),
    "mm_arithmetic_intensity": (
        "FLOPs",
        "FLOP/B",
        "Matmul arithmetic intensity: (hardware_flops - transpose_flops) / HBM bytes read and written",
    ),
    "peak_flops_bandwidth_ratio": (
        "FLOPs",
        "FLOP/B",
        "Device peak FLOP/s divided by HBM bandwidth; below it a workload is memory-bound",
    ),
    "bound": (
        "FLOPs",
        "",
        "latency when MFU and MBU are both below 10% (neither roof limits the run) or when fixed DMA "
        "latencies on the critical path take >= the latency_share threshold of the run (50% by default), else "
        "memory when mm_arithmetic_intensity < peak_flops_bandwidth_ratio, else compute",
    ),
    "dma_latency_path_percent": (
        "DMA",
        "%",
        "Fixed DMA latencies on the critical path (the run is longer by them), % of total_time",
    ),
    "dma_active_time": ("DMA", "s", "Time at least one DMA transfer was in flight (union over all queues)"),
    "dma_active_time_percent": ("DMA", "%", "dma_active_time as a percentage of total_time"),
    "dma_transfer_count": ("DMA", "", "Number of DMA transfers"),
    "dma_transfer_total_bytes": ("DMA", "B", "Bytes moved by all DMA transfers"),
    "dma_transfer_average_bytes": ("DMA", "B", "Average size of a DMA transfer"),
    "dma_queue_count": ("DMA", "", "Number of DMA queues that carried at least one transfer"),
    "spill_save_bytes": ("Memory", "B", "Bytes of intermediates spilled from SBUF to HBM"),
    "spill_reload_bytes": ("Memory", "B", "Bytes of spilled intermediates reloaded from HBM to SBUF"),
    "cc_op_time": ("Collectives", "s", "Time this worker spent in collective operations (union of their intervals)"),
    "cc_op_count": ("Collectives", "", "Number of collective operations this worker took part in"),
    "cc_wait_time": (
        "Collectives",
        "s",
        "Part of cc_op_time spent waiting for other workers to arrive (device collectives; simulated when virtual)",
    ),
    "cc_host_wait_time": (
        "Collectives",
        "s",
        "Time the host waited for other workers in gloo collectives (measured; torchrun system profiles)",
    ),
}
_MEMORIES = ("hbm", "sbuf", "psum")
_ENGINE_FIELDS = {
    "instruction_time": ("s", "Sum of the durations of the {e} engine's instructions"),
    "active_time": ("s", "Time the {e} engine was busy (union of its instruction intervals)"),
    "active_time_percent": ("%", "{e} engine active time as a percentage of total_time"),
    "instruction_count": ("", "Number of instructions executed by the {e} engine"),
}


def summary_fields(engines: tuple[str, ...] = ENGINES) -> list[str]:
    """Every summary field name `summary_metrics` can report, in report order, with the per-engine fields
    of `engines` (pass ("<engine>",) for the templates docs/profile-format.md lists)."""
    names = list(FIXED_METRICS)
    head = names[: names.index("dma_active_time")]
    dma = names[names.index("dma_active_time") : names.index("spill_save_bytes")]
    tail = names[names.index("spill_save_bytes") :]
    per_engine = [f"{e}_engine_{s}" for e in engines for s in _ENGINE_FIELDS]
    memory = [f"{m}_{w}_bytes" for m in _MEMORIES for w in ("read", "write")]
    return head + per_engine + dma + memory + tail


def describe(name: str) -> tuple[str, str, str]:
    """(group, unit, description) of a summary field; raises KeyError for unknown names."""
    if name in FIXED_METRICS:
        return FIXED_METRICS[name]
    for mem in _MEMORIES:
        for way in ("read", "write"):
            if name == f"{mem}_{way}_bytes":
                verb = "read from" if way == "read" else "written to"
                return "Memory", "B", f"Bytes {verb} {mem.upper()} by instructions and DMA transfers"
    for suffix, (unit, text) in _ENGINE_FIELDS.items():
        tail = f"_engine_{suffix}"
        if name.endswith(tail):
            engine = name[: -len(tail)]
            return "Engines", unit, text.format(e=engine)
    raise KeyError(name)


def _seconds(ns: float) -> float:
    return float(ns) / 1e9


def _pct(part: float, whole: float) -> float:
    return 100.0 * float(part) / float(whole) if whole else 0.0


def summary_metrics(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, Metric]:
    """The summary fields that apply to `profile`, in the real profiler's order (see module doc); the `bound`
    verdict says "latency" from `thresholds.latency_share` on."""
    key = f"summary_metrics:{thresholds.latency_share!r}"
    return dict(facts(profile).memo(key, lambda: _summary_metrics(profile, thresholds.latency_share)))


def _summary_metrics(profile: Profile, latency_at: float) -> dict[str, Metric]:
    """The summary fields in order: run, FLOPs and the verdict, engines, DMA, memory, spills, collectives."""
    info = profile.info
    out: dict[str, Metric] = {
        "total_time": _seconds(facts(profile).total_ns),
        "event_count": profile.event_count,
        "nc_idx": int(info.nc_idx),
        "nd_idx": int(info.nd_idx),
    }
    memory = _memory_bytes(profile)
    _flops_and_bound(profile, memory, out, latency_at)
    _engine_metrics(profile, out)
    _dma_metrics(profile, out)
    out.update(memory)
    _spill_metrics(profile, out)
    _collective_metrics(profile, out)
    return out


def _flops_and_bound(profile: Profile, memory: dict[str, int], out: dict[str, Metric], latency_at: float) -> None:
    """Add the FLOP counts, MFU/HFU/MBU, arithmetic intensity, the peak ratio and the bound verdict
    (memory/compute by the roofline; latency when DMA latency paths take `latency_at` of the run or more,
    or under low utilisation: `nprof.analysis.verdict.final_bound`)."""
    f = facts(profile)
    info = profile.info
    total_ns = f.total_ns
    total_s = _seconds(total_ns)
    virtual = info.device == "virtual-neuroncore"
    n_instr = profile.instructions.num_rows
    model_flops = int(f.i_col("flops").sum()) if n_instr else 0
    hw_flops = int(f.i_col("hw_flops").sum()) if n_instr else 0
    transpose = int(f.i_col("hw_flops")[to_numpy(profile.instructions["is_transpose"], bool)].sum()) if n_instr else 0
    has_flops = virtual or hw_flops > 0 or model_flops > 0
    if has_flops:
        out["model_flops"] = model_flops
        out["hardware_flops"] = hw_flops
        out["transpose_flops"] = transpose
    hbm_bytes = memory.get("hbm_read_bytes", 0) + memory.get("hbm_write_bytes", 0)
    peak, bw = info.peak_flops, info.hbm_bandwidth
    if has_flops and peak and total_ns > 0:
        out["mfu_estimated_percent"] = _pct(model_flops, peak * total_s)
        out["hfu_estimated_percent"] = _pct(hw_flops, peak * total_s)
    if bw and total_ns > 0 and (virtual or hbm_bytes > 0):
        out["mbu_estimated_percent"] = _pct(hbm_bytes / total_s, bw)
    intensity = (hw_flops - transpose) / hbm_bytes if has_flops and hbm_bytes > 0 and hw_flops - transpose > 0 else None
    ratio = peak / bw if peak and bw else None
    if intensity is not None:
        out["mm_arithmetic_intensity"] = intensity
    if ratio is not None:
        out["peak_flops_bandwidth_ratio"] = ratio
    if intensity is not None and ratio is not None:
        out["bound"] = "memory" if intensity < ratio else "compute"
    share = latency_share(profile) if virtual else None
    if share is not None:
        out["dma_latency_path_percent"] = 100.0 * share
        if share >= latency_at:
            out["bound"] = "latency"
    bound = final_bound(out)  # the one verdict rule (low utilisation is latency too): every view shows it
    if bound is not None:
        out["bound"] = bound


def _engine_metrics(profile: Profile, out: dict[str, Metric]) -> None:
    """Add per engine (the virtual device's five first, in order): instruction time, active time, its
    percentage of the run and the instruction count."""
    f = facts(profile)
    total_ns = f.total_ns
    engines = list(f.engines_present)
    if profile.info.device == "virtual-neuroncore":
        engines = [e for e in NEURON_ENGINES] + [e for e in engines if e not in NEURON_ENGINES]
    for engine in engines:
        ms, me = f.engine_merged(engine)
        active = int((np.minimum(me, total_ns) - np.minimum(ms, total_ns)).sum()) if ms.size else 0
        out[f"{engine}_engine_instruction_time"] = _seconds(f.engine_sum(engine, "duration"))
        out[f"{engine}_engine_active_time"] = _seconds(active)
        out[f"{engine}_engine_active_time_percent"] = _pct(active, total_ns)
        out[f"{engine}_engine_instruction_count"] = f.engine_counts.get(engine, 0)


def _dma_metrics(profile: Profile, out: dict[str, Metric]) -> None:
    """Add DMA active time and percentage, transfer count, bytes and queue count (virtual device or any DMA)."""
    f = facts(profile)
    total_ns = f.total_ns
    n_dma = profile.dma.num_rows
    if profile.info.device == "virtual-neuroncore" or n_dma:
        ms, me = f.dma_merged
        active = int((np.minimum(me, total_ns) - np.minimum(ms, total_ns)).sum()) if ms.size else 0
        total_bytes = int(f.d_bytes.sum()) if n_dma else 0
        out["dma_active_time"] = _seconds(active)
        out["dma_active_time_percent"] = _pct(active, total_ns)
        out["dma_transfer_count"] = n_dma
        out["dma_transfer_total_bytes"] = total_bytes
        out["dma_transfer_average_bytes"] = total_bytes / n_dma if n_dma else 0.0
        out["dma_queue_count"] = len(f.queue[1])


def _spill_metrics(profile: Profile, out: dict[str, Metric]) -> None:
    """Add spill save/reload bytes (on the virtual device always, elsewhere when non-zero)."""
    f = facts(profile)
    virtual = profile.info.device == "virtual-neuroncore"
    if virtual or profile.dma.num_rows:
        spill = to_numpy(profile.dma["is_spill"], bool)
        reload = to_numpy(profile.dma["is_reload"], bool)
        save_b, reload_b = int(f.d_bytes[spill].sum()), int(f.d_bytes[reload].sum())
        if virtual or save_b or reload_b:
            out["spill_save_bytes"] = save_b
            out["spill_reload_bytes"] = reload_b


def _collective_metrics(profile: Profile, out: dict[str, Metric]) -> None:
    """Add this rank's collective-op time (union), distinct op count and wait time, when it has collectives; the
    waits of host collectives (gloo, measured) are kept apart from the device's (`cc_host_wait_time`)."""
    info = profile.info
    cc = profile.collectives
    if cc.num_rows:
        rank = to_numpy(cc["rank"], np.int64)
        mine = rank == info.rank if (rank == info.rank).any() else np.ones(rank.size, dtype=bool)
        ts, dur = to_numpy(cc["ts"])[mine], to_numpy(cc["duration"])[mine]
        out["cc_op_time"] = _seconds(iv.union_length(ts, ts + dur))
        out["cc_op_count"] = int(np.unique(to_numpy(cc["id"])[mine]).size)
        host = np.asarray(pc.fill_null(pc.equal(cc["algorithm"], HOST_ALGORITHM), False))  # measured, not the device's
        waits = to_numpy(cc["wait_ns"])
        out["cc_wait_time"] = _seconds(int(waits[mine & ~host].sum()))
        if (mine & host).any():
            out["cc_host_wait_time"] = _seconds(int(waits[mine & host].sum()))


def _memory_bytes(profile: Profile) -> dict[str, int]:
    """<mem>_read/write_bytes for the memories that apply (all on the virtual device, else the non-zero ones)."""
    f = facts(profile)
    virtual = profile.info.device == "virtual-neuroncore"
    n_dma = profile.dma.num_rows
    out: dict[str, int] = {}
    per_direction = np.zeros(len(f.direction[1]) + 1, np.int64)  # exact byte sums per direction code (-1: last)
    if n_dma:
        np.add.at(per_direction, f.direction[0], f.d_bytes)
    for mem in _MEMORIES:
        read, write = f.i_sum(f"{mem}_read_bytes"), f.i_sum(f"{mem}_write_bytes")
        for i, name in enumerate(f.direction[1] if n_dma else []):
            src, _, dst = (x.strip() for x in name.partition("->"))  # as `Facts.direction_mask` reads them
            read += int(per_direction[i]) if src == mem else 0
            write += int(per_direction[i]) if dst == mem else 0
        if virtual or read:
            out[f"{mem}_read_bytes"] = read
        if virtual or write:  # a trace that records no writes (Chrome imports: reads only) shows none, not 0
            out[f"{mem}_write_bytes"] = write
    return out
