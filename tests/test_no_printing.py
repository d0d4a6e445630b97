"""Library code never prints: outside cli.py, no module of src/nprof calls `print` or touches
`sys.stdout` / `sys.stderr`.

A command's handler returns an `nprof.outcome.Outcome` (text for stdout, lines for stderr, exit code)
and `nprof.cli` prints it. ALLOWED lists the paths not checked; the first group must only shrink.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ALLOWED = (
    # Being rewritten by other engineers right now; a debt to pay once that work has landed
    # (today: capture/multiworker.py's report and warnings, compiler/cache.py's `nprof compile` listing,
    # and nki's benchmark table / device_print, which NKI's own API prints).
    "src/nprof/nki/*",
    "src/nprof/compiler/*",
    "src/nprof/device/*",
    "src/nprof/capture/multiworker.py",
    "src/nprof/capture/system*.py",
    # For good: the front door itself, the entry point (a Ctrl-C while cli.py loads), the child process
    # of `nprof capture -- python script.py` (its own main: a script's exit message, as Python prints it)
    # and the progress bar (drawn on stderr only when it is a terminal).
    "src/nprof/cli.py",
    "src/nprof/__main__.py",
    "src/nprof/capture/torch_boot.py",
    "src/nprof/progress.py",
)


def printing(path: Path, root: Path = ROOT) -> list[str]:
    """'file:line what' for every `print(...)` call and every use of sys.stdout / sys.stderr in `path`."""
    found = []
    rel = path.relative_to(root).as_posix()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append(f"{rel}:{node.lineno} print")
        elif isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr", "__stdout__", "__stderr__"):
            if isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"{rel}:{node.lineno} sys.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            for alias in node.names:
                if alias.name in ("stdout", "stderr"):
                    found.append(f"{rel}:{node.lineno} sys.{alias.name}")
    return found


def _checked(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return not any(fnmatch(rel, pattern) for pattern in ALLOWED)


def test_library_code_does_not_print() -> None:
    files = [p for p in sorted((ROOT / "src" / "nprof").rglob("*.py")) if _checked(p)]
    found = [hit for p in files for hit in printing(p)]
    assert found == [], "return the text in an Outcome and let nprof.cli print it"


def test_every_allowed_path_still_exists() -> None:
    stale = [pattern for pattern in ALLOWED if not list(ROOT.glob(pattern))]
    assert stale == [], "gone: remove these from ALLOWED"


def test_the_check_can_fail(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import sys\nfrom sys import stderr\n"
        "def f(out):\n    print('x')\n    sys.stdout.write('y')\n    (out or sys.stderr).write('z')\n"
        "    out.write('fine')\n    log.print = 1\n"
    )
    assert printing(src, tmp_path) == [
        "m.py:2 sys.stderr",
        "m.py:4 print",
        "m.py:5 sys.stdout",
        "m.py:6 sys.stderr",
    ]
