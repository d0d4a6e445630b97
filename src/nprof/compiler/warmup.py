"""Compile (or load from numba's on-disk cache) every compiled core a torch.compile run uses, before that run.

Contract: `warm_cores()` runs, in this order, the NKI tracer's dependency core (`nki.deps.DepTracker`:
`nki.depcore`, `depbatch`, `alloc_batch`), the dependency reduction (`compiler.depreduce`) and the device
scheduler's two passes (`device.schedule.warm_core`), each with the one signature the compiler and the simulator
call it with (they hand the cores C-contiguous, writable arrays of fixed dtypes: tests/compiler/test_warmup.py
holds each entry point to one signature over the zoo's graphs), and returns per core its CPU seconds and how many
signatures numba compiled rather than loaded (0: every one came from the cache). Without numba it does nothing
and returns an empty list (the pure-Python passes need no warming).

Why: numba compiles a core on its first call in a process whose on-disk cache (`__pycache__` beside the
sources, or NUMBA_CACHE_DIR) lacks it: after a fresh clone, an install, or an edit of the core's sources. That
cost 35-44 s CPU for the dependency core and ~6 s for the other two (resnet18 bench, this project's 2-core
machine); a user's first torch.compile would otherwise pay the other two (~9 s when the scheduler also compiled a
second, read-only signature). numba 0.68 stamps its cache by the sources' content, so new mtimes alone (a fresh
clone's) keep it valid; a new checkout has its own, empty `__pycache__`. scripts/setup.sh runs this once;
bench/compile.py too, so its first steps compare across runs and show any core this list misses.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import Any


def _dep_core() -> list[Any]:
    """Warm the NKI dependency core; its entry points (numba dispatchers)."""
    from nprof.nki import alloc_batch, depbatch, depcore
    from nprof.nki.deps import DepTracker

    DepTracker(capacity=16)
    return [depcore.record, depcore.last_writer, depcore.rehash, depbatch.run, alloc_batch.run]


def _dep_reduction() -> list[Any]:
    """Warm `compiler.depreduce`; its entry point."""
    import numpy as np

    from nprof.compiler import depreduce

    depreduce.reduced_deps(np.zeros(2, np.int64), np.zeros(0, np.int64))
    return [depreduce._reduce]


def _scheduler() -> list[Any]:
    """Warm the device scheduler's passes; their entry points."""
    from nprof.device import core, schedule

    schedule.warm_core()
    return [core.list_pass, core.wait_graph, core.event_pass]


CORES: tuple[tuple[str, Callable[[], list[Any]]], ...] = (
    ("dependency core (nki.depcore, depbatch, alloc_batch)", _dep_core),
    ("dependency reduction (compiler.depreduce)", _dep_reduction),
    ("device scheduler (device.core)", _scheduler),
)


def warm_cores() -> list[tuple[str, float, int]]:
    """(core, CPU seconds, signatures compiled rather than loaded) for each of `CORES` (module doc)."""
    if importlib.util.find_spec("numba") is None:
        return []
    done = []
    for label, warm in CORES:
        cpu = time.process_time()
        entries = warm()
        compiled = sum(sum(f.stats.cache_misses.values()) for f in entries)  # numba's own count
        done.append((label, time.process_time() - cpu, compiled))
    return done


def entry_points() -> list[Any]:
    """The numba dispatchers `warm_cores` warms (after it ran), for tests counting their signatures."""
    return [f for _, warm in CORES for f in warm()]
