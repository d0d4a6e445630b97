"""`terminology_text()`: the table of terms printed by `nprof view --terminology`.

Contract: plain text, one aligned line per term (`term  unit  meaning`) in
sections: summary fields (every field `summary_metrics` can report), engines,
timeline rows (tracks and DMA queues), counters, warning kinds, finding kinds.
"""

from __future__ import annotations

from nprof.analysis.counters import SERIES
from nprof.analysis.metrics import describe, summary_fields
from nprof.export.labels import ENGINE_TERMS, TRACK_TERMS, track_label

_COUNTER_TERMS = {
    "tensor_util": "share of time the TensorMatrix row is busy, per bin",
    "pending_dma": "DMA transfers in flight (exact at every change)",
    "dma_throughput": "bytes moved by DMA per bin divided by the bin width",
}
WARNING_TERMS = {
    "tensor_reload": "a tensor loaded from HBM more than twice (--threshold reload_limit=N; box around its loads)",
    "small_dma": "DMA transfers below 2 KiB per partition or 32 KiB in total (the small_dma_* thresholds)",
    "throttling": "a region where a throttle counter of the device is above zero",
}
FINDING_TERMS = {
    "bound": "memory- or compute-bound verdict from arithmetic intensity vs the device ratio",
    "serial_engines": "compute engines that never run at the same time",
    "exposed_dma": "DMA time during which no compute engine runs",
    "idle_gap": "a stretch of time where nothing runs",
    "small_dma": "how much DMA time small transfers take",
    "tensor_reload": "tensors loaded from HBM again and again",
    "semaphore_wait": "an engine that spends much of the run waiting on semaphores",
}


def _section(title: str, rows: list[tuple[str, str, str]]) -> list[str]:
    width = max(len(r[0]) for r in rows)
    uwidth = max(len(r[1]) for r in rows)
    lines = [f"# {title}"]
    lines += [f"{t:<{width}}  {u:<{uwidth}}  {m}".rstrip() for t, u, m in rows]
    return [*lines, ""]


def terminology_text() -> str:
    """The table of terms (see module doc)."""
    lines: list[str] = []
    rows = []
    for name in summary_fields():
        _group, unit, text = describe(name)
        rows.append((name, unit, text))
    lines += _section("Summary fields", rows)
    lines += _section("Engines", [(e, "", text) for e, text in ENGINE_TERMS.items()])
    track_rows = []
    for key, text in TRACK_TERMS.items():
        label = track_label(key) if "<" not in key else ""
        shown = f"row '{label}': " if label and label != key and key.startswith("tensor") else ""
        track_rows.append((key, "", shown + text))
    lines += _section("Timeline rows", track_rows)
    lines += _section("Counters", [(k, SERIES[k][1], f"{SERIES[k][0]}: {text}") for k, text in _COUNTER_TERMS.items()])
    lines += _section("Warnings", [(k, "", v) for k, v in WARNING_TERMS.items()])
    lines += _section("Findings", [(k, "", v) for k, v in FINDING_TERMS.items()])
    return "\n".join(lines).rstrip("\n") + "\n"
