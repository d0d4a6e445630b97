"""Broadcasting a [1, F] row across partitions when F exceeds one TensorE pass.

The engines have no cross-partition path except TensorE, where `ones[1, P].T @
row[1, F]` writes the row on every output partition; one matmul moves at most
`gemm_moving_fmax` (512) columns into one PSUM bank (AWS NKI docs,
"nki.language.tile_size"). A wider row (layernorm's gamma at C = 8192) is
broadcast in chunks of that width, each matmul result copied out of PSUM into
one [P, F] fp32 SBUF tile — a PSUM tile cannot hold more than one bank per
partition, and eight banks would not hold 8192 fp32 anyway.
"""

from __future__ import annotations

from nprof.arch.isa import Space
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor


def wide_partition_broadcast(row: NkiTensor, parts: int) -> NkiTensor:
    """An fp32 SBUF tile [parts, F...] holding `row` ([1, F...], F > gemm_moving_fmax) on every partition."""
    from nprof.nki import compute

    builder = trace.current()
    free = row.shape[1:]
    flat = row.flatten_free()
    if flat is None:
        flat = compute.copy(row).flatten_free()
    assert flat is not None
    n = flat.shape[1]
    res = builder.alloc((parts, n), "float32", Space.SBUF)
    step = builder.preset.gemm_moving_fmax
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        chunk = compute.partition_broadcast(flat[:, lo:hi], parts)
        compute.copy(chunk, out=res[:, lo:hi])
    return res.unflatten_free(free)
