"""`summary-text`: the summary metrics as an aligned, grouped text table (like neuron-profile's).

Contract: one line per metric, `name  value  unit`, names left-aligned in one
column so `grep -e nc_idx -e total_time` gives `name value` lines; groups are
introduced by a `# Group` line. Values use `format_value` (6 significant digits).
After the metrics, a `# Verdict` line gives the `bound` row's reason in the viewer's words (both come from
`nprof.analysis.verdict.verdict`), then a `# Findings` section lists what the analysis found, in
plain words, most important first, each with up to three source lines to blame.
A profile simulated on a preset with unpublished figures (trn3) starts with one
`# Assumed hardware figures: ...` line naming which figures rest on them and listing
them (`nprof.store.view_notes.assumed_figures_note`).
"""

from __future__ import annotations

from typing import BinaryIO

from nprof.analysis import DEFAULT_THRESHOLDS, Thresholds, describe, findings, summary_metrics
from nprof.analysis.summary import format_value
from nprof.analysis.verdict import verdict
from nprof.export.options import ExportOptions
from nprof.profile import Profile
from nprof.store.info import GROUP_ORDER
from nprof.store.view_notes import assumed_figures_note


def render(metrics: dict[str, int | float | str]) -> str:
    """The text table of already computed metrics, one `# Group` section per group (the viewer's group order,
    `nprof.store.info.GROUP_ORDER`, then any other group by its first metric; metrics in their order within it)."""
    width = max((len(k) for k in metrics), default=0)
    vwidth = max((len(format_value(v)) for v in metrics.values()), default=0)
    groups: dict[str, list[str]] = {}
    for name, value in metrics.items():
        g, unit, _ = describe(name)
        groups.setdefault(g, []).append(f"{name:<{width}}  {format_value(value):>{vwidth}}  {unit}".rstrip())
    order = [g for g in GROUP_ORDER if g in groups] + [g for g in groups if g not in GROUP_ORDER]
    return "\n\n".join("\n".join([f"# {g}", *groups[g]]) for g in order) + "\n"


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


def render_notes(profile: Profile) -> str:
    """The `# ...` note lines above the metrics (the assumed-figures line of a trn3 profile); "" without."""
    note = assumed_figures_note(profile.info.preset, profile.info.meta)
    return f"# {note}\n\n" if note else ""


def render_verdict(metrics: dict[str, int | float | str]) -> str:
    """The `# Verdict` line: the bound of the metrics and why, as the viewer's Summary tab says it."""
    return f"\n# Verdict: {verdict(metrics).text}\n"


def write(profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
    """Write the notes of `profile`, its summary table, its verdict, then its findings, to `out`."""
    metrics = summary_metrics(profile, thresholds=options.thresholds)
    text = render_notes(profile) + render(metrics) + render_verdict(metrics)
    out.write((text + render_findings(profile, options.thresholds)).encode())
