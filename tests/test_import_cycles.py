"""No import-time cycle between nprof modules: a module's top-level imports (outside `if TYPE_CHECKING:`)
never lead back to it. A registry that needs every registering module imports them from a front module
(`nprof.compiler.lowerings`), not from the registry itself.

ALLOWED lists the cycles not broken yet; it must only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# nki.language re-exports the rest of the 2.26 language from language_ext, which builds on language.
ALLOWED = {("nprof.nki.language", "nprof.nki.language_ext")}


def _modules(src: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under src/nprof (a package is its __init__)."""
    out = {}
    for path in (src / "nprof").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _top_level_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The nprof modules `path` imports when it is imported (`from pkg import mod` names the module)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.If | ast.Try):
                visit(node.body + node.orelse + [s for h in getattr(node, "handlers", []) for s in h.body])
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                             for a in node.names)  # fmt: skip

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m in modules}


def import_cycles(src: Path = SRC) -> set[tuple[str, ...]]:
    """Every strongly connected group of two or more modules in the top-level import graph, sorted."""
    modules = _modules(src)
    graph = {m: _top_level_imports(p, modules) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: set[tuple[str, ...]] = set()

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.add(tuple(sorted(group)))

    for v in graph:
        if v not in index:
            connect(v)
    return cycles


def test_no_import_cycle() -> None:
    assert sorted(import_cycles() - ALLOWED) == [], "break the cycle (a front module, or a lazy import)"


def test_the_allow_list_only_names_cycles_that_still_exist() -> None:
    assert sorted(ALLOWED - import_cycles()) == [], "broken: remove these from ALLOWED"


def test_the_check_can_fail(tmp_path: Path) -> None:
    pkg = tmp_path / "nprof" / "reg"
    pkg.mkdir(parents=True)
    (tmp_path / "nprof" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "table.py").write_text("TABLE = {}\nfrom nprof.reg import extra\n")
    (pkg / "extra.py").write_text("from nprof.reg.table import TABLE\nfrom nprof.reg import typed\n")
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nprof.reg import extra\n"
    (pkg / "typed.py").write_text(typed)  # a type-only import back is no cycle
    assert import_cycles(tmp_path) == {("nprof.reg.extra", "nprof.reg.table")}
