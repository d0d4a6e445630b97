"""The compiled base level of a LOD pyramid: `lod.bucketize(..., keep_per_op=True)` as one numba loop.

Contract: `base_buckets(ts, dur, local, nbytes, flops, width, nb, cols)` aggregates one row's events
(origin 0) into `nb` buckets of `width` ns exactly as `nprof.store.lod.bucketize` does, with opcodes
already mapped to per-op columns `local` in [0, cols) (`lod.op_columns`). It returns
`(busy int64, count int64, nbytes float64, flops float64, per_op float64 (nb, cols))`. busy, count and
per_op are exact (integer ns, and per_op holds integers and halves, exact in float64), so the dominant
opcode picked from them is the reference's; nbytes/flops are the same prorated sums added in the same order
(bit-identical). tests/store/test_lod_core.py holds every output to `bucketize` on random rows.

`bucket_peaks(s_ts, s_rate, e_ts, e_rate, width, nb)` is `lod.peaks` after its sort: the starts and the ends
(origin subtracted, events of positive duration only) each in time order with their fixed-point rates; one
merge of the two runs gives, per bucket, the most events in flight at one instant and the highest summed rate
(int64, before the division by RATE_ONE): the same integers as the numpy steps (integer sums: exact).

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
def _prorated(single, first, last, plus, minus, width):  # type: ignore[no-untyped-def]
    """bytes or FLOPs per bucket, added in the order `bucketize` adds them (same float result)."""
    out = single + (first + last)
    run = 0.0
    for k in range(out.size):
        run += plus[k] - minus[k]
        out[k] += run * float(width)
    return out


@njit(cache=True, nogil=True)
def base_buckets(  # type: ignore[no-untyped-def]
    ts, dur, local, nbytes, flops, width, nb, cols
):
    """See the module doc (arrays: int64 ts, dur, local; float64 nbytes, flops). Each float sum has its own
    accumulator, filled in event order like numpy's bincount, so nbytes and flops are bit-identical too."""
    total = nb * width
    busy = np.zeros(nb, np.int64)
    count = np.zeros(nb, np.int64)
    acc = np.zeros((10, nb + 1))  # bytes, flops x (single, first, last, plus, minus)
    mat = np.zeros((nb, cols))
    d_busy = np.zeros(nb + 1, np.int64)
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
        full = float(max(e - s, 1))
        for j, amount in ((0, nbytes[i]), (5, flops[i])):
            rate = 0.0 if zero else amount / full
            if kb == ke:
                acc[j, kb] += amount if zero else rate * dc
            else:
                acc[j + 1, kb] += rate * float((kb + 1) * width - sc)
                acc[j + 2, ke] += rate * float(ec - ke * width)
                acc[j + 3, kb + 1] += rate
                acc[j + 4, ke] += rate
        if kb == ke:
            busy[kb] += dc
            mat[kb, c] += dc + 0.5
            continue
        first = (kb + 1) * width - sc
        last = ec - ke * width
        busy[kb] += first
        busy[ke] += last
        d_busy[kb + 1] += 1
        d_busy[ke] -= 1
        mat[kb, c] += 0.5 + first
        mat[ke, c] += last
        d_op[kb + 1, c] += 1
        d_op[ke, c] -= 1
    run_busy = 0
    run_op = np.zeros(cols, np.int64)
    for k in range(nb):
        run_busy += d_busy[k]
        busy[k] += run_busy * width
        for c in range(cols):
            run_op[c] += d_op[k, c]
            mat[k, c] += run_op[c] * width
    out_b = _prorated(acc[0, :nb], acc[1, :nb], acc[2, :nb], acc[3], acc[4], width)
    out_f = _prorated(acc[5, :nb], acc[6, :nb], acc[7, :nb], acc[8], acc[9], width)
    return busy, count, out_b, out_f, mat


@njit(cache=True, nogil=True)
def bucket_peaks(s_ts, s_rate, e_ts, e_rate, width, nb):  # type: ignore[no-untyped-def]
    """See the module doc. A change point at t applies every start and end at t before it is read; a
    bucket starts with the value holding at its first instant, then takes the max of the values after each
    change point inside it."""
    peak = np.zeros(nb, np.int64)
    peak_rate = np.zeros(nb, np.int64)
    count = 0
    rate = 0
    i = 0
    j = 0
    nxt = 0  # the first bucket whose starting value is not set yet
    total = nb * width
    while i < s_ts.size or j < e_ts.size:
        t = e_ts[j] if i >= s_ts.size or (j < e_ts.size and e_ts[j] < s_ts[i]) else s_ts[i]
        while nxt < nb and nxt * width < t:  # buckets starting before t hold the value before it
            peak[nxt] = count
            peak_rate[nxt] = rate
            nxt += 1
        while i < s_ts.size and s_ts[i] == t:
            count += 1
            rate += s_rate[i]
            i += 1
        while j < e_ts.size and e_ts[j] == t:
            count -= 1
            rate -= e_rate[j]
            j += 1
        if 0 <= t < total:
            k = t // width
            if nxt <= k:  # the bucket starts exactly at t, or this is its first value
                peak[k] = count
                peak_rate[k] = rate
                nxt = k + 1
            else:
                peak[k] = max(peak[k], count)
                peak_rate[k] = max(peak_rate[k], rate)
    while nxt < nb:
        peak[nxt] = count
        peak_rate[nxt] = rate
        nxt += 1
    return peak, peak_rate
