"""Every lowering of the compiler, registered: the front of the op registry.

Contract: importing this module imports `nprof.compiler.ops` and each module that registers lowerings into
its `LOWERINGS` table (`ops_nn`, `ops_conv`, `ops_pool`, `ops_index`, `ops_attn`; `ops` itself registers the
collectives), so `LOWERINGS`, `lookup(target)` and `supported_ops()` here answer for every op. The `ops*`
modules import `ops` for the registry and its helpers, never the reverse: no import cycle.
"""

from __future__ import annotations

from nprof.compiler import ops_attn, ops_conv, ops_index, ops_nn, ops_pool
from nprof.compiler.ops import LOWERINGS, lookup, supported_ops

REGISTERING = (ops_attn, ops_conv, ops_index, ops_nn, ops_pool)
assert all(m.LOWERINGS is LOWERINGS for m in REGISTERING)

__all__ = ["LOWERINGS", "REGISTERING", "lookup", "supported_ops"]
