"""The source-code view's data: per-line instruction counts and time, with the file texts (docs/api.md).

Contract: `source_answer(cur, meta, root)` -> `{"root", "files": [{"name", "origin", "text", "count",
"time_ns", "lines": [{"line", "count", "time_ns"}]}]}`, files by total time (largest first). Lines come
from the `nki_source_location` (`file.py:LINE`) of every instruction and DMA transfer; `count` and
`time_ns` are the events and their summed duration attributed to that line. A file's text comes from
`root` when given (`nprof view --nki-source-root DIR`: `DIR/<file>`, else the first file of that base
name under DIR) — `origin` "root" — else from the copy stored in the profile at capture time
(`manifest.meta["source:<file>"]`, `origin` "profile"); otherwise `text` and `origin` are null.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb

from nprof.profile.sources import PREFIX, first_readable, split_location

_SQL = (
    "SELECT nki_source_location, count(*), sum(duration) FROM (SELECT nki_source_location, duration "
    "FROM instructions UNION ALL SELECT nki_source_location, duration FROM dma) "
    "WHERE nki_source_location IS NOT NULL GROUP BY 1"
)
MAX_SCAN = 20_000  # files looked at when searching --nki-source-root for a base name


def _from_root(root: Path, name: str) -> str | None:
    """The text of `name` under `root` (exact relative path, else the first file with its base name)."""
    direct = root / name if not os.path.isabs(name) else Path(name)
    candidates = [direct]
    base = os.path.basename(name)
    for i, p in enumerate(root.rglob(base)):
        if i >= MAX_SCAN:
            break
        candidates.append(p)
    return first_readable(candidates)


def source_answer(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any], root: str | None) -> dict[str, Any]:
    """Per-file, per-line event counts and times with the file texts (see module doc)."""
    files: dict[str, dict[str, Any]] = {}
    for loc, n, t in cur.execute(_SQL).fetchall():
        name, line = split_location(loc)
        if line is None:
            continue
        f = files.setdefault(name, {"name": name, "count": 0, "time_ns": 0, "lines": []})
        f["count"] += int(n)
        f["time_ns"] += int(t)
        f["lines"].append({"line": line, "count": int(n), "time_ns": int(t)})
    stored = ((meta.get("manifest") or {}).get("meta")) or {}
    base = Path(root).expanduser() if root else None
    for f in files.values():
        f["lines"].sort(key=lambda x: x["line"])
        text = _from_root(base, f["name"]) if base is not None else None
        origin = "root" if text is not None else None
        if text is None and PREFIX + f["name"] in stored:
            text, origin = stored[PREFIX + f["name"]], "profile"
        f["text"], f["origin"] = text, origin
    return {"root": root, "files": sorted(files.values(), key=lambda f: (-f["time_ns"], f["name"]))}
