"""numba's on-disk cache keyed by the source of every module a compiled function may inline.

numba's cache (`cache=True`) stamps a function's cache index with a hash of the function's own source file only.
A compiled function that calls a compiled function of another module compiles the callee into itself, and reads
the globals it takes from other modules (constants, enum values) as compile-time constants. Editing such a
module left the caller's stamp unchanged, so numba loaded the stale machine code: a silent wrong result (e.g. an
edit to `nprof.nki.depregions` while `nprof.nki.depcore`'s cached core kept the old layout).

Contract: functions compiled through `nprof.compiled.njit` (which imports this module and calls `track` before
numba sees the function) are cached by `SourcesLocator`: the same cache directory numba would choose (its own
locators, in their order: NUMBA_CACHE_DIR, the source's __pycache__, the user-wide cache), and as stamp the pair
(numba's own stamp of the function's file, `sources_digest(module)`): a SHA-256 of the source text of the
function's module and of every module it imports, transitively, within the same top-level package (module-level
and function-level imports; `from pkg import sub` counts the submodule `pkg.sub`, not the package `pkg`). Any
edit to one of those files changes the stamp, and numba then treats the index as empty and compiles afresh. An
unchanged tree keeps hitting the cache (scripts/setup.sh's warm-up). Modules outside the tracked set use numba's
locators unchanged. When NUMBA_CACHE_LOCATOR_CLASSES overrides numba's locator list, `caching_enabled()` is
False and `nprof.compiled.njit` compiles without the on-disk cache (correct, slower) rather than risk a stale one;
likewise on a numba without the locator list (`CacheImpl._locator_classes`; `_CacheImpl` in older numbas).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from numba.core import caching, config

# numba's cache implementation class (`_CacheImpl` in older numbas); None: no on-disk cache (see module doc)
_IMPL: Any = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
_TRACKED: set[str] = set()  # modules whose compiled functions SourcesLocator stamps
_IMPORTS: dict[str, set[str]] = {}  # module -> `_imports`
_DIGESTS: dict[str, str] = {}  # module -> sources_digest, once per process (numba stamps once per function too)


def track(module: str) -> None:
    """Stamp the cache of `module`'s compiled functions with `sources_digest` (installs `SourcesLocator`)."""
    if _IMPL is not None and SourcesLocator not in _IMPL._locator_classes:
        _IMPL._locator_classes.insert(0, SourcesLocator)
    _TRACKED.add(module)


def caching_enabled() -> bool:
    """False when NUMBA_CACHE_LOCATOR_CLASSES replaces numba's locator list (SourcesLocator would be bypassed) or
    this numba has no locator list where it is looked for."""
    return _IMPL is not None and not getattr(config, "CACHE_LOCATOR_CLASSES", "")  # (newer numbas read it)


def _source_path(module: str) -> Path | None:
    """The .py file of `module`, found under its top-level package's directory without importing anything (None
    for a name that is no module file there, e.g. a function imported from a module)."""
    parts = module.split(".")
    origin = getattr(sys.modules.get(parts[0]), "__file__", None)
    if not origin:
        return None
    base = Path(origin).parent.joinpath(*parts[1:])
    for path in ((base.parent / f"{base.name}.py") if len(parts) > 1 else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


def _imports(module: str, path: Path) -> set[str]:
    """The modules `path` (the source of `module`) imports within its top-level package (parsed once per process
    and module)."""
    hit = _IMPORTS.get(module)
    if hit is None:
        hit = _IMPORTS[module] = _parsed_imports(module, path)
    return hit


def _parsed_imports(module: str, path: Path) -> set[str]:
    """`_imports` read from the source."""
    root = module.split(".")[0]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else (
                node.module or "")  # fmt: skip
            if base.split(".")[0] == root:
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if _source_path(sub) is not None else base)
    return {name for name in found if name.split(".")[0] == root}


def imported_sources(module: str) -> dict[str, Path]:
    """`module` and every module it imports transitively within its top-level package, with their source files."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _source_path(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo.extend(_imports(name, path) - seen.keys())
    return seen


def sources_digest(module: str) -> str:
    """SHA-256 over the names and source texts of `imported_sources(module)` (computed once per process)."""
    digest = _DIGESTS.get(module)
    if digest is None:
        h = hashlib.sha256()
        for name, path in sorted(imported_sources(module).items()):
            h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        digest = _DIGESTS[module] = h.hexdigest()
    return digest


class SourcesLocator(caching._CacheLocator):
    """numba's own locator for the function, with `sources_digest` added to its source stamp (see module doc)."""

    def __init__(self, inner: Any, module: str) -> None:
        self._inner = inner
        self._module = module

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return str(self._inner.get_cache_path())

    def get_source_stamp(self) -> Any:
        return self._inner.get_source_stamp(), sources_digest(self._module)

    def get_disambiguator(self) -> str:
        return str(self._inner.get_disambiguator())

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> SourcesLocator | None:
        module = getattr(py_func, "__module__", None)
        if module not in _TRACKED:
            return None
        classes: list[Any] = _IMPL._locator_classes
        for locator_class in classes:
            if locator_class is not cls:
                inner = locator_class.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner, module)
        return None
