"""The compiled step of the pending-DMA series: one window's merge of transfer starts and ends in one loop.

Contract: `window_steps(starts, ends, base, previous, has_previous)` takes the sorted start and end times
falling in one time window (`nprof.analysis.counters.pending_dma_chunks`), the transfers in flight before
it (`base`) and the last value already emitted (`previous`, when `has_previous`), and returns `(ts, value)`:
the instants where the count of transfers in flight changes, each with the count after every change at that
instant, without instants repeating the value before them. Exactly what the numpy window body computes
(merge by a stable sort, cumulative sum, last change per instant, repeats dropped); tests hold it to that.
numba: see `nprof.device.core` (wheels, on-disk cache); loaded only for big series or once already loaded.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def window_steps(starts, ends, base, previous, has_previous):  # type: ignore[no-untyped-def]
    """See the module doc (int64 starts and ends, each ascending)."""
    n_s, n_e = starts.size, ends.size
    out_ts = np.empty(n_s + n_e, np.int64)
    out_v = np.empty(n_s + n_e, np.float64)
    i = j = k = 0
    count = base
    last = previous
    have = has_previous
    while i < n_s or j < n_e:
        if j >= n_e or (i < n_s and starts[i] <= ends[j]):
            t = starts[i]
            count += 1
            i += 1
        else:
            t = ends[j]
            count -= 1
            j += 1
        if (i < n_s and starts[i] == t) or (j < n_e and ends[j] == t):
            continue  # more changes at this instant: only the count after the last one is a step
        value = float(count)
        if not have or value != last:
            out_ts[k] = t
            out_v[k] = value
            k += 1
        last = value
        have = True
    return out_ts[:k], out_v[:k]
