"""Analysis passes: pure functions `Profile -> pyarrow.Table`, registered in `PASSES`.

Contract (others depend on it):
* `summary_metrics(profile) -> dict[str, int | float | str]`: the summary
  fields that apply to the profile, ordered (see `nprof.analysis.metrics`).
* `PASSES`: pass name -> function; `run_all(profile, thresholds=...) -> dict[name, Table]` runs
  every pass in registry order; `each_pass(profile, thresholds=...)` yields (name, table) as each pass
  ends (the same tables: a caller can store and free one before the next pass runs). Passes: summary,
  engines, opcodes, layers, dma_queues, counters, warnings, findings, system_steps (each documented in
  its module). `Thresholds` sets when findings and warnings are reported, which DMA transfers are
  small and when the summary's `bound` says "latency" (defaults documented in
  `nprof.analysis.thresholds`); `TUNED` names the passes that take it.
* Passes are vectorised (numpy / pyarrow.compute) and share derived arrays
  through `nprof.analysis.facts`, so running all of them reads each column once.
* `describe(name)` gives the (group, unit, description) of a summary field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

import pyarrow as pa

from nprof.analysis.counters import counters
from nprof.analysis.dma_queues import dma_queues
from nprof.analysis.engines import engines
from nprof.analysis.findings import findings
from nprof.analysis.layers import layers
from nprof.analysis.metrics import describe, summary_metrics
from nprof.analysis.opcodes import opcodes
from nprof.analysis.summary import summary
from nprof.analysis.system import system_steps
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.analysis.warnings import warnings
from nprof.profile import Profile

PASSES: dict[str, Callable[[Profile], pa.Table]] = {
    "summary": summary,
    "engines": engines,
    "opcodes": opcodes,
    "layers": layers,
    "dma_queues": dma_queues,
    "counters": counters,
    "warnings": warnings,
    "findings": findings,
    "system_steps": system_steps,
}


class TunedPass(Protocol):
    """A pass that also takes the thresholds."""

    def __call__(self, profile: Profile, *, thresholds: Thresholds = ...) -> pa.Table: ...


TUNED: dict[str, TunedPass] = {"summary": summary, "dma_queues": dma_queues, "warnings": warnings, "findings": findings}


def run_all(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, pa.Table]:
    """Run every registered pass on `profile`; returns pass name -> table, in registry order. The passes of
    `TUNED` follow `thresholds` (defaults documented in `nprof.analysis.thresholds`)."""
    return dict(each_pass(profile, thresholds=thresholds))


def each_pass(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Iterator[tuple[str, pa.Table]]:
    """`run_all` one pass at a time: yields (name, table) as each pass ends, in registry order."""
    for name, fn in PASSES.items():
        yield name, (TUNED[name](profile, thresholds=thresholds) if name in TUNED else fn(profile))


__all__ = ["DEFAULT_THRESHOLDS", "PASSES", "Thresholds", "describe", "each_pass", "run_all", "summary_metrics"]
