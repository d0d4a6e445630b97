"""The pipeline's import order holds: a package imports only packages earlier in the pipeline.

Every `import nprof.x` / `from nprof.x import ...` in src/nprof, at module level or inside a
function, is checked against `LAYERS` (docs/architecture.md). Modules of the same package
may import each other freely; the shared base modules may be imported by anyone.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nprof"

# Shared by every stage: errors, atomic writes, the ZIP container, progress bars, command lines, outcomes,
# the choice of compiled cores.
BASE = {"errors", "atomic", "container", "progress", "commandline", "outcome", "compiled", "compiled_cache", "gcpause",
        "__version__"}

# Pipeline order (docs/architecture.md): a package may import only packages with a lower rank.
LAYERS = {
    "arch": 1,
    "program": 2,
    "profile": 2,
    "device": 3,
    "nki": 4,
    "compiler": 5,
    "capture": 6,
    "analysis": 7,
    "store": 8,
    "dataset": 8,
    "export": 9,
    "web": 10,
    "torch": 11,
    "cli_parser": 11,
    "cli": 12,
    "__main__": 13,
    "__init__": 0,
}


def _package_of(module: str) -> str:
    """'nprof.device.plan' -> 'device'; 'nprof' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imported_modules(node: ast.AST) -> list[str]:
    """Absolute nprof module names one import statement brings in."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("nprof")]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "nprof":
            return [f"nprof.{a.name}" for a in node.names]
        if node.module.startswith("nprof."):
            return [node.module]
    return []


def layering_violations(src: Path = SRC) -> list[str]:
    """Every import in `src` that goes against `LAYERS`, as 'file:line: a -> b'."""
    found = []
    for path in sorted(src.rglob("*.py")):
        module = ".".join(path.relative_to(src.parent).with_suffix("").parts)
        mine = _package_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _imported_modules(node):
                theirs = _package_of(target)
                if theirs == mine or theirs in BASE:
                    continue
                if theirs not in LAYERS or mine not in LAYERS or LAYERS[theirs] >= LAYERS[mine]:
                    found.append(f"{path.relative_to(src)}:{node.lineno}: {mine} -> {theirs}")
    return found


def test_every_package_has_a_layer() -> None:
    """A new package must be placed in the pipeline before it can be imported."""
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py")}
    assert packages | modules <= set(LAYERS) | BASE


def test_imports_follow_the_pipeline() -> None:
    assert layering_violations() == []


def test_the_check_catches_a_backward_import(tmp_path: Path) -> None:
    """A store module imported from the device stage, even inside a function, is reported."""
    pkg = tmp_path / "nprof"
    (pkg / "device").mkdir(parents=True)
    (pkg / "device" / "bad.py").write_text("def f():\n    from nprof.store import ingest\n")
    assert layering_violations(pkg) == ["device/bad.py:2: device -> store"]
