"""Level-of-detail aggregation: events of one row -> time buckets, and bucket pyramids.

Contract:
* `bucketize(ts, dur, op, nbytes, flops, origin, width, nb)` splits the events of
  one row over `nb` buckets of `width` ns starting at `origin`. Each event's time is
  clipped to the buckets and attributed to every bucket it overlaps, so the sum of
  `busy` equals the events' total (clipped) duration exactly (integer ns). `count`
  counts events in the bucket where their (clipped) start falls. `nbytes`/`flops`
  are prorated by overlap (float). `op` is the dominant opcode: the one with the
  most busy time in the bucket (-1 for empty buckets).
* `row_pyramid(...)` builds every level from `base_level` up (bucket width
  2**level ns, level L+1 = pairs of level-L buckets summed, dominant opcode
  recomputed exactly from per-opcode sums) and yields the non-empty buckets of each
  level. The store keeps them in its `lod` table, sorted by (level, row, bucket). A row of
  COMPILED_FROM events or more gets its base level from the compiled loop of
  `nprof.store.lod_core` (`compiled_base`: bit-identical to `bucketize`).
* `peaks(ts, dur, nbytes, origin, width, nb)` gives, per bucket, the most events in
  flight at any one instant and the highest summed transfer rate (nbytes/dur, bytes
  per ns = GB/s) at any instant: exact maxima, so a coarser bucket's peak is the max
  of its halves' (never an average). Zero-length events are never in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nprof.compiled import load_compiled

MAX_CELLS = 1 << 24  # per-row bucket x opcode cells held for exact dominant-opcode tracking


@dataclass
class Buckets:
    """Dense per-bucket aggregates of one row (arrays of equal length)."""

    busy: np.ndarray  # int64 ns of event time inside the bucket
    count: np.ndarray  # int64 events starting in the bucket
    nbytes: np.ndarray  # float64 bytes moved (prorated)
    flops: np.ndarray  # float64 FLOPs (prorated)
    op: np.ndarray  # int32 dominant opcode, -1 when empty
    peak: np.ndarray | None = None  # int64 most events in flight at one instant (`peaks`)
    peak_rate: np.ndarray | None = None  # float64 highest summed nbytes/dur at one instant (`peaks`)
    per_op: np.ndarray | None = None  # (nb, k + 1) float busy per local opcode (last column: the rest)
    op_codes: np.ndarray | None = None  # global opcode of each per_op column but the last


def _split(s: np.ndarray, e: np.ndarray, width: int) -> tuple[np.ndarray, ...]:
    kb = s // width
    ke = np.where(e > s, (e - 1) // width, kb)
    return kb, ke


def bucketize(
    ts: np.ndarray,
    dur: np.ndarray,
    op: np.ndarray,
    nbytes: np.ndarray,
    flops: np.ndarray,
    origin: int,
    width: int,
    nb: int,
    keep_per_op: bool = False,
    dominant: bool = True,
) -> Buckets:
    """Aggregate one row's events into `nb` buckets of `width` ns from `origin` (see module doc)."""
    width = int(width)
    total = nb * width
    s = ts.astype(np.int64) - origin
    e = s + dur.astype(np.int64)
    keep = ((e > 0) & (s < total)) | ((s >= 0) & (s < total))
    if not keep.all():
        s, e, op, nbytes, flops = s[keep], e[keep], op[keep], nbytes[keep], flops[keep]
    sc = np.clip(s, 0, total)
    ec = np.clip(e, 0, total)
    sc = np.minimum(sc, total - 1)
    dc = np.maximum(ec - sc, 0)
    kb, ke = _split(sc, ec, width)
    ke = np.minimum(ke, nb - 1)
    single = kb == ke
    busy = np.zeros(nb, dtype=np.float64)
    count = np.bincount(kb, minlength=nb).astype(np.int64)
    amount_b = nbytes.astype(np.float64)
    amount_f = flops.astype(np.float64)
    full_dur = np.maximum(e - s, 1).astype(np.float64)
    # bytes/flops are prorated over the whole (unclipped) duration
    rate_b = amount_b / full_dur
    rate_f = amount_f / full_dur
    zero = e == s
    rate_b = np.where(zero, 0.0, rate_b)
    rate_f = np.where(zero, 0.0, rate_f)
    # single-bucket segments
    kbs = kb[single]
    busy += np.bincount(kbs, weights=dc[single], minlength=nb)
    share_b = np.where(zero, amount_b, rate_b * dc)
    share_f = np.where(zero, amount_f, rate_f * dc)
    nbytes_out = np.bincount(kbs, weights=share_b[single], minlength=nb).astype(np.float64)
    flops_out = np.bincount(kbs, weights=share_f[single], minlength=nb).astype(np.float64)
    multi = ~single
    m_kb, m_ke = kb[multi], ke[multi]
    first = ((m_kb + 1) * width - sc[multi]).astype(np.float64)
    last = (ec[multi] - m_ke * width).astype(np.float64)
    busy += np.bincount(m_kb, weights=first, minlength=nb) + np.bincount(m_ke, weights=last, minlength=nb)
    diff = np.bincount(m_kb + 1, minlength=nb + 1)[: nb + 1] - np.bincount(m_ke, minlength=nb + 1)[: nb + 1]
    busy += np.cumsum(diff)[:nb] * float(width)
    for rate, out in ((rate_b[multi], nbytes_out), (rate_f[multi], flops_out)):
        out += np.bincount(m_kb, weights=rate * first, minlength=nb) + np.bincount(
            m_ke, weights=rate * last, minlength=nb
        )
        d = np.bincount(m_kb + 1, weights=rate, minlength=nb + 1) - np.bincount(m_ke, weights=rate, minlength=nb + 1)
        out += np.cumsum(d)[:nb] * float(width)
    busy_i = np.rint(busy).astype(np.int64)
    if not dominant:  # counters only need the sums
        return Buckets(busy_i, count, nbytes_out, flops_out, np.full(nb, -1, dtype=np.int32))
    per_op, codes, dom = _dominant(op, kb, ke, single, dc, first, last, width, nb)
    result = Buckets(busy_i, count, nbytes_out, flops_out, dom)
    if keep_per_op:
        result.per_op, result.op_codes = per_op, codes
    return result


