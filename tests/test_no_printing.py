"""Library code never prints: outside cli.py, no module of src/nprof calls `print` or touches
`sys.stdout` / `sys.stderr`.

A command's handler returns an `nprof.outcome.Outcome` (text for stdout, lines for stderr, exit code)
and `nprof.cli` prints it. ALLOWED lists the files not checked and NKI_API the functions that print
because NKI's own API prints there; neither is a precedent for anything else.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ALLOWED = (
    # The front door itself, the entry point (a Ctrl-C while cli.py loads), the child process of
    # `nprof capture -- python script.py` (its own main: a script's exit message, as Python prints it)
    # and the progress bar (drawn on stderr only when it is a terminal).
    "src/nprof/cli.py",
    "src/nprof/__main__.py",
    "src/nprof/capture/torch_boot.py",
    "src/nprof/progress.py",
)

# (file, function): where the library prints because the NKI API it reproduces prints to the user's
# stdout: `nki.benchmark`'s latency table and profile path, and the values `nl.device_print` captured.
NKI_API = {
    ("src/nprof/nki/decorators.py", "_Benchmarked.__call__"),
    ("src/nprof/nki/kernel.py", "_device_prints"),
}


def printing(path: Path, root: Path = ROOT) -> list[str]:
    """'file:line what' for every `print(...)` call and every use of sys.stdout / sys.stderr in `path`."""
    return [hit for hit, _ in _printing_in(path, root)]


def _printing_in(path: Path, root: Path) -> list[tuple[str, str]]:
    """('file:line what', qualified name of the enclosing function or '') for each printing of `path`."""
    rel = path.relative_to(root).as_posix()
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            where = f"{where}.{node.name}" if where else node.name
        what = _what(node)
        if what:
            found.append((f"{rel}:{getattr(node, 'lineno', 0)} {what}", where))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(path.read_text(), str(path)), "")
    return sorted(found, key=lambda hit: int(hit[0].split(":")[1].split()[0]))


def _what(node: ast.AST) -> str:
    """'print' or 'sys.stdout'/'sys.stderr' when `node` prints or touches a standard stream, else ''."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
        return "print"
    streams = ("stdout", "stderr", "__stdout__", "__stderr__")
    if isinstance(node, ast.Attribute) and node.attr in streams and isinstance(node.value, ast.Name):
        return f"sys.{node.attr}" if node.value.id == "sys" else ""
    if isinstance(node, ast.ImportFrom) and node.module == "sys":
        names = [a.name for a in node.names if a.name in ("stdout", "stderr")]
        return ", ".join(f"sys.{n}" for n in names)
    return ""


def _checked(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return not any(fnmatch(rel, pattern) for pattern in ALLOWED)


def test_library_code_does_not_print() -> None:
    files = [p for p in sorted((ROOT / "src" / "nprof").rglob("*.py")) if _checked(p)]
    found = [hit for p in files for hit, where in _printing_in(p, ROOT) if (_rel(p), where) not in NKI_API]
    assert found == [], "return the text in an Outcome and let nprof.cli print it"


def test_every_allowed_path_still_exists() -> None:
    stale = [pattern for pattern in ALLOWED if not list(ROOT.glob(pattern))]
    assert stale == [], "gone: remove these from ALLOWED"


def test_every_nki_api_function_still_prints() -> None:
    printers = {(rel, where) for rel, _ in NKI_API for _, where in _printing_in(ROOT / rel, ROOT)}
    assert sorted(NKI_API - printers) == [], "no longer prints: remove these from NKI_API"


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


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
    assert [where for _, where in _printing_in(src, tmp_path)] == ["", "f", "f", "f"]
