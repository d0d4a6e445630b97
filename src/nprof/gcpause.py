"""One context manager, `gc_paused()`, shared by every stage that builds millions of acyclic objects.

Contract: inside the block Python's cyclic garbage collector is off; on exit it is back in the state it was
in before (on if it was on), also when the block raises. Nesting is safe. Objects made inside are still freed
by reference counting; only the collector's repeated full passes over them (which made Chrome parsing 4-5x
slower, program tables and simulation tables slower, and cost 1.95 s of a resnet18 first compile) are skipped.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for the block (see module doc); restore its previous state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
