"""Per-profile facts for the API: cached metadata, manifest + program info, summary, analysis tables.

Contract: `load_meta(cur)` reads the small tables of a profile database (rows,
opcodes, meta) into one dict the queries share (the Store caches it per file
version). `profile_answer`, `summary_answer` and `table_answer` build the JSON
documents of docs/api.md; the summary comes from the `summary` analysis pass
(group, unit, description per metric) and the verdict from its `bound`,
`mm_arithmetic_intensity` and `peak_flops_bandwidth_ratio` metrics.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import orjson

from nprof.errors import NprofError
from nprof.store.view_notes import assumed_figures_note

GROUP_ORDER = ("Overview", "FLOPs", "Engines", "DMA", "Memory", "Collectives")


def load_meta(cur: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    from nprof.store.ingest import STORE_FORMAT

    meta = {k: orjson.loads(v) for k, v in cur.execute("SELECT key, value FROM meta").fetchall()}
    if meta.get("store_format") != STORE_FORMAT:
        raise NprofError(
            "this profile was stored by another nprof version; re-ingest it with nprof view -s FILE --force"
        )
    cols = [d[0] for d in cur.execute("SELECT * FROM rows ORDER BY row").description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.execute("SELECT * FROM rows ORDER BY row").fetchall()]
    meta["rows"] = rows
    meta["opcodes"] = [n for (n,) in cur.execute("SELECT name FROM opcodes ORDER BY op").fetchall()]
    meta["sources"] = [n for (n,) in cur.execute("SELECT name FROM sources ORDER BY src").fetchall()]
    if meta.get("stats", {}).get("events_tensor"):  # stores ingested before the events' tensor column lack it
        meta["tensors"] = [n for (n,) in cur.execute("SELECT name FROM tensors ORDER BY tensor").fetchall()]
    return meta


def tensor_bytes(shape: list[int], dtype: str) -> int | None:
    """Bytes of a tensor of `shape` and `dtype`; None when numpy does not know the dtype."""
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 & co with numpy)

        size = np.dtype(dtype).itemsize
    except TypeError:
        return None
    n = 1
    for d in shape:
        n *= int(d)
    return n * size


def profile_answer(entry: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    man = dict(meta["manifest"])
    if man.get("meta"):  # source texts stored at capture are served by /source, not with every page load
        man["meta"] = {k: v for k, v in man["meta"].items() if not k.startswith("source:")}
    st = meta["stats"]
    tensors = [
        {**t, "shape": list(t["shape"]), "bytes": tensor_bytes(list(t["shape"]), t["dtype"])}
        for t in man.get("tensors", [])
    ]
    return {
        "profile": public_entry(entry),
        "manifest": man,
        "program": {
            "path": man.get("program"),
            "tensors": tensors,
            "flops": st["flops"],
            "hw_flops": st["hw_flops"],
            "instruction_count": st["instruction_count"],
            "dma_count": st["dma_count"],
        },
        "tables": list(meta["analysis_tables"]),
        "assumptions": assumed_figures_note(man.get("preset"), meta["manifest"].get("meta") or {}),
    }


def public_entry(entry: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "id", "display_name", "name", "device", "preset", "created", "ingested",
        "total_time_ns", "event_count", "rank", "world_size", "group",
    )  # fmt: skip
    return {k: entry.get(k) for k in keys}


def summary_answer(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], flat: bool) -> dict[str, Any]:
    metrics = meta["summary"]
    if flat:
        return {"metrics": metrics}
    groups: dict[str, list[dict[str, Any]]] = {}
    if "summary" in meta["analysis_tables"]:
        for name, group, unit, desc in cur.execute(
            'SELECT name, "group", unit, description FROM analysis_summary'
        ).fetchall():
            groups.setdefault(group, []).append(
                {"key": name, "label": name, "value": metrics.get(name), "unit": unit, "description": desc}
            )
    order = [g for g in GROUP_ORDER if g in groups] + [g for g in groups if g not in GROUP_ORDER]
    ai = metrics.get("mm_arithmetic_intensity")
    ratio = metrics.get("peak_flops_bandwidth_ratio")
    from nprof.analysis.verdict import verdict

    v = verdict(metrics)  # the rule of the summary's `bound` field: summary-text shows the same
    return {
        "groups": [{"name": g, "metrics": groups[g]} for g in order],
        "verdict": {"bound": v.bound, "arithmetic_intensity": ai, "peak_flops_bandwidth_ratio": ratio, "text": v.text},
    }


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return None
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    return str(v)


def table_answer(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], name: str, offset: int, limit: int) -> dict:
    from nprof.store.store import NotFound

    if name not in meta["analysis_tables"]:
        raise NotFound(f'no analysis table "{name}"; tables are {", ".join(meta["analysis_tables"]) or "none"}')
    if offset < 0 or not 1 <= limit <= 100_000:
        raise NprofError("offset must be >= 0 and limit between 1 and 100000")
    counted = cur.execute(f'SELECT count(*) FROM "analysis_{name}"').fetchone()
    total = counted[0] if counted else 0  # count(*) always gives one row
    res = cur.execute(f'SELECT * FROM "analysis_{name}" LIMIT ? OFFSET ?', [limit, offset])
    columns = [{"name": d[0], "type": str(d[1]).lower()} for d in res.description]
    return {
        "name": name,
        "total": int(total),
        "offset": offset,
        "columns": columns,
        "rows": [_jsonable(list(r)) for r in res.fetchall()],
    }
