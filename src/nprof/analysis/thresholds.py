"""The thresholds of the analysis passes, as one parameter with documented defaults.

Contract: `Thresholds` is a frozen dataclass; `DEFAULT_THRESHOLDS` holds the defaults every
profile is analysed with unless a caller passes its own (`run_all(profile, thresholds=...)`,
`findings(profile, thresholds=...)`, `warnings(profile, thresholds=...)`, and for the small-DMA
size and the latency share also `dma_queues(...)`, `summary(...)` and `summary_metrics(...)`).
Shares are fractions of the run (0..1); a value out of range raises NprofError naming the field.
`parse_thresholds(["NAME=VALUE", ...])` reads `nprof view --threshold NAME=VALUE` (an
unknown name is refused with the list of valid ones); `Thresholds.changed()` gives the
fields that differ from the defaults (docs/profile-format.md lists every field with its
default); `SUMMARY_THRESHOLDS` names the fields the summary's `bound` verdict depends on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from nprof.errors import NprofError


@dataclass(frozen=True)
class Thresholds:
    """When a finding or warning is reported (see `nprof.analysis.findings` and `.warnings` for the rules)."""

    # `serial_engines`: engines active less than this share of the run are left out of the overlap check
    min_engine_share: float = 0.01
    # `exposed_dma`: reported when DMA time with no compute running exceeds this share of the run
    exposed_dma_share: float = 0.10
    # `idle_gap`: a gap with nothing running is reported when it lasts this share of the run ...
    gap_share: float = 0.05
    # ... and at least this many nanoseconds
    gap_min_ns: int = 1_000
    # `idle_gap`: at most this many gaps are reported (the longest)
    max_gaps: int = 5
    # `semaphore_wait`: reported for an engine waiting on semaphores more than this share of the run
    wait_share: float = 0.10
    # `host_bound` (system profiles): a step whose host work exceeds this multiple of device busy time
    host_bound_ratio: float = 1.0
    # `tensor_reload` (warning and finding): a tensor loaded from HBM more than this many times
    reload_limit: int = 2
    # `small_dma` (warning and finding; `dma_queues.small_transfers`): a transfer of fewer bytes per
    # partition than this is small (2 KiB: the DMA engines' efficient size, docs/hardware.md) ...
    small_dma_partition_bytes: int = 2048
    # ... or of fewer bytes in all than this (32 KiB, docs/hardware.md)
    small_dma_bytes: int = 32 * 1024
    # summary `bound` = "latency" and the `latency_bound` finding: fixed DMA latencies on the critical path
    # take at least this share of the run
    latency_share: float = 0.5

    def __post_init__(self) -> None:
        """Refuse values no rule can use: shares outside 0..1, negative counts, times or ratios."""
        for f in fields(self):
            value = getattr(self, f.name)
            top = 1.0 if f.name.endswith("_share") else float("inf")
            if not 0 <= value <= top:
                bound = "between 0 and 1" if top == 1.0 else ">= 0"
                raise NprofError(f"threshold {f.name} must be {bound}, got {value!r}")

    def changed(self) -> dict[str, Any]:
        """The fields whose value differs from the default, by name (empty for the defaults)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}


DEFAULT_THRESHOLDS = Thresholds()
SUMMARY_THRESHOLDS = frozenset({"latency_share"})  # what the summary's `bound` verdict depends on


def parse_thresholds(pairs: Sequence[str], base: Thresholds = DEFAULT_THRESHOLDS) -> Thresholds:
    """`base` with each `NAME=VALUE` of `pairs` applied; NprofError (one line) for a pair without `=`, an
    unknown name (listing the valid ones), a name given twice, or a value not a number of the field's kind
    (whole numbers for counts and nanoseconds) or out of its range."""
    kinds = {f.name: f.type for f in fields(Thresholds)}
    changes: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise NprofError(f"--threshold {pair!r}: expected NAME=VALUE, e.g. --threshold gap_share=0.02")
        if name not in kinds:
            raise NprofError(f"unknown threshold {name!r}; valid thresholds: {', '.join(kinds)}")
        if name in changes:
            raise NprofError(f"threshold {name} is given twice; give it once")
        whole = kinds[name] in (int, "int")
        try:
            changes[name] = int(text) if whole else float(text)
        except ValueError:
            kind = "a whole number" if whole else "a number"
            raise NprofError(f"threshold {name} must be {kind}, got {text[:40]!r}") from None
    return replace(base, **changes)
