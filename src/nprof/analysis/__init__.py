"""Analysis passes: pure functions `Profile -> pyarrow.Table`, registered in `PASSES`.

Contract (others depend on it):
* `summary_metrics(profile) -> dict[str, int | float | str]`: the summary
  fields that apply to the profile, ordered (see `nprof.analysis.metrics`).
* `PASSES`: pass name -> function; `run_all(profile, thresholds=...) -> dict[name, Table]` runs
  every pass in registry order; `each_pass(profile, thresholds=...)` yields (name, table) as each pass
  ends (the same tables: a caller can store and free one before the next pass runs), and after each pass sheds
  the cached per-event facts no later pass reads (SHED_AFTER; `Facts.shed`: a later reader recomputes them, so
  the tables are those of each pass run alone). `each_output` is `each_pass` with the tables of `STREAMED`
  as record batch readers of the same rows (never held whole). Passes: summary,
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
from typing import Protocol, cast

import pyarrow as pa

from nprof.analysis.counters import counter_batches, counters
from nprof.analysis.dma_queues import dma_queues
from nprof.analysis.engines import engines
from nprof.analysis.facts import facts as facts_of  # (not `facts`: the submodule keeps that name)
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


# passes whose table `each_output` streams (`nprof.analysis.counters.counter_batches`: the same rows)
STREAMED: dict[str, Callable[[Profile], pa.RecordBatchReader]] = {"counters": counter_batches}
TUNED: dict[str, TunedPass] = {"summary": summary, "dma_queues": dma_queues, "warnings": warnings, "findings": findings}


def run_all(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, pa.Table]:
    """Run every registered pass on `profile`; returns pass name -> table, in registry order. The passes of
    `TUNED` follow `thresholds` (defaults documented in `nprof.analysis.thresholds`)."""
    return dict(each_pass(profile, thresholds=thresholds))


# cached per-event facts (`nprof.analysis.facts.SHEDDABLE`) no pass after the named one reads: dropped once it
# ends, so the later passes run without them. Engine groups serve the numpy busy merges and semaphore waits
# (memoised per engine by the summary and engines passes; the compiled ones read the columns in place), queue
# groups the per-queue table, the TensorMatrix mask the counters; no pass keeps the instruction end times
# (each makes its own where it needs them: `Facts.i_end_now`), shed in case an earlier reader cached them.
# tests/analysis/test_shed.py holds every table to its pass run alone and checks no later pass computes a
# shed fact again.
SHED_AFTER = {
    "summary": ("i_end",),
    "engines": ("engine_groups",),
    "dma_queues": ("queue_groups",),
    "counters": ("tensor_matrix_mask",),
    "warnings": ("d_partitions",),
}


def each_pass(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Iterator[tuple[str, pa.Table]]:
    """`run_all` one pass at a time: yields (name, table) as each pass ends, in registry order, having shed the
    facts no later pass reads (SHED_AFTER)."""
    for name, table in _outputs(profile, thresholds, streamed=False):
        yield name, cast(pa.Table, table)  # (no stream asked for: every output is a table)


def each_output(
    profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> Iterator[tuple[str, pa.Table | pa.RecordBatchReader]]:
    """`each_pass`, but the passes of STREAMED yield a record batch reader of their table's rows (in order;
    made as it is read, never held whole; readable on another thread while the later passes run)."""
    return _outputs(profile, thresholds, streamed=True)


def _outputs(
    profile: Profile, thresholds: Thresholds, streamed: bool
) -> Iterator[tuple[str, pa.Table | pa.RecordBatchReader]]:
    for name, fn in PASSES.items():
        out: pa.Table | pa.RecordBatchReader
        if streamed and name in STREAMED:
            out = STREAMED[name](profile)
        else:
            out = TUNED[name](profile, thresholds=thresholds) if name in TUNED else fn(profile)
        facts_of(profile).shed(SHED_AFTER.get(name, ()))
        held = [out]
        del out
        yield name, held.pop()  # this suspended frame then holds no table while the caller stores it


__all__ = [
    "DEFAULT_THRESHOLDS",
    "PASSES",
    "SHED_AFTER",
    "STREAMED",
    "Thresholds",
    "describe",
    "each_output",
    "each_pass",
    "run_all",
    "summary_metrics",
]
