"""The SBUF/PSUM memory view's data: tile allocations over time, peak use and fragmentation (docs/api.md).

Contract: `memory_answer(cur, meta)` -> `{"recorded": bool, "capacity": {"sbuf", "psum"} (bytes per
partition, from the preset; null when unknown), "spaces": {"sbuf"|"psum": {"peak_bytes", "peak_ts",
"fragmentation", "allocations": [{name, offset, bytes, partitions, source, first, last, uses}]}}}`.
* Allocations are the tracer's records (`manifest.meta["allocations"]`: space, tile name, byte
  offset and bytes per partition, partitions, source line), stored by `nprof.nki` kernels and
  compiled graphs; `recorded` is false for profiles without them (CPU/GPU captures, old files).
* `first` / `last` / `uses`: the start of the first and the end of the last compute instruction
  whose operands name the tile, and their count (DMA transfers carry no tile name, so a tile's
  load before its first compute use is not included); null / 0 for a tile no instruction names.
* `peak_bytes`: the largest sum of bytes per partition of tiles live at once (live = [first, last]),
  at `peak_ts`; `fragmentation` at that instant = 1 - largest free gap / total free bytes below
  the capacity (0 = all free space in one block; null without a capacity).
"""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from nprof.errors import NprofError

_USES = (
    "SELECT name, min(ts), max(ts + duration), count(*) FROM (SELECT ts, duration, "
    "unnest(regexp_extract_all(operands, '(?:sbuf|psum) ([^\\[ ]+)\\[', 1)) AS name FROM instructions "
    "WHERE operands IS NOT NULL) GROUP BY name"
)


def _capacity(preset: str | None) -> dict[str, int | None]:
    from nprof.arch.presets import get_preset

    if not preset:
        return {"sbuf": None, "psum": None}
    try:
        p = get_preset(preset)
    except NprofError:  # a preset this version does not know: no capacity, said as null
        return {"sbuf": None, "psum": None}
    return {"sbuf": p.sbuf_partition_bytes, "psum": p.psum_partition_bytes}


def _peak(allocs: list[dict[str, Any]], capacity: int | None) -> dict[str, Any]:
    """Peak live bytes (sweep over [first, last]) and the fragmentation of the free space at that instant."""
    events = sorted(
        [(a["first"], 0, i) for i, a in enumerate(allocs) if a["first"] is not None]
        + [(a["last"], 1, i) for i, a in enumerate(allocs) if a["first"] is not None]
    )
    live: set[int] = set()
    cur = best = 0
    best_ts, best_live = None, set()
    for ts, kind, i in events:
        if kind == 0:
            live.add(i)
            cur += allocs[i]["bytes"]
            if cur > best:
                best, best_ts, best_live = cur, ts, set(live)
        else:
            live.discard(i)
            cur -= allocs[i]["bytes"]
    frag = None
    if capacity and best_live:
        spans = sorted((allocs[i]["offset"], allocs[i]["offset"] + allocs[i]["bytes"]) for i in best_live)
        gaps, pos = [], 0
        for a, b in spans:
            if a > pos:
                gaps.append(a - pos)
            pos = max(pos, b)
        if capacity > pos:
            gaps.append(capacity - pos)
        free = sum(gaps)
        frag = round(1 - max(gaps) / free, 4) if free else 0.0
    return {"peak_bytes": best, "peak_ts": best_ts, "fragmentation": frag}


def memory_answer(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> dict[str, Any]:
    """SBUF/PSUM tile allocations with their use span, peak and fragmentation (see module doc)."""
    man = meta.get("manifest") or {}
    raw = (man.get("meta") or {}).get("allocations")
    capacity = _capacity(man.get("preset"))
    if not raw:
        return {"recorded": False, "capacity": capacity, "spaces": {}}
    uses = {n: (int(a), int(b), int(c)) for n, a, b, c in cur.execute(_USES).fetchall()}
    spaces: dict[str, list[dict[str, Any]]] = {}
    for space, name, offset, nbytes, parts, source in orjson.loads(raw):
        first, last, count = uses.get(name, (None, None, 0))
        spaces.setdefault(space, []).append(
            {"name": name, "offset": int(offset), "bytes": int(nbytes), "partitions": int(parts), "source": source,
             "first": first, "last": last, "uses": count}
        )  # fmt: skip
    return {
        "recorded": True,
        "capacity": capacity,
        "spaces": {s: {**_peak(a, capacity.get(s)), "allocations": a} for s, a in spaces.items()},
    }