def _dominant(
    op: np.ndarray,
    kb: np.ndarray,
    ke: np.ndarray,
    single: np.ndarray,
    dc: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    width: int,
    nb: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bucket busy time per opcode (top opcodes + one 'rest' column) and the dominant opcode."""
    op = op.astype(np.int64)
    if op.size == 0:
        return np.zeros((nb, 1)), np.zeros(0, dtype=np.int64), np.full(nb, -1, dtype=np.int32)
    codes, local = _dense_codes(op)
    k = max(1, min(len(codes), MAX_CELLS // max(nb, 1)))
    if k < len(codes):  # keep the k busiest opcodes exactly, lump the rest
        weight = np.bincount(local, weights=dc.astype(np.float64) + 1.0, minlength=len(codes))
        top = np.argsort(-weight, kind="stable")[:k]
        remap = np.full(len(codes), k, dtype=np.int64)
        remap[top] = np.arange(k)
        codes = codes[top]
        local = remap[local]
    cols = len(codes) + 1
    multi = ~single
    w = np.where(single, dc.astype(np.float64), 0.0) + 0.5  # 0.5 ns per event: zero-length events still count
    mat = np.bincount(kb * cols + local, weights=w, minlength=nb * cols).astype(np.float64)
    ml = local[multi]
    mat += np.bincount(kb[multi] * cols + ml, weights=first, minlength=nb * cols)
    mat += np.bincount(ke[multi] * cols + ml, weights=last, minlength=nb * cols)
    mat = mat.reshape(nb, cols)
    if multi.any():
        d = np.bincount((kb[multi] + 1) * cols + ml, minlength=(nb + 1) * cols)[: (nb + 1) * cols]
        d = d - np.bincount(ke[multi] * cols + ml, minlength=(nb + 1) * cols)[: (nb + 1) * cols]
        mat += np.cumsum(d.reshape(nb + 1, cols), axis=0)[:nb] * float(width)
    dom = _pick(mat, codes, op, kb)
    return mat, codes, dom


def _dense_codes(op: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct opcodes ascending, each event's index among them) of non-empty int64 `op`."""
    lo = int(op.min())
    present = np.bincount(op - lo) > 0  # opcodes are small dense codes: O(n) instead of np.unique's sort
    return np.flatnonzero(present) + lo, (np.cumsum(present) - 1)[op - lo]


# Events of one row from which its base level runs compiled (`nprof.store.lod_core`): loading numba and
# the cached machine code costs ~0.5-0.7 s CPU once per process (measured), the numpy passes ~0.3 us per
# event more than the loop: worth it from about 2 M events, so a row of 1 M (a 10^7 profile's engine rows).
COMPILED_FROM = 1_000_000


def compiled_base(
    ts: np.ndarray, dur: np.ndarray, op: np.ndarray, nbytes: np.ndarray, flops: np.ndarray, width: int, nb: int
) -> Buckets | None:
    """`bucketize(ts, dur, op, nbytes, flops, 0, width, nb, keep_per_op=True)` by the compiled core (the same
    Buckets, bit for bit: the switch never changes a stored value), or None when
    the numpy passes should run (small row before numba is loaded, no numba, no events, or more
    opcodes than MAX_CELLS allows exactly)."""
    core = load_compiled("nprof.store.lod_core", ts.size, COMPILED_FROM, loaded="numba") if ts.size else None
    if core is None:  # (numba loaded: the core is ~free)
        return None
    total = nb * width
    if int(ts.min()) < 0 or int(ts.max()) >= total:  # as bucketize: opcodes of the events it keeps only
        e = ts + dur
        keep = ((e > 0) & (ts < total)) | ((ts >= 0) & (ts < total))
        ts, dur, op, nbytes, flops = ts[keep], dur[keep], op[keep], nbytes[keep], flops[keep]
        if ts.size == 0:
            return None
    op = op.astype(np.int64)
    codes, local = _dense_codes(op)
    if len(codes) > MAX_CELLS // max(nb, 1):
        return None
    f64 = np.float64
    busy, count, nbytes_out, flops_out, mat = core.base_buckets(
        ts.astype(np.int64), dur.astype(np.int64), local, nbytes.astype(f64), flops.astype(f64), width, nb,
        len(codes) + 1,
    )  # fmt: skip
    dom = _pick(mat, codes, None, None)  # the last ('rest') column is empty: no lumped opcodes here
    return Buckets(busy, count, nbytes_out, flops_out, dom, per_op=mat, op_codes=codes)


def _pick(mat: np.ndarray, codes: np.ndarray, op: np.ndarray | None, kb: np.ndarray | None) -> np.ndarray:
    """Dominant global opcode per bucket from a per-opcode matrix; the 'rest' column maps to a member op."""
    nb, cols = mat.shape
    best = np.argmax(mat, axis=1)
    empty = mat[np.arange(nb), best] <= 0
    lookup = np.append(codes, -1).astype(np.int32)
    dom = lookup[best]
    rest = (best == cols - 1) & ~empty
    if rest.any():
        named = mat[:, : cols - 1]
        if named.shape[1]:
            alt = np.argmax(named, axis=1)
            ok = rest & (named.max(axis=1) > 0)
            dom[ok] = lookup[alt[ok]]
        still = rest & (dom < 0)
        if still.any() and op is not None and kb is not None:
            member = np.full(nb, -1, dtype=np.int32)
            member[kb] = op  # any event starting there
            dom[still] = member[still]
    dom[empty] = -1
    return dom


RATE_ONE = 1 << 20  # peak rates are summed in fixed point (1/2**20 bytes per ns): exact, no drift


def _starts_rates(
    ts: np.ndarray, dur: np.ndarray, nbytes: np.ndarray, origin: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start (from `origin`), duration and fixed-point rate (bytes/ns * RATE_ONE) of the events of positive
    duration (int64 each)."""
    pos = dur > 0
    s = ts[pos].astype(np.int64) - origin
    d = dur[pos].astype(np.int64)
    return s, d, np.rint(nbytes[pos].astype(np.float64) * RATE_ONE / d).astype(np.int64)


def _steps(
    ts: np.ndarray, dur: np.ndarray, nbytes: np.ndarray, origin: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The in-flight count and fixed-point rate as step functions: (change points, count, rate) where
    the values hold from each point until the next (0 before the first)."""
    s, d, rate = _starts_rates(ts, dur, nbytes, origin)
    pts = np.concatenate([s, s + d])
    order = np.argsort(pts, kind="stable")
    pts = pts[order]
    n = s.size
    count = np.cumsum(np.where(order < n, 1, -1))
    total = np.cumsum(np.concatenate([rate, -rate])[order])
    last = np.append(np.flatnonzero(pts[1:] != pts[:-1]), pts.size - 1)  # after every change at a point
    return pts[last], count[last], total[last]


def peaks(
    ts: np.ndarray, dur: np.ndarray, nbytes: np.ndarray, origin: int, width: int, nb: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per bucket of `width` ns from `origin`: the most events in flight at one instant (int64) and the
    highest summed rate nbytes/dur at one instant (float64 bytes per ns). See the module doc."""
    width = int(width)
    if not np.any(dur > 0):
        return np.zeros(nb, dtype=np.int64), np.zeros(nb)
    core = load_compiled("nprof.store.lod_core", ts.size, COMPILED_FROM, loaded="numba")
    if core is not None:
        s, d, rate = _starts_rates(ts, dur, nbytes, origin)
        by_start, by_end = np.argsort(s, kind="stable"), np.argsort(s + d, kind="stable")
        pk, pr = core.bucket_peaks(s[by_start], rate[by_start], (s + d)[by_end], rate[by_end], width, nb)
        return pk, np.maximum(pr, 0) / RATE_ONE
    pts, count, rate = _steps(ts, dur, nbytes, origin)
    starts = np.arange(nb, dtype=np.int64) * width
    at = np.searchsorted(pts, starts, side="right") - 1  # the step holding at each bucket's start
    ok = at >= 0
    peak = np.where(ok, count[np.maximum(at, 0)], 0).astype(np.int64)
    peak_rate = np.where(ok, rate[np.maximum(at, 0)], 0).astype(np.int64)
    inside = (pts >= 0) & (pts < nb * width)  # steps beginning inside a bucket
    if inside.any():
        kb = pts[inside] // width
        first = np.flatnonzero(np.diff(kb, prepend=-1))
        k = kb[first]
        peak[k] = np.maximum(peak[k], np.maximum.reduceat(count[inside], first))
        peak_rate[k] = np.maximum(peak_rate[k], np.maximum.reduceat(rate[inside], first))
    return peak, np.maximum(peak_rate, 0) / RATE_ONE


def _pairs(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Even and odd entries along the first axis (a zero pads an odd length): slices, no reduction kernel."""
    odd = a[1::2]
    if a.shape[0] % 2:
        odd = np.concatenate([odd, np.zeros((1, *a.shape[1:]), dtype=a.dtype)])
    return a[0::2], odd


def _halve_max(a: np.ndarray) -> np.ndarray:
    even, odd = _pairs(a)
    return np.maximum(even, odd)


def _halve(a: np.ndarray) -> np.ndarray:
    even, odd = _pairs(a)
    return even + odd


def row_pyramid(
    ts: np.ndarray,
    dur: np.ndarray,
    op: np.ndarray,
    nbytes: np.ndarray,
    flops: np.ndarray,
    base_level: int,
    span: int,
    with_peaks: bool = False,
) -> Iterator[tuple[int, np.ndarray, Buckets]]:
    """Yield (level, bucket indices, sparse Buckets) for levels base_level.. until one bucket covers `span`;
    `with_peaks`: the Buckets carry `peak`/`peak_rate` too (a level's peaks are the max of its halves')."""
    width = 1 << base_level
    nb = max(1, -(-max(span, 1) // width))
    b = compiled_base(ts, dur, op, nbytes, flops, width, nb)
    if b is None:
        b = bucketize(ts, dur, op, nbytes, flops, 0, width, nb, keep_per_op=True)
    level = base_level
    busy, count, nbytes_a, flops_a, mat = b.busy, b.count, b.nbytes, b.flops, b.per_op
    pk, pr = peaks(ts, dur, nbytes, 0, width, nb) if with_peaks else (None, None)
    codes = b.op_codes if b.op_codes is not None else np.zeros(0, dtype=np.int64)
    dom = b.op
    while True:
        nz = np.flatnonzero((count > 0) | (busy > 0))
        out = Buckets(busy[nz], count[nz], nbytes_a[nz], flops_a[nz], dom[nz])
        if pk is not None and pr is not None:
            out.peak, out.peak_rate = pk[nz], pr[nz]
        yield level, nz, out
        if busy.shape[0] <= 1 or level >= 62:
            return
        busy, count, nbytes_a, flops_a = _halve(busy), _halve(count), _halve(nbytes_a), _halve(flops_a)
        if pk is not None and pr is not None:
            pk, pr = _halve_max(pk), _halve_max(pr)
        assert mat is not None
        mat = _halve(mat)
        dom = _pick(mat, codes, None, None)
        level += 1


def base_level_for(span: int, max_row_events: int, per_bucket: int = 8) -> int:
    """Finest stored level: about `per_bucket` events per bucket on the busiest row."""
    if max_row_events <= 0 or span <= 0:
        return 0
    target = span * per_bucket / max_row_events
    return max(0, int(np.floor(np.log2(max(target, 1.0)))))
