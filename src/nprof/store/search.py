"""Search (SPEC U4) and box-select aggregates (SPEC U5) over a stored profile.

Contract:
* `search(cur, terms, t0, t1, limit)`: `terms` maps field -> value (fields in
  SEARCH_FIELDS, ANDed); a value is an exact match or `/regex/` (RE2, unanchored).
  Returns the total hit count, the hits overlapping [t0, t1) sorted by ts (capped
  at `limit`) and a summary of those by opcode and by engine (docs/api.md).
* `box_select(cur, meta, t0, t1, keys)`: events of the given rows overlapping
  [t0, t1) -> count, total and clipped durations, DMA bytes, and breakdowns by
  row, opcode, DMA transfer size (powers of 4 from 64 B) and source line.
Bad fields, empty queries and invalid regexes raise NprofError (HTTP 422).
"""

from __future__ import annotations

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


def _run(cur: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[tuple]:
    try:
        return cur.execute(sql, params).fetchall()
    except duckdb.InvalidInputException as exc:
        msg = str(exc).splitlines()[0]
        raise NprofError(f"invalid search regex ({msg}); values between slashes use RE2 syntax") from exc


def search(
    cur: duckdb.DuckDBPyConnection, terms: dict[str, str], t0: int | None, t1: int | None, limit: int
) -> dict[str, Any]:
    if not 1 <= limit <= MAX_HITS:
        raise NprofError(f"limit must be between 1 and {MAX_HITS}")
    cond, params = _condition(terms)
    lo = 0 if t0 is None else t0
    hi = (1 << 62) if t1 is None else t1
    if hi <= lo:
        raise NprofError("need t0 < t1")
    rng = [hi, lo, lo]
    total, in_range = _run(
        cur, f"SELECT count(*), count(*) FILTER (WHERE {_IN_RANGE}) FROM {_EV} WHERE {cond}", rng + params
    )[0]
    hits = _run(
        cur,
        f"SELECT id, track, ts, dur, opcode FROM {_EV} WHERE {cond} AND {_IN_RANGE} ORDER BY ts, id LIMIT ?",
        [*params, *rng, limit],
    )

    def by(col: str) -> list[dict[str, Any]]:
        rows = _run(
            cur,
            f"SELECT {col}, count(*), sum(dur)::BIGINT FROM {_EV} WHERE {cond} AND {_IN_RANGE} "
            f"GROUP BY {col} ORDER BY 3 DESC, 2 DESC, 1 LIMIT {MAX_GROUPS}",
            params + rng,
        )
        return [{col: k, "count": c, "duration": d} for k, c, d in rows]

    return {
        "query": dict(terms),
        "total": int(total),
        "in_range": int(in_range),
        "truncated": int(in_range) > len(hits),
        "hits": [{"id": i, "row": r, "ts": t, "dur": d, "opcode": o} for i, r, t, d, o in hits],
        "summary": {"by_opcode": by("opcode"), "by_engine": by("engine")},
    }


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
    count, total, busy, first, last, nbytes = cur.execute(
        f"SELECT count(*), coalesce(sum(dur), 0)::BIGINT, "
        f"coalesce(sum(least(ts + dur, {int(t1)}) - greatest(ts, {int(t0)})), 0)::BIGINT, "
        f"min(ts), max(ts + dur), coalesce(sum(nbytes) FILTER (WHERE is_dma), 0)::BIGINT FROM {sel}"
    ).fetchone()  # type: ignore[misc]
    out.update(
        count=int(count), total_duration=int(total), busy_in_window=int(busy), first_ts=first, last_end=last,
        dma_bytes=int(nbytes),
    )  # fmt: skip
    keys_by_row = {int(r["row"]): r["key"] for r in meta["rows"]}
    names = meta["opcodes"]
    q = f"SELECT {{k}}, count(*), sum(dur)::BIGINT{{extra}} FROM {sel} {{where}} GROUP BY 1 ORDER BY 3 DESC, 2 DESC, 1"
    res = cur.execute(q.format(k="row", extra="", where="")).fetchall()
    out["by_row"] = [{"row": keys_by_row[r], "count": c, "duration": d} for r, c, d in res]
    res = cur.execute(q.format(k="op", extra="", where="") + f" LIMIT {MAX_GROUPS}").fetchall()
    out["by_opcode"] = [{"opcode": names[o] if o >= 0 else None, "count": c, "duration": d} for o, c, d in res]
    size_key = "CASE WHEN nbytes < 64 THEN 0 ELSE CAST(floor(log(nbytes / 64.0) / log(4)) AS INTEGER) + 1 END"
    res = cur.execute(q.format(k=size_key, extra=", sum(nbytes)::BIGINT", where="WHERE is_dma")).fetchall()
    sizes = []
    for i, c, d, b in sorted(res, key=lambda x: x[0]):
        label, lo, hi = _size_label(int(i))
        sizes.append({"bucket": label, "min_bytes": lo, "max_bytes": hi, "count": c, "bytes": b, "duration": d})
    out["by_transfer_size"] = sizes
    src = cur.execute(
        f"SELECT coalesce(x.name, '(none)'), count(*), sum(dur)::BIGINT FROM {sel} "
        "LEFT JOIN sources x ON x.src = s.src "
        f"GROUP BY 1 ORDER BY 3 DESC, 2 DESC, 1 LIMIT {MAX_GROUPS}"
    ).fetchall()
    out["by_source"] = [{"source": n, "count": c, "duration": d} for n, c, d in src]
    return out
