"""No private name (`_x`) is imported from another nprof module: a module's underscore names are its own.

A name several modules need is made public (or moved to a small helper module). ALLOWED lists the
imports not paid off yet; it is empty and must stay so.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (importing file, module imported from, private name): each one would be a debt to pay, not a precedent.
ALLOWED: set[tuple[str, str, str]] = set()


def _module_of(path: Path, root: Path) -> str:
    """The dotted module name of a file under root/src (tests get their path, which never matches)."""
    rel = path.relative_to(root)
    parts = rel.with_suffix("").parts
    parts = parts[1:] if parts[0] == "src" else parts
    return ".".join(p for p in parts if p != "__init__")


def private_imports(path: Path, root: Path = ROOT) -> list[tuple[str, str, str]]:
    """The (file, module, name) of every `from nprof.m import _name` in `path` with m another module,
    at any depth (imports inside functions count)."""
    here = _module_of(path, root)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("nprof"):
            continue
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and node.module != here:
                out.append((path.relative_to(root).as_posix(), node.module or "", alias.name))
    return out


def _all_private_imports() -> set[tuple[str, str, str]]:
    files = [p for d in ("src", "tests", "bench", "examples") for p in (ROOT / d).rglob("*.py")]
    return {hit for p in files for hit in private_imports(p)}


def test_no_private_name_is_imported_across_modules() -> None:
    found = _all_private_imports()
    assert sorted(found - ALLOWED) == [], "import a public name instead (make it public or add a helper module)"


def test_the_allow_list_only_names_imports_that_still_exist() -> None:
    assert sorted(ALLOWED - _all_private_imports()) == [], "paid off: remove these from ALLOWED"


def test_the_check_can_fail(tmp_path: Path) -> None:
    mod = tmp_path / "src" / "nprof" / "store" / "explore.py"
    mod.parent.mkdir(parents=True)
    mod.write_text("from nprof.store import _own\ndef f():\n    from nprof.store.ingest import _secret, public\n")
    assert private_imports(mod, tmp_path) == [
        ("src/nprof/store/explore.py", "nprof.store", "_own"),  # a package's names are not its modules'
        ("src/nprof/store/explore.py", "nprof.store.ingest", "_secret"),  # inside a function counts too
    ]
    own = tmp_path / "src" / "nprof" / "store" / "__init__.py"
    own.write_text("from nprof.store import _own\n")
    assert private_imports(own, tmp_path) == []  # a module's own names are its business
