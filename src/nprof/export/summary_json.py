"""`summary-json`: the summary metrics as one JSON object, keys in summary order.

Contract: `{"total_time": 4.5e-07, "event_count": 4, "nc_idx": 0, ...}` (the
same dict as `summary_metrics`, its `bound` by the options' `latency_share` threshold), pretty-printed
with 2-space indentation.
"""

from __future__ import annotations

from typing import BinaryIO

import orjson

from nprof.analysis import summary_metrics
from nprof.export.options import ExportOptions
from nprof.profile import Profile


def write(profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
    """Write the summary of `profile` as JSON to `out`."""
    out.write(orjson.dumps(summary_metrics(profile, thresholds=options.thresholds), option=orjson.OPT_INDENT_2) + b"\n")
