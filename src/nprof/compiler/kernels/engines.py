"""Copies spread over the engines that can run them: VectorE and ScalarE take turns.

Contract: `copy(src)` is `nisa.tensor_copy(src)` on the engine the compiler's builder hands out next
(`nprof.compiler.fusion.FusingBuilder.next_copy_engine`: VectorE, ScalarE, VectorE, ...; VectorE under any
other builder). A kernel whose PSUM evacuations and transposed-operand copies all queue on VectorE keeps
ScalarE idle while TensorE waits for them; alternating lets consecutive copies run side by side. Numerics are
unchanged (a copy is a copy on either engine; the NKI API allows tensor_copy on VectorE, ScalarE or GpSimdE).
"""

from __future__ import annotations

from typing import Any

from nprof.nki import isa as nisa
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor


def copy(src: Any, dtype: Any = None, dst: Any = None) -> NkiTensor:
    """`nisa.tensor_copy(src, dtype=dtype, dst=dst)` on the next copy engine (see module doc). Give `dst` (a view
    of an existing tile) rather than assigning the result (`t[...] = copy(x)` is two copies: into a new tile,
    then into t)."""
    pick = getattr(trace.current(), "next_copy_engine", None)
    return nisa.tensor_copy(src, dtype=dtype, dst=dst, engine=pick() if pick is not None else nisa.engine.unknown)
