"""When to use a compiled (numba) core instead of its plain numpy/Python reference.

Contract: `load_compiled(name, n, compiled_from, loaded=...)` imports and returns the module `name` when
numba is installed and either `n >= compiled_from` or the module `loaded` (default `name` itself) is already
imported (its load cost is then paid); otherwise None, and the caller runs the reference, which gives the
same results (each core is held to its reference in the tests). Loading numba and a core costs about
0.5 s CPU once per process, which is why small inputs skip it.

`run_detached(fn)` runs `fn` on a fresh thread and waits: a numba function's first call (compiling it) keeps
the tracebacks of the typing failures it met for the whole process (numba's typing context caches them), and a
traceback's frames reach, through `f_back`, every frame of the calling stack, which then outlive their calls
with all their local variables. Compiling on a thread of its own leaves the caller's frames out of that chain.

`njit(**options)` is `numba.njit(cache=True, **options)` for nprof's compiled cores, with the on-disk cache keyed
by the source of every nprof module the function's module imports (`nprof.compiled_cache`): numba's own key
covers only the function's file, so an edit to a module inlined into it would otherwise load stale code.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any


def load_compiled(name: str, n: int, compiled_from: int, loaded: str | None = None) -> ModuleType | None:
    """The compiled module `name` for `n` items, or None (see module doc)."""
    if (loaded or name) not in sys.modules and n < compiled_from:
        return None
    if importlib.util.find_spec("numba") is None:
        return None
    return importlib.import_module(name)


def run_detached(fn: Callable[[], None]) -> None:
    """Call `fn()` on a new thread and wait for it; its exception, if any, is raised here (see module doc)."""
    failed: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as err:  # handed to the caller's thread
            failed.append(err)

    thread = threading.Thread(target=body, name="nprof-compile", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """A decorator compiling with numba, cached on disk by the sources the function may inline (see module doc)."""
    import numba

    from nprof import compiled_cache

    def wrap(fn: Callable[..., Any]) -> Any:
        compiled_cache.track(fn.__module__)
        return numba.njit(cache=compiled_cache.caching_enabled(), **options)(fn)

    return wrap
