"""`summary-text`: the summary metrics as an aligned, grouped text table (like neuron-profile's).

Contract: one line per metric, `name  value  unit`, names left-aligned in one
column so `grep -e nc_idx -e total_time` gives `name value` lines; groups are
introduced by a `# Group` line. Values use `format_value` (6 significant digits).
After the metrics, a `# Findings` section lists what the analysis found, in
plain words, most important first, each with up to three source lines to blame.
"""

from __future__ import annotations

from typing import BinaryIO

from nprof.analysis import DEFAULT_THRESHOLDS, Thresholds, describe, findings, summary_metrics
from nprof.analysis.summary import format_value
from nprof.export.options import ExportOptions
from nprof.profile import Profile


def render(metrics: dict[str, int | float | str]) -> str:
    """The text table of already computed metrics."""
    width = max((len(k) for k in metrics), default=0)
    vwidth = max((len(format_value(v)) for v in metrics.values()), default=0)
    lines: list[str] = []
    group = None
    for name, value in metrics.items():
        g, unit, _ = describe(name)
        if g != group:
            if lines:
                lines.append("")
            lines.append(f"# {g}")
            group = g
        lines.append(f"{name:<{width}}  {format_value(value):>{vwidth}}  {unit}".rstrip())
    return "\n".join(lines) + "\n"


def render_findings(profile: Profile, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> str:
    """The `# Findings` section, reported by `thresholds` (empty string when there are none)."""
    rows = findings(profile, thresholds=thresholds).to_pylist()
    if not rows:
        return ""
    lines = ["", "# Findings"]
    for row in rows:
        lines.append(f"[{row['severity']}] {row['title']}: {row['message']}")
        for source in (row["sources"] or [])[:3]:
            lines.append(f"    at {source}")
    return "\n".join(lines) + "\n"


def write(profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
    """Write the summary table of `profile`, then its findings, to `out`."""
    metrics = summary_metrics(profile, thresholds=options.thresholds)
    out.write((render(metrics) + render_findings(profile, options.thresholds)).encode())
