"""When to use a compiled (numba) core instead of its plain numpy/Python reference.

Contract: `load_compiled(name, n, compiled_from, loaded=...)` imports and returns the module `name` when
numba is installed and either `n >= compiled_from` or the module `loaded` (default `name` itself) is already
imported (its load cost is then paid); otherwise None, and the caller runs the reference, which gives the
same results (each core is held to its reference in the tests). Loading numba and a core costs about
0.5 s CPU once per process, which is why small inputs skip it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


def load_compiled(name: str, n: int, compiled_from: int, loaded: str | None = None) -> ModuleType | None:
    """The compiled module `name` for `n` items, or None (see module doc)."""
    if (loaded or name) not in sys.modules and n < compiled_from:
        return None
    if importlib.util.find_spec("numba") is None:
        return None
    return importlib.import_module(name)
