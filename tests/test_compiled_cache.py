"""numba's on-disk cache of nprof's compiled cores notices edits to the modules a core inlines (nprof.compiled_cache).

A throwaway package in a temp dir has `helper.py` (a compiled function and a constant) and `core.py` (a compiled
function calling the helper, so numba inlines it); `plain.py` is the same as `core.py` compiled with
`numba.njit(cache=True)`, numba's own cache. Each step runs in a fresh process (the cache is on disk): the first
compiles and stores, the second loads from the cache, then an edit to helper.py must change `core`'s result on
the next run while `plain` keeps the stale one (which shows the setup can see staleness at all).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

SRC = Path(__file__).resolve().parents[1] / "src"
HELPER = """
from nprof.compiled import njit

SCALE = {scale}


@njit(nogil=True)
def scaled(x):
    return x * SCALE
"""
CORE = """
from {decorator_module} import njit

from inlinedpkg.helper import scaled


@njit({options})
def run(x):
    return scaled(x) + 1
"""
PROBE = """
import json
from inlinedpkg import core, plain
out = {"core": int(core.run(3)), "plain": int(plain.run(3))}
out["hits"] = sum(core.run.stats.cache_hits.values()) + sum(plain.run.stats.cache_hits.values())
print(json.dumps(out))
"""


def _probe(root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{SRC}", "NUMBA_CACHE_DIR": str(root / "cache")}
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _write_package(root: Path, scale: int) -> None:
    pkg = root / "inlinedpkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text(HELPER.format(scale=scale))
    (pkg / "core.py").write_text(CORE.format(decorator_module="nprof.compiled", options="nogil=True"))
    (pkg / "plain.py").write_text(CORE.format(decorator_module="numba", options="cache=True, nogil=True"))


def test_edit_to_an_inlined_module_recompiles(tmp_path: Path) -> None:
    _write_package(tmp_path, scale=2)
    first = _probe(tmp_path)
    assert (first["core"], first["plain"], first["hits"]) == (7, 7, 0)  # compiled, stored
    again = _probe(tmp_path)
    assert (again["core"], again["plain"], again["hits"]) == (7, 7, 2)  # both loaded from the on-disk cache
    (tmp_path / "inlinedpkg" / "helper.py").write_text(HELPER.format(scale=5))
    edited = _probe(tmp_path)
    assert edited["core"] == 16  # recompiled: helper's edit is seen
    assert edited["plain"] == 7  # numba's own key misses the edit (the staleness this guards against)
    assert _probe(tmp_path)["core"] == 16


def test_sources_digest_covers_the_inlined_modules() -> None:
    from nprof import compiled_cache

    assert {"nprof.nki.depcore", "nprof.nki.depregions"} <= set(compiled_cache.imported_sources("nprof.nki.depcore"))
    batch = set(compiled_cache.imported_sources("nprof.nki.depbatch"))
    assert {"nprof.nki.depbatch", "nprof.nki.depcore", "nprof.nki.depregions", "nprof.arch.isa"} <= batch
    assert "nprof.nki" not in batch  # (`from nprof.nki import depcore` names the submodule, not the package)


def test_cores_that_import_nprof_modules_use_the_tracked_decorator() -> None:
    """A module compiled with numba's own `njit(cache=True)` is keyed by its own file only: it must not import
    another nprof module (whose functions or constants numba would inline); such cores use `nprof.compiled.njit`."""
    import ast

    offenders = []
    for path in sorted(SRC.joinpath("nprof").rglob("*.py")):
        tree = ast.parse(path.read_text())
        plain = any(isinstance(n, ast.ImportFrom) and n.module == "numba" and any(a.name == "njit" for a in n.names)
                    for n in ast.walk(tree))  # fmt: skip
        nprof_imports = [n for n in ast.walk(tree) if (isinstance(n, ast.ImportFrom) and (n.module or "").startswith(
            "nprof")) or (isinstance(n, ast.Import) and any(a.name.startswith("nprof") for a in n.names))]  # fmt: skip
        if plain and nprof_imports:
            offenders.append(str(path.relative_to(SRC)))
    assert offenders == []
