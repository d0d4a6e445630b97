"""No function in src/nprof is over MAX_LINES lines (from its `def` to its last line, nested ones included).

A long function is split into named steps, each with a docstring stating its contract. ALLOWED lists
the paths not checked yet; it must only shrink.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 80

# Paths (glob patterns, relative to the repository) not checked: none. A new entry needs a comment
# saying why the function cannot be split yet.
ALLOWED: tuple[str, ...] = ()


def long_functions(path: Path, root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """'file:line name (N lines)' for every function or method in `path` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} ({length} lines)")
    return found


def _checked(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return not any(fnmatch(rel, pattern) for pattern in ALLOWED)


def test_no_function_is_over_the_limit() -> None:
    files = [p for p in sorted((ROOT / "src" / "nprof").rglob("*.py")) if _checked(p)]
    found = [hit for p in files for hit in long_functions(p)]
    assert found == [], f"split these into steps of at most {MAX_LINES} lines"


def test_every_allowed_path_still_exists() -> None:
    stale = [pattern for pattern in ALLOWED if not list(ROOT.glob(pattern))]
    assert stale == [], "gone: remove these from ALLOWED"


def test_the_check_can_fail(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    lines = ["def short():", "    return 1", "class C:", "    async def long(self):"]
    lines += [f"        x{i} = {i}" for i in range(8)] + ["        def inner():", "            return 2"]
    src.write_text("\n".join(lines) + "\n")
    assert long_functions(src, tmp_path, limit=5) == ["m.py:4 long (11 lines)"]  # methods and async count
    assert long_functions(src, tmp_path, limit=11) == []
    assert long_functions(src, tmp_path, limit=1) == [
        "m.py:1 short (2 lines)",
        "m.py:4 long (11 lines)",
        "m.py:13 inner (2 lines)",
    ]
