"""`nisa.dropout` / `nl.dropout`: zero each element with a drop probability (AWS NKI 2.26 API reference).

Semantics: an element is replaced by 0 with probability `prob` (nisa; a scalar or a [P, 1] tile, one
probability per partition) or `rate` (nl; a scalar or a one-element tile); kept elements are not rescaled
(the reference says "replace ... with zeros", nothing more). `dtype` casts the output, `mask` narrows it.

Model, like `nl.rand`: the uniform draws are made at trace time from the kernel's seeded generator
(`nl.random_seed`) and DMA'd in as a Program constant (deterministic values, the cost of one DMA; the
hardware draws other numbers of the same distribution on-chip). With a scalar probability the keep-mask
itself is the constant and the dropout is one VectorE multiply (the reference's cost: max(MIN_II, N)
VectorE cycles); with a tile of probabilities the comparison is one more VectorE instruction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor


def _uniform(shape: tuple[int, ...]) -> np.ndarray:
    from nprof.nki.language_ext import kernel_rng

    return kernel_rng().random(shape, dtype=np.float32)


def _constant(values: np.ndarray, hint: str) -> NkiTensor:
    import nprof.nki.language as nl

    builder = _trace.current()
    src = builder.hbm_tensor(builder.unique_name(hint), values.shape, "float32", kind="weight", value=values)
    return nl.load(src)


def dropout_tile(data: Any, prob: Any, dtype: Any, mask: Any, what: str, out: Any = None) -> NkiTensor:
    """`data` with each element zeroed with probability `prob` (see module doc), into a new tile or `out`."""
    x = _c.tile(data, "data")
    u = _uniform(x.shape)
    dt = _c.dname(dtype) if dtype is not None else x.dtype_name
    if _c.is_scalar(prob):
        p = float(prob)
        keep = _constant((u >= p).astype(np.float32), "dropout_keep")
        return _c.tensor_tensor(x, keep, "multiply", dtype=dt, mask=mask, out=out)
    pt = _c.tile(prob, "prob")
    if pt.shape[0] not in (1, x.shape[0]) or any(s != 1 for s in pt.shape[1:]):
        raise kernel_error(f"{what}: prob must be a scalar or a [{x.shape[0]}, 1] tile, got {pt.shape}")
    if pt.shape[0] != x.shape[0]:
        pt = _c.broadcast_operand(pt if pt.ndim == 2 else pt.pad_free(2), (x.shape[0], 1))
    keep = _c.tensor_scalar(_constant(u, "dropout_uniform"), "is_ge", pt, dtype="float32", mask=mask)
    return _c.tensor_tensor(x, keep, "multiply", dtype=dt, mask=mask, out=out)
