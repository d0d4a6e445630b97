"""The compiled base level of a LOD pyramid: `lod.bucketize(..., keep_per_op=True)` as one numba loop.

Contract: `base_buckets(ts, dur, local, nbytes, flops, width, nb, cols)` aggregates one row's events
(origin 0) into `nb` buckets of `width` ns exactly as `nprof.store.lod.bucketize` does, with opcodes
already mapped to per-op columns `local` in [0, cols) (`lod.op_columns`). It returns
`(busy int64, count int64, nbytes float64, flops float64, per_op float64 (nb, cols))`. busy, count and
per_op are exact (integer ns, and per_op holds integers and halves, exact in float64), so the dominant
opcode picked from them is the reference's; nbytes/flops are the same prorated sums added in another
order (equal to within float rounding). tests/store/test_lod_core.py holds it to `bucketize` on random rows.

One pass over the events instead of ~30 numpy passes with their temporaries: the events spanning many
buckets add their whole buckets through difference arrays (prefix-summed once), so the cost is linear in
events + buckets whatever the durations. numba: see `nprof.device.core` (wheels, on-disk cache);
`nprof.store.lod` imports this module only for rows of COMPILED_FROM events or more, when numba is there.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _clip(x: int, lo: int, hi: int) -> int:
    return lo if x < lo else (hi if x > hi else x)


@njit(cache=True, nogil=True)
def base_buckets(  # type: ignore[no-untyped-def]
    ts, dur, local, nbytes, flops, width, nb, cols
):
    """See the module doc (arrays: int64 ts, dur, local; float64 nbytes, flops)."""
    total = nb * width
    busy = np.zeros(nb, np.int64)
    count = np.zeros(nb, np.int64)
    out_b = np.zeros(nb)
    out_f = np.zeros(nb)
    mat = np.zeros((nb, cols))
    d_busy = np.zeros(nb + 1, np.int64)
    d_b = np.zeros(nb + 1)
    d_f = np.zeros(nb + 1)
    d_op = np.zeros((nb + 1, cols), np.int64)
    for i in range(ts.size):
        s = ts[i]
        e = s + dur[i]
        if not ((e > 0 and s < total) or (s >= 0 and s < total)):
            continue
        sc = min(_clip(s, 0, total), total - 1)
        ec = _clip(e, 0, total)
        dc = max(ec - sc, 0)
        kb = sc // width
        ke = (ec - 1) // width if ec > sc else kb
        ke = min(ke, nb - 1)
        c = local[i]
        count[kb] += 1
        zero = e == s
        rb = 0.0 if zero else nbytes[i] / max(e - s, 1)
        rf = 0.0 if zero else flops[i] / max(e - s, 1)
        if kb == ke:
            busy[kb] += dc
            out_b[kb] += nbytes[i] if zero else rb * dc
            out_f[kb] += flops[i] if zero else rf * dc
            mat[kb, c] += dc + 0.5
            continue
        first = (kb + 1) * width - sc
        last = ec - ke * width
        busy[kb] += first
        busy[ke] += last
        d_busy[kb + 1] += 1
        d_busy[ke] -= 1
        out_b[kb] += rb * first
        out_b[ke] += rb * last
        out_f[kb] += rf * first
        out_f[ke] += rf * last
        d_b[kb + 1] += rb
        d_b[ke] -= rb
        d_f[kb + 1] += rf
        d_f[ke] -= rf
        mat[kb, c] += 0.5 + first
        mat[ke, c] += last
        d_op[kb + 1, c] += 1
        d_op[ke, c] -= 1
    run_busy, run_b, run_f = 0, 0.0, 0.0
    run_op = np.zeros(cols, np.int64)
    for k in range(nb):
        run_busy += d_busy[k]
        run_b += d_b[k]
        run_f += d_f[k]
        busy[k] += run_busy * width
        out_b[k] += run_b * width
        out_f[k] += run_f * width
        for c in range(cols):
            run_op[c] += d_op[k, c]
            mat[k, c] += run_op[c] * width
    return busy, count, out_b, out_f, mat
