"""The device-side check that no convolution kernel turned a +-inf/NaN into NaN where eager does not.

Contract: the conv kernels (`nprof.compiler.kernels.conv*`) multiply zeros with input values (block-diagonal and
spread stationaries, zero padding of the input or the gradient, padding products a weight gradient sums), so an
inf or NaN in an input, gradient or weight makes NaN (0 x inf) at outputs eager keeps finite, or where eager
skips the padding products altogether. Every such stray NaN lands in a result of the kernel; a result with no
inf or NaN anywhere had no non-finite product and equals eager's. So every conv kernel evicts its results
(PSUM to SBUF, or its last on-chip copy) with `evict`: one VectorE TENSOR_SCALAR (``x * 1.0`` or ``x + bias``)
that also sums each row into a column of the builder's `conv_check` (a `regather_check.RegatherCheck` named
`CONV_CHECK_NAME`), in place of the copy it replaces (no extra pass over the data). A non-finite sum (a result
holding inf or NaN, or a finite sum that overflowed: a false alarm, never a missed one) makes the backend drop
that run and run the call's AOT graph eagerly with a warning naming the convolution
(`nprof.compiler.backend`): no lowering of these kernels is known to match eager's non-finite positions.
Without a `conv_check` on the builder (kernels traced outside the compiler) `evict` is the plain copy.
`check_kernel(v)`: the same check of results already stored (the im2col lowering's matmuls), by one more pass.
"""

from __future__ import annotations

import numpy as np

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels import engines
from nprof.compiler.regather_check import CONV_CHECK_NAME
from nprof.compiler.views import View
from nprof.nki import isa as nisa
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor

__all__ = ["CONV_CHECK_NAME", "check_kernel", "evict"]
P = 128


def evict(src: NkiTensor, dst: NkiTensor, col: NkiTensor | None = None) -> NkiTensor:
    """dst = src (+ the per-partition column `col` [P, 1] when given), its row sums checked by the builder's
    `conv_check` when it has one (else `engines.copy`, or a VectorE add of `col`)."""
    check = getattr(trace.current(), "conv_check", None)
    if check is None:
        if col is None:
            return engines.copy(src, dst=dst)
        return nisa.tensor_scalar(src, "add", col, dst=dst)
    return check.evacuate(src, dst) if col is None else check.evacuate(src, dst, "add", col)


CHUNK = 8192  # elements per partition of one checked load (32 KiB fp32)


def check_kernel(v: View, check_name: str = "conv_check") -> None:
    """The im2col lowering's results (`nprof.compiler.ops_conv`: matmuls through `kernels.matmul`, whose
    evictions are shared with every matmul) checked after the fact: the contiguous view `v` loaded in chunks
    (served from SBUF when the fusion cache still holds it) and each chunk's row sums written to a check
    column. An extra pass over the results, on that lowering only (non-fp32 operands, or tiles too large for
    the direct kernels). Nothing without a `conv_check` on the builder. `check_name`: the builder's check to
    write into instead (``"nonfinite_check"``: `regather_check.nonfinite_checked`)."""
    from nprof.compiler.kernels.hbm import load

    check = getattr(trace.current(), check_name, None)
    if check is None:
        return
    total = int(np.prod(v.shape))
    parts = max(d for d in range(1, P + 1) if total % d == 0)
    per = total // parts
    for e0 in range(0, per, CHUNK):
        et = min(CHUNK, per - e0)
        tile = load(Access(Space.HBM, v.tensor, v.dtype, v.offset + e0, parts, ((1, et),), 0, per), v.dtype)
        column = check.next_column()
        nisa.tensor_reduce("add", tile, axis=1, keepdims=True, dst=column[0:parts, :])
