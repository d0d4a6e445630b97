"""The run's bound verdict: one rule for every place that shows it.

The summary metrics' `bound` field (summary-text, summary-json, the store's summary table), the viewer's
Summary-tab verdict (`nprof.store.info.summary_answer`) and the `bound` finding all come from here, so
they cannot disagree.

Contract:
* `low_utilisation(metrics) -> str | None`: when MFU and MBU (those present) are all below
  LOW_UTILISATION_PERCENT, why the run is neither compute- nor memory-bound, in plain words; else None.
* `final_bound(metrics) -> str | None`: "latency" under low utilisation or when `metrics["bound"]` already
  says "latency" (fixed DMA latencies on the critical path, `nprof.analysis.metrics`); else the roofline's
  "memory" / "compute" of `metrics["bound"]`; else None. `summary_metrics` stores it as `bound`.
* `verdict(metrics) -> Verdict`: that bound and the one-line text saying why (low utilisation first, then
  the roofline comparison, then the DMA-latency share; "unknown: ..." when nothing decides). Under low
  utilisation with the CC engine active >= COLLECTIVE_SHARE_PERCENT of the run, the text names the collectives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LOW_UTILISATION_PERCENT = 10.0  # below this MFU and MBU, neither roof limits the run
COLLECTIVE_SHARE_PERCENT = 50.0  # CC-engine activity from which a low-utilisation verdict names the collectives


@dataclass(frozen=True)
class Verdict:
    """The bound ("memory", "compute", "latency" or None when unknown) and the sentence explaining it."""

    bound: str | None
    text: str


def low_utilisation(metrics: Mapping[str, Any]) -> str | None:
    """When MFU and MBU are both below LOW_UTILISATION_PERCENT: why the run is neither compute- nor
    memory-bound (plain words), else None. The arithmetic-intensity verdict only says which roof is
    nearer; a run far below both is limited by latency, dependencies or overheads instead."""
    mfu, mbu = metrics.get("mfu_estimated_percent"), metrics.get("mbu_estimated_percent")
    vals = [v for v in (mfu, mbu) if isinstance(v, int | float)]
    if not vals or max(vals) >= LOW_UTILISATION_PERCENT:
        return None
    got = " and ".join(f"{k} {v:.3g} %" for k, v in (("MFU", mfu), ("MBU", mbu)) if isinstance(v, int | float))
    verb = "are" if len(vals) > 1 else "is"
    return (f"{got} {verb} below {LOW_UTILISATION_PERCENT:g} %: neither peak FLOP/s nor memory bandwidth "
            "limits this run; time goes to latency, dependencies, dispatch overheads or idle gaps")  # fmt: skip


def final_bound(metrics: Mapping[str, Any]) -> str | None:
    """The bound every view shows (see module doc)."""
    return verdict(metrics).bound


def verdict(metrics: Mapping[str, Any]) -> Verdict:
    """The bound and its explanation (see module doc)."""
    low = low_utilisation(metrics)
    if low:
        cc = metrics.get("cc_engine_active_time_percent")
        if isinstance(cc, int | float) and cc >= COLLECTIVE_SHARE_PERCENT:
            low += (f"; here the collectives keep the CC engine active {cc:.3g}% of the run: their transfers and "
                    "per-step latencies, not compute or HBM, take the time")  # fmt: skip
        return Verdict("latency", f"latency/overhead-bound: {low}")
    bound = metrics.get("bound")
    ai, ratio = metrics.get("mm_arithmetic_intensity"), metrics.get("peak_flops_bandwidth_ratio")
    if bound in ("memory", "compute") and isinstance(ai, int | float) and isinstance(ratio, int | float):
        rel = "below" if bound == "memory" else "at or above"
        text = f"matmul arithmetic intensity {ai:.4g} FLOP/B is {rel} the device ratio {ratio:.4g} FLOP/B"
        return Verdict(bound, f"{bound}-bound: {text}")
    if bound == "latency":  # fixed DMA latencies on the critical path (the summary's latency_share rule)
        share = metrics.get("dma_latency_path_percent")
        part = f"{share:.3g}% of the run" if isinstance(share, int | float) else "much of the run"
        return Verdict(
            "latency",
            f"latency-bound: {part} is fixed DMA latency waited out one transfer after another on the critical path",
        )
    return Verdict(None, "unknown: the verdict needs matmuls, HBM traffic and device peaks")
