"""The `summary` pass: one row per summary metric, for the Summary tab, exporters and terminology.

Contract: columns name, value (the metric as display text), numeric (float64,
null for text metrics such as `bound`), group, unit, description; rows in the
order of `summary_metrics`.
"""

from __future__ import annotations

import pyarrow as pa

from nprof.analysis.metrics import Metric, describe, summary_metrics
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=False),
        pa.field("numeric", pa.float64()),
        pa.field("group", pa.string(), nullable=False),
        pa.field("unit", pa.string(), nullable=False),
        pa.field("description", pa.string(), nullable=False),
    ]
)


def format_value(value: Metric) -> str:
    """Display text of a metric: ints as is, floats with 6 significant digits, strings unchanged."""
    if isinstance(value, bool | str | int):
        return str(value)
    return f"{value:.6g}"


def summary_table(metrics: dict[str, Metric]) -> pa.Table:
    """The summary rows of an already computed metrics dict."""
    rows: dict[str, list] = {n: [] for n in SCHEMA.names}
    for name, value in metrics.items():
        group, unit, text = describe(name)
        rows["name"].append(name)
        rows["value"].append(format_value(value))
        rows["numeric"].append(None if isinstance(value, str) else float(value))
        rows["group"].append(group)
        rows["unit"].append(unit)
        rows["description"].append(text)
    return pa.table(rows, schema=SCHEMA)


def summary(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> pa.Table:
    """Summary metrics of `profile` as a table (the `bound` verdict by `thresholds.latency_share`)."""
    return summary_table(summary_metrics(profile, thresholds=thresholds))
