"""Search and box-select aggregates over a stored profile.

Contract:
* `search(cur, terms, t0, t1, limit)`: `terms` maps field -> value (fields in
  SEARCH_FIELDS, ANDed); a value is an exact match or `/regex/` (RE2, unanchored).
  Returns the total hit count, the hits overlapping [t0, t1) sorted by ts (capped
  at `limit`) and a summary of those by opcode and by engine (docs/api.md). With
  `width` (pixels) and more hits in range than `limit`, `marks` gives every hit in
  range merged per (row, pixel column): {row, ts, dur, count} lists, so the timeline
  highlights all of them, not the first `limit`.
* `box_select(cur, meta, t0, t1, keys)`: events of the given rows overlapping
  [t0, t1) -> count, total and clipped durations, DMA bytes, and breakdowns by
  row, opcode, DMA transfer size (powers of 4 from 64 B) and source line.
Bad fields, empty queries and invalid regexes raise NprofError (HTTP 422).
"""

from __future__ import annotations

import threading
from typing import Any

import duckdb

from nprof.errors import NprofError
from nprof.store.view import select_rows

SEARCH_FIELDS = (
    "opcode", "engine", "track", "queue", "layer", "hlo_name", "nki_source_location",
    "operands", "tensor", "direction", "kind", "id",
)  # fmt: skip
MAX_HITS = 20_000
MAX_GROUPS = 200

_EV = (
    "(SELECT id, 'instruction' AS kind, ts, duration AS dur, engine, track, NULL::VARCHAR AS queue, opcode, "
    "operands, layer, hlo_name, nki_source_location, NULL::VARCHAR AS tensor, NULL::VARCHAR AS direction "
    "FROM instructions UNION ALL "
    "SELECT id, 'dma', ts, duration, 'dma', queue, queue, direction, NULL, layer, hlo_name, nki_source_location, "
    "tensor, direction FROM dma) AS ev"
)


def _condition(terms: dict[str, str]) -> tuple[str, list[Any]]:
    if not terms:
        raise NprofError(f"search needs at least one field=value; fields: {', '.join(SEARCH_FIELDS)}")
    parts, params = [], []
    for field, value in terms.items():
        if field not in SEARCH_FIELDS:
            raise NprofError(f"unknown search field '{field}'; fields: {', '.join(SEARCH_FIELDS)}")
        col = "CAST(id AS VARCHAR)" if field == "id" else field
        if len(value) >= 2 and value.startswith("/") and value.endswith("/"):
            parts.append(f"coalesce(regexp_matches({col}, ?), false)")
            params.append(value[1:-1])
        else:
            parts.append(f"{col} = ?")
            params.append(value)
    return " AND ".join(parts), params


_IN_RANGE = "ts < ? AND (ts + dur > ? OR (dur = 0 AND ts >= ?))"


SEARCH_BUDGET_S = 5.0  # a search query running longer is interrupted and refused (422)


