"""Options shared by every exporter (what `nprof view` passes on)."""

from __future__ import annotations

from dataclasses import dataclass

from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds


@dataclass(frozen=True)
class ExportOptions:
    """Per-export switches; exporters ignore those that do not concern them."""

    show_flows: bool = False  # perfetto: draw dependency arrows between events
    chunk_rows: int = 65_536  # rows per streamed batch (memory stays flat in profile size)
    thresholds: Thresholds = DEFAULT_THRESHOLDS  # the analysis thresholds (formats whose Exporter says so)
