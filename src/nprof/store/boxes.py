"""Timeline annotation boxes for one window: warnings and this rank's collective ops (docs/api.md).

Contract: `boxes(cur, meta, t0, t1, limit)` returns
`{"warnings": [...], "collectives": [...], "warnings_total": N, "truncated": bool}`:
* warnings: rows of the `warnings` analysis table overlapping [t0, t1], the narrowest first
  (at most `limit`, default 60: the timeline draws no more), each `{kind, t0, t1, text, tensor,
  source, count, bytes, rows, events}` where `rows` are the timeline rows (DMA queue / engine track
  keys) of the events the warning concerns (its `event_ids`, the first MAX_IDS of them) and
  `events` those events as `[row, ts, end]` (the first MAX_SPANS by time): the timeline outlines
  each of them on its own row, never a box over every queue.
* collectives: this profile's own collective ops (its `collectives` table, rows of this rank)
  overlapping the window, `{id, kind, t0, t1, rows}` where `rows` are the CC-core tracks
  (`cc.*`) with an instruction inside [arrival, end] (empty when the profile has no CC rows).
The cost is bounded by `limit` and MAX_IDS, not by the profile size.
"""

from __future__ import annotations

from typing import Any

import duckdb

from nprof.errors import NprofError

MAX_IDS = 4000
MAX_SPANS = 400
MAX_LIMIT = 500


def _rows_of_ids(cur: duckdb.DuckDBPyConnection, ids: set[int]) -> dict[int, tuple[str, int, int]]:
    """(row key, ts, end) of each event id (instructions: track; DMA: queue)."""
    if not ids:
        return {}
    lst = ",".join(str(int(i)) for i in sorted(ids))
    sql = (
        f"SELECT id, track, ts, ts + duration FROM instructions WHERE id IN ({lst}) "
        f"UNION ALL SELECT id, queue, ts, ts + duration FROM dma WHERE id IN ({lst})"
    )
    return {int(i): (str(r), int(a), int(b)) for i, r, a, b in cur.execute(sql).fetchall()}


def _warnings(cur: duckdb.DuckDBPyConnection, t0: int, t1: int, limit: int) -> tuple[list[dict], int]:
    total = cur.execute('SELECT count(*) FROM analysis_warnings WHERE "end" >= ? AND ts <= ?', [t0, t1]).fetchone()
    res = cur.execute(
        'SELECT kind, message, ts, "end", event_ids[1:?], tensor, source, count, bytes FROM analysis_warnings '
        'WHERE "end" >= ? AND ts <= ? ORDER BY "end" - ts, ts LIMIT ?',
        [MAX_IDS, t0, t1, limit],
    ).fetchall()
    ids = {int(i) for r in res for i in (r[4] or [])}
    row_of = _rows_of_ids(cur, ids)
    out = []
    for kind, msg, ts, end, evs, tensor, source, count, nbytes in res:
        spans = sorted((row_of[int(i)] for i in (evs or []) if int(i) in row_of), key=lambda e: e[1])
        out.append(
            {
                "kind": kind, "t0": int(ts), "t1": max(int(end), int(ts) + 1), "text": msg, "tensor": tensor,
                "source": source, "count": count, "bytes": nbytes, "rows": sorted({e[0] for e in spans}),
                "events": [list(e) for e in spans[:MAX_SPANS]],
            }
        )  # fmt: skip
    return out, int(total[0]) if total else 0


def _collectives(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], t0: int, t1: int, limit: int) -> list[dict]:
    rank = int((meta.get("manifest") or {}).get("rank", 0) or 0)
    ops = cur.execute(
        "SELECT id, kind, ts, ts + duration FROM collectives WHERE rank = ? AND ts + duration >= ? AND ts <= ? "
        "ORDER BY ts LIMIT ?",
        [rank, t0, t1, limit],
    ).fetchall()
    cc_rows = [r["key"] for r in meta["rows"] if str(r["key"]).startswith("cc.")]
    out = []
    for op_id, kind, a, b in ops:
        rows: list[str] = []
        if cc_rows:
            marks = ",".join("?" for _ in cc_rows)
            rows = [
                k
                for (k,) in cur.execute(
                    f"SELECT DISTINCT track FROM instructions WHERE track IN ({marks}) "
                    "AND ts < ? AND ts + duration > ? ORDER BY track",
                    [*cc_rows, int(b), int(a)],
                ).fetchall()
            ]
        out.append({"id": int(op_id), "kind": kind, "t0": int(a), "t1": max(int(b), int(a) + 1), "rows": rows})
    return out


def boxes(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], t0: int, t1: int, limit: int = 60) -> dict[str, Any]:
    """Warning and collective boxes of the window [t0, t1] (see module doc)."""
    if t0 < 0 or t1 <= t0:
        raise NprofError("need 0 <= t0 < t1 (nanoseconds since execution start)")
    if not 1 <= limit <= MAX_LIMIT:
        raise NprofError(f"limit must be between 1 and {MAX_LIMIT}")
    warnings: list[dict] = []
    total = 0
    if "warnings" in meta["analysis_tables"]:
        warnings, total = _warnings(cur, t0, t1, limit)
    return {
        "warnings": warnings,
        "warnings_total": total,
        "truncated": total > len(warnings),
        "collectives": _collectives(cur, meta, t0, t1, limit),
    }
