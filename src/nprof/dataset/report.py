"""Render the cross-rank analysis as aligned text tables or JSON.

Contract: `as_text(results) -> str` prints each query as a titled table (integers with thousands
separators, floats with 3 decimals, null as `-`); `as_json(results) -> bytes` gives
`{name: {"title", "columns", "rows"}}`. Both are pure; the CLI writes them.
"""

from __future__ import annotations

from typing import Any

import orjson

from nprof.dataset.engines import Result


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return str(value)


def _table(title: str, result: Result) -> list[str]:
    """One titled table, columns right-aligned to their widest cell."""
    cells = [[_cell(v) for v in row] for row in result.rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(result.columns)]
    lines = [f"# {title}", "  ".join(c.rjust(w) for c, w in zip(result.columns, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    if not cells:
        lines.append("(no rows)")
    return lines


def as_text(results: dict[str, tuple[str, Result]]) -> str:
    """Every query's table, separated by blank lines."""
    blocks = ["\n".join(_table(title, result)) for title, result in results.values()]
    return "\n\n".join(blocks) + "\n"


def as_json(results: dict[str, tuple[str, Result]]) -> bytes:
    """{name: {"title", "columns", "rows"}} as JSON bytes."""
    data = {
        name: {"title": title, "columns": list(r.columns), "rows": [list(row) for row in r.rows]}
        for name, (title, r) in results.items()
    }
    return orjson.dumps(data, option=orjson.OPT_INDENT_2)