def _run(cur: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[tuple]:
    """Run one search query within SEARCH_BUDGET_S seconds (RE2 cannot backtrack, but a pattern like
    /.{0,1000}.{0,1000}z/ is still slow per row); NprofError for a bad regex or a blown budget."""
    timer = threading.Timer(SEARCH_BUDGET_S, cur.interrupt)
    timer.start()
    try:
        return cur.execute(sql, params).fetchall()
    except duckdb.InvalidInputException as exc:
        msg = str(exc).splitlines()[0]
        raise NprofError(f"invalid search regex ({msg}); values between slashes use RE2 syntax") from exc
    except (duckdb.InterruptException, RuntimeError) as exc:
        if timer.is_alive():
            raise
        raise NprofError(
            f"search took longer than its {SEARCH_BUDGET_S:g} s budget; use a simpler pattern or a shorter time range"
        ) from exc
    finally:
        timer.cancel()


def _marks(cur: duckdb.DuckDBPyConnection, cond: str, params: list[Any], lo: int, hi: int, width: int) -> dict:
    """Hits in [lo, hi) merged per (row, pixel column of `width`): columnar row/ts/dur/count."""
    b = max(1.0, (hi - lo) / width)
    res = _run(
        cur,
        f"SELECT track, LEAST(GREATEST(CAST(floor((ts - ?) / ?) AS BIGINT), 0), ?) AS px, min(ts), max(ts + dur), "
        f"count(*) FROM {_EV} WHERE {cond} AND {_IN_RANGE} GROUP BY 1, 2 ORDER BY 1, 2",
        [lo, b, width - 1, *params, hi, lo, lo],
    )
    return {
        "row": [r[0] for r in res],
        "ts": [int(r[2]) for r in res],
        "dur": [int(r[3]) - int(r[2]) for r in res],
        "count": [int(r[4]) for r in res],
    }


def search(
    cur: duckdb.DuckDBPyConnection,
    terms: dict[str, str],
    t0: int | None,
    t1: int | None,
    limit: int,
    width: int | None = None,
) -> dict[str, Any]:
    """Search events (see module doc)."""
    if not 1 <= limit <= MAX_HITS:
        raise NprofError(f"limit must be between 1 and {MAX_HITS}")
    cond, params = _condition(terms)
    lo = 0 if t0 is None else t0
    hi = (1 << 62) if t1 is None else t1
    if hi <= lo:
        raise NprofError("need t0 < t1")
    rng = [hi, lo, lo]
    # one scan for the counts and both summaries (few opcode x engine groups), one for the first hits
    groups = _run(
        cur,
        f"SELECT opcode, engine, count(*), count(*) FILTER (WHERE {_IN_RANGE}), "
        f"coalesce(sum(dur) FILTER (WHERE {_IN_RANGE}), 0)::BIGINT FROM {_EV} WHERE {cond} GROUP BY 1, 2",
        rng + rng + params,
    )
    hits = _run(
        cur,
        f"SELECT id, track, ts, dur, opcode FROM {_EV} WHERE {cond} AND {_IN_RANGE} ORDER BY ts, id LIMIT ?",
        [*params, *rng, limit],
    )
    total = sum(g[2] for g in groups)
    in_range = sum(g[3] for g in groups)

    def by(col: int, name: str) -> list[dict[str, Any]]:
        acc: dict[Any, list[int]] = {}
        for g in groups:
            if g[3]:
                a = acc.setdefault(g[col], [0, 0])
                a[0] += g[3]
                a[1] += g[4]
        ranked = sorted(acc.items(), key=lambda kv: (-kv[1][1], -kv[1][0], str(kv[0])))[:MAX_GROUPS]
        return [{name: k, "count": c, "duration": d} for k, (c, d) in ranked]

    out = {
        "query": dict(terms),
        "total": int(total),
        "in_range": int(in_range),
        "truncated": int(in_range) > len(hits),
        "hits": [{"id": i, "row": r, "ts": t, "dur": d, "opcode": o} for i, r, t, d, o in hits],
        "summary": {"by_opcode": by(0, "opcode"), "by_engine": by(1, "engine")},
    }
    if width is not None and out["truncated"]:
        if not 1 <= width <= 8192:
            raise NprofError("width must be between 1 and 8192 pixels")
        out["marks"] = _marks(cur, cond, params, lo, min(hi, lo + (1 << 50)), width)
    return out


def _size_label(i: int) -> tuple[str, int, int | None]:
    def human(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if n < 1024:
                return f"{n} {unit}"
            n //= 1024
        return f"{n} PiB"

    if i == 0:
        return "< 64 B", 0, 63
    lo = 64 * 4 ** (i - 1)
    return f"{human(lo)}-{human(lo * 4)}", lo, lo * 4 - 1


def box_select(
    cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], t0: int, t1: int, keys: list[str] | None
) -> dict[str, Any]:
    if t0 < 0 or t1 <= t0:
        raise NprofError("need 0 <= t0 < t1 (nanoseconds since execution start)")
    rows = [r for r in select_rows(meta, keys) if r["kind"] != "counter"]
    out: dict[str, Any] = {"t0": t0, "t1": t1, "rows": [r["key"] for r in rows]}
    if not rows:
        rows = [{"row": -1, "max_dur": 0}]
    idx = ",".join(str(int(r["row"])) for r in rows)
    maxdur = max(int(r["max_dur"]) for r in rows)
    dma_rows = ",".join(str(int(r["row"])) for r in meta["rows"] if r["kind"] == "dma") or "-1"
    sel = (
        f"(SELECT row, ts, dur, op, nbytes, src, row IN ({dma_rows}) AS is_dma FROM events "
        f"WHERE row IN ({idx}) AND ts < {int(t1)} AND ts >= {int(t0) - maxdur} "
        f"AND (ts + dur > {int(t0)} OR (dur = 0 AND ts >= {int(t0)}))) AS s"
    )
    size_key = (
        "CASE WHEN NOT is_dma THEN -1 WHEN nbytes < 64 THEN 0 "
        "ELSE CAST(floor(log(nbytes / 64.0) / log(4)) AS INTEGER) + 1 END"
    )
    groups = cur.execute(
        f"SELECT row, op, {size_key}, src, count(*), sum(dur)::BIGINT, "
        f"sum(least(ts + dur, {int(t1)}) - greatest(ts, {int(t0)}))::BIGINT, sum(nbytes)::BIGINT, "
        f"min(ts), max(ts + dur) FROM {sel} GROUP BY 1, 2, 3, 4"
    ).fetchall()  # one scan; the breakdowns are folded from these few groups
    dma_groups = [g for g in groups if g[2] >= 0]
    out.update(
        count=sum(g[4] for g in groups),
        total_duration=sum(g[5] for g in groups),
        busy_in_window=sum(g[6] for g in groups),
        first_ts=min((g[8] for g in groups), default=None),
        last_end=max((g[9] for g in groups), default=None),
        dma_bytes=sum(g[7] for g in dma_groups),
    )
    keys_by_row = {int(r["row"]): r["key"] for r in meta["rows"]}
    names = meta["opcodes"]
    srcs = [n for (n,) in cur.execute("SELECT name FROM sources ORDER BY src").fetchall()]
    out["by_row"] = _fold(groups, lambda g: keys_by_row[g[0]], "row", None)
    out["by_opcode"] = _fold(groups, lambda g: names[g[1]] if g[1] >= 0 else None, "opcode", MAX_GROUPS)
    out["by_source"] = _fold(groups, lambda g: srcs[g[3]] if g[3] >= 0 else "(none)", "source", MAX_GROUPS)
    sizes: dict[int, list[int]] = {}
    for g in dma_groups:
        a = sizes.setdefault(g[2], [0, 0, 0])
        a[0] += g[4]
        a[1] += g[7]
        a[2] += g[5]
    out["by_transfer_size"] = []
    for i, (c, b, d) in sorted(sizes.items()):
        label, lo, hi = _size_label(int(i))
        out["by_transfer_size"].append(
            {"bucket": label, "min_bytes": lo, "max_bytes": hi, "count": c, "bytes": b, "duration": d}
        )
    return out


def _fold(groups: list[tuple], key: Any, name: str, cap: int | None) -> list[dict[str, Any]]:
    """Sum count and duration of the scan's groups by `key(group)`; biggest duration first."""
    acc: dict[Any, list[int]] = {}
    for g in groups:
        a = acc.setdefault(key(g), [0, 0])
        a[0] += g[4]
        a[1] += g[5]
    ranked = sorted(acc.items(), key=lambda kv: (-kv[1][1], -kv[1][0], str(kv[0])))
    return [{name: k, "count": c, "duration": d} for k, (c, d) in ranked[:cap]]
