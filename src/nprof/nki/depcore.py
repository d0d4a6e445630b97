"""The compiled core of `nprof.nki.deps.DepTracker`: region entries in numpy arrays, walked by numba.

State (all int64 arrays, owned by the tracker and passed in on every call; the tracker grows them when `record`
reports it lacks room, before anything changed):

* `E` [rows, EW]: one row per entry (a region with its last writer and its readers since) or per deferred read
  (a read of a memory not written yet, entered at that memory's first write). Columns below; free rows are
  chained through NEXT.
* `P` [nodes, PW]: list nodes. A reader node holds an instruction index (VAL) and the next reader (NXT); a bucket
  node holds an entry (VAL), its neighbours in its bucket's list (NXT, PRV), the bucket slot (SLOT) and the
  entry's next bucket node (ENXT).
* `H` [memories, HW]: per memory (SBUF, PSUM, one per HBM tensor): the head of each bucket's list (slot 0: entries
  too wide for buckets; slot b + 1: bucket b), whether it was written, its deferred reads, its live entries, and
  its layout (kind, rank, elements per row, rows per bucket, shape, row-major strides).
* `M`: counters (free lists, rows and nodes in use, room wanted, entries scanned).
* `IO`: the accesses of one call, encoded by `DepTracker._encode` in deps.py: memory, itemsize, offset, partitions,
  partition start, partition stride, free-dim count, then (stride, size) per free dim.

Column names and the region geometry are in `nprof.nki.depregions` (an on-chip memory's bucket width is its H row's
GRAN column, so a tracker may coarsen it). The on-disk cache of the compiled code is keyed by the sources of
depregions and every other nprof module this one imports too (`nprof.compiled.njit`): an edit there recompiles.

The rules (what conflicts, what a read joins, what a write replaces) are the module doc of deps.py; bucketing only
narrows the entries examined (a region is in every bucket its span touches, so overlapping regions share one).
"""

from __future__ import annotations

import numpy as np

from nprof.compiled import njit
from nprof.nki.depregions import (
    BF,
    BL,
    DCOST,
    DEFERRED,
    DHEAD,
    DTAIL,
    E_FREE,
    E_NFREE,
    E_USED,
    ENXT,
    EW,
    LIVE,
    NBK,
    NEED_E,
    NEED_P,
    NEXT,
    NLIVE,
    NODES,
    NXT,
    P_FREE,
    P_NFREE,
    P_USED,
    PRV,
    RHEAD,
    RTAIL,
    SCANNED,
    SID,
    SLOT,
    STATE,
    T_USED,
    VAL,
    WRITER,
    WRITTEN,
    bucket_count,
    decode_region,
    inside,
    meets,
    region_hash,
    same_region,
)


@njit(nogil=True)
def _push(buf: np.ndarray, n: int, value: int) -> np.ndarray:
    """`buf` with `value` at position n (a doubled copy when full)."""
    if n == buf.shape[0]:
        grown = np.empty(2 * n, np.int64)
        grown[:n] = buf
        buf = grown
    buf[n] = value
    return buf


@njit(nogil=True)
def _candidates(E: np.ndarray, P: np.ndarray, H: np.ndarray, q: np.ndarray, out: np.ndarray) -> tuple:
    """(out, n): the entries of q's memory that may overlap q, each once (a bucket entry is taken at the first
    bucket it shares with q)."""
    sid, bf, bl = q[SID], q[BF], q[BL]
    n = 0
    node = H[sid, 0]
    while node >= 0:
        out = _push(out, n, P[node, VAL])
        n += 1
        node = P[node, NXT]
    lo, hi = (0, NBK - 2) if bf < 0 else (bf, bl)
    for b in range(lo, hi + 1):
        node = H[sid, b + 1]
        while node >= 0:
            e = P[node, VAL]
            start = E[e, BF]
            if start == b or (b == lo and start < lo):
                out = _push(out, n, e)
                n += 1
            node = P[node, NXT]
    return out, n


@njit(nogil=True)
def _take(A: np.ndarray, M: np.ndarray, free: int, nfree: int, used: int, link: int) -> int:
    """A free row of table A (room was checked beforehand): the head of its free list (M[free], linked by
    column `link`, M[nfree] long) if any, else the next never-used row (M[used])."""
    r = M[free]
    if r >= 0:
        M[free] = A[r, link]
        M[nfree] -= 1
        return r
    r = M[used]
    M[used] += 1
    return r


@njit(nogil=True)
def _node(P: np.ndarray, M: np.ndarray) -> int:
    """A free P node (room was checked beforehand)."""
    return _take(P, M, P_FREE, P_NFREE, P_USED, NXT)


@njit(nogil=True)
def _row(E: np.ndarray, M: np.ndarray) -> int:
    """A free E row (room was checked beforehand)."""
    return _take(E, M, E_FREE, E_NFREE, E_USED, NEXT)


@njit(nogil=True)
def _add_reader(E: np.ndarray, P: np.ndarray, M: np.ndarray, e: int, index: int) -> None:
    n = _node(P, M)
    P[n, VAL], P[n, NXT] = index, -1
    if E[e, RTAIL] >= 0:
        P[E[e, RTAIL], NXT] = n
    else:
        E[e, RHEAD] = n
    E[e, RTAIL] = n


@njit(nogil=True)
def _new_entry(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, q: np.ndarray, writer: int,
               reader: int) -> None:  # fmt: skip
    """Enter region q with `writer` (-1: none) and readers [reader] (-1: none) into its buckets."""
    e = _row(E, M)
    E[e, :] = q
    E[e, STATE], E[e, WRITER], E[e, RHEAD], E[e, RTAIL], E[e, NODES] = LIVE, writer, -1, -1, -1
    H[q[SID], NLIVE] += 1
    if reader >= 0:
        _add_reader(E, P, M, e, reader)
    _link(E, P, H, M, e)


@njit(nogil=True)
def _link(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, e: int) -> None:
    """Put entry e into the lists of its buckets."""
    sid = E[e, SID]
    lo, hi = (-1, -1) if E[e, BF] < 0 else (E[e, BF], E[e, BL])
    for b in range(lo, hi + 1):
        slot = b + 1
        n = _node(P, M)
        head = H[sid, slot]
        P[n, VAL], P[n, NXT], P[n, PRV], P[n, SLOT], P[n, ENXT] = e, head, -1, slot, E[e, NODES]
        if head >= 0:
            P[head, PRV] = n
        H[sid, slot] = n
        E[e, NODES] = n


@njit(nogil=True)
def _free_node(P: np.ndarray, M: np.ndarray, n: int) -> None:
    P[n, NXT] = M[P_FREE]
    M[P_FREE] = n
    M[P_NFREE] += 1


@njit(nogil=True)
def _drop(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, e: int) -> None:
    """Remove entry e: out of its buckets, its nodes and row freed."""
    sid = E[e, SID]
    n = E[e, NODES]
    while n >= 0:
        nxt, prv, after = P[n, NXT], P[n, PRV], P[n, ENXT]
        if prv >= 0:
            P[prv, NXT] = nxt
        else:
            H[sid, P[n, SLOT]] = nxt
        if nxt >= 0:
            P[nxt, PRV] = prv
        _free_node(P, M, n)
        n = after
    n = E[e, RHEAD]
    while n >= 0:
        nxt = P[n, NXT]
        _free_node(P, M, n)
        n = nxt
    H[sid, NLIVE] -= 1
    E[e, STATE] = 0
    E[e, NEXT] = M[E_FREE]
    M[E_FREE] = e
    M[E_NFREE] += 1


@njit(nogil=True)
def _find_deferred(E: np.ndarray, T: np.ndarray, q: np.ndarray) -> int:
    """The slot of T holding the deferred region equal to q, or the free slot where it goes."""
    size = T.shape[0]
    h = region_hash(q, size)
    free = -1
    while T[h] != -1:
        r = T[h]
        if r == -2:  # a removed region's slot: reusable, but the probe goes on
            if free < 0:
                free = h
        elif E[r, SID] == q[SID] and E[r, BF] == q[BF] and E[r, BL] == q[BL] and same_region(E, r, q):
            return h
        h = (h + 1) & (size - 1)
    return h if free < 0 else free


@njit(nogil=True)
def _defer(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, q: np.ndarray,
           index: int) -> None:  # fmt: skip
    """Keep a read of a memory not written yet: one deferred row per distinct region (found through T), listing
    its readers in order; entered at the memory's first write."""
    h = _find_deferred(E, T, q)
    r = T[h]
    if r >= 0:
        if P[E[r, RTAIL], VAL] != index:
            _add_reader(E, P, M, r, index)
        return
    r = _row(E, M)
    E[r, :] = q
    sid = q[SID]
    E[r, STATE], E[r, NEXT], E[r, RHEAD], E[r, RTAIL], E[r, NODES] = DEFERRED, -1, -1, -1, -1
    _add_reader(E, P, M, r, index)
    if T[h] == -1:
        M[T_USED] += 1
    T[h] = r
    if H[sid, DTAIL] >= 0:
        E[H[sid, DTAIL], NEXT] = r
    else:
        H[sid, DHEAD] = r
    H[sid, DTAIL] = r
    H[sid, DCOST] += bucket_count(q)


@njit(nogil=True)
def _enter(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, sid: int) -> None:
    """Enter the deferred reads of memory `sid` (one entry per distinct region, with its readers)."""
    r = H[sid, DHEAD]
    while r >= 0:
        after = E[r, NEXT]
        h = _find_deferred(E, T, E[r])
        T[h] = -2
        E[r, STATE], E[r, WRITER] = LIVE, -1
        H[sid, NLIVE] += 1
        _link(E, P, H, M, r)
        r = after
    H[sid, DHEAD], H[sid, DTAIL], H[sid, DCOST] = -1, -1, 0


@njit(nogil=True)
def rehash(E: np.ndarray, T: np.ndarray, size: int) -> np.ndarray:
    """T with room: a table of `size` slots holding the same deferred regions (no removed slots)."""
    table = np.full(size, -1, np.int64)
    for r in T:
        if r >= 0:
            h = _find_deferred(E, table, E[r])
            table[h] = r
    return table


@njit(nogil=True)
def _read(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, q: np.ndarray, index: int,
          deps: np.ndarray, nd: int, scratch: np.ndarray) -> tuple:  # fmt: skip
    """Register a read of region q by `index`: (deps, nd, scratch) with the writers it waits for appended."""
    if H[q[SID], WRITTEN] == 0:  # e.g. an input or weight: nothing to wait for; kept for a later write
        _defer(E, P, H, M, T, q, index)
        return deps, nd, scratch
    scratch, n = _candidates(E, P, H, q, scratch)
    M[SCANNED] += n + 1
    hit = False
    for i in range(n):
        e = scratch[i]
        if not meets(E, e, q):
            continue
        if E[e, WRITER] >= 0:
            deps = _push(deps, nd, E[e, WRITER])
            nd += 1
        # a reader joins an entry only when it reads all of it; otherwise a later write to the part of the
        # entry it did not read would wait for it (a false dependency)
        if inside(E, e, q, False) and (E[e, RTAIL] < 0 or P[E[e, RTAIL], VAL] != index):
            _add_reader(E, P, M, e, index)
        hit = hit or same_region(E, e, q)
    if not hit:
        _new_entry(E, P, H, M, q, -1, index)
    return deps, nd, scratch


@njit(nogil=True)
def _write(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, q: np.ndarray, index: int,
           deps: np.ndarray, nd: int, scratch: np.ndarray) -> tuple:  # fmt: skip
    """Register a write of region q by `index`: (deps, nd, scratch) with the accesses it waits for appended;
    entries it covers are replaced by its own."""
    sid = q[SID]
    if H[sid, WRITTEN] == 0:
        H[sid, WRITTEN] = 1
        _enter(E, P, H, M, T, sid)
    scratch, n = _candidates(E, P, H, q, scratch)
    M[SCANNED] += n + 1
    for i in range(n):
        e = scratch[i]
        if not meets(E, e, q):
            continue
        if E[e, WRITER] >= 0:
            deps = _push(deps, nd, E[e, WRITER])
            nd += 1
        node = E[e, RHEAD]
        while node >= 0:
            deps = _push(deps, nd, P[node, VAL])
            nd += 1
            node = P[node, NXT]
        if inside(E, e, q, True):
            _drop(E, P, H, M, e)
    _new_entry(E, P, H, M, q, index, -1)
    return deps, nd, scratch


@njit(nogil=True)
def record(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, IO: np.ndarray, index: int,
           nreads: int, nwrites: int) -> int:  # fmt: skip
    """Register instruction `index` reading the first `nreads` accesses of IO and writing the next `nwrites`;
    write its dependencies (sorted, distinct) into IO right after the accesses and return their count (IO has
    room for every index recorded before), or return -1 with M[NEED_E], M[NEED_P] set when E, P or T lack room
    (nothing changed then)."""
    Q, deps, scratch = workspace()
    return record_in(E, P, H, M, T, IO, index, nreads, nwrites, Q, deps, scratch)[0]


@njit(nogil=True)
def workspace() -> tuple:
    """(Q, deps, scratch): the scratch arrays `record_in` and `last_writer_in` take (grown there when short); a
    caller registering many instructions makes them once and passes back what those return."""
    return np.empty((4, EW), np.int64), np.empty(16, np.int64), np.empty(64, np.int64)


@njit(nogil=True)
def record_in(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, IO: np.ndarray,
              index: int, nreads: int, nwrites: int, Q: np.ndarray, deps: np.ndarray, scratch: np.ndarray) -> tuple:
    """`record` with the caller's scratch arrays (`workspace`): (its result, Q, deps, scratch), the arrays to
    pass on the next call (contents meaningless)."""
    nacc = nreads + nwrites
    if Q.shape[0] < nacc:
        Q = np.empty((2 * nacc, EW), np.int64)
    pos = 0
    need = 0
    for k in range(nacc):  # nodes: buckets and a reader per access, a reader per entry a read may join
        pos = decode_region(H, IO, pos, Q[k])
        need += bucket_count(Q[k]) + 1
        if k < nreads:
            need += H[Q[k, SID], NLIVE] + nacc
        elif H[Q[k, SID], WRITTEN] == 0:
            need += H[Q[k, SID], DCOST]
    if (E.shape[0] - M[E_USED] + M[E_NFREE] < nacc or P.shape[0] - M[P_USED] + M[P_NFREE] < need
            or 2 * (M[T_USED] + nacc) > T.shape[0]):  # fmt: skip
        M[NEED_E], M[NEED_P] = nacc, need
        return -1, Q, deps, scratch
    nd = 0
    for k in range(nreads):
        deps, nd, scratch = _read(E, P, H, M, T, Q[k], index, deps, nd, scratch)
    for k in range(nreads, nacc):
        deps, nd, scratch = _write(E, P, H, M, T, Q[k], index, deps, nd, scratch)
    _sort(deps, nd)
    m = 0
    for i in range(nd):
        v = deps[i]
        if v != index and (m == 0 or IO[pos + m - 1] != v):
            IO[pos + m] = v
            m += 1
    return m, Q, deps, scratch


@njit(nogil=True)
def _sort(a: np.ndarray, n: int) -> None:
    """Sort a[:n] in place (insertion sort: an instruction has a few dependencies; np.sort for many)."""
    if n > 32:
        a[:n] = np.sort(a[:n])
        return
    for i in range(1, n):
        v = a[i]
        j = i - 1
        while j >= 0 and a[j] > v:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = v


@njit(nogil=True)
def last_writer(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, IO: np.ndarray) -> int:
    """The latest instruction that wrote any part of the access at IO[0:] (-1 if none)."""
    Q, _, scratch = workspace()
    return last_writer_in(E, P, H, M, IO, Q, scratch)[0]


@njit(nogil=True)
def last_writer_in(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, IO: np.ndarray, Q: np.ndarray,
                   scratch: np.ndarray) -> tuple:  # fmt: skip
    """`last_writer` with the caller's scratch arrays (`workspace`): (its result, scratch)."""
    q = Q[0]
    decode_region(H, IO, 0, q)
    scratch, n = _candidates(E, P, H, q, scratch)
    M[SCANNED] += n + 1
    best = -1
    for i in range(n):
        e = scratch[i]
        if E[e, WRITER] > best and meets(E, e, q):
            best = E[e, WRITER]
    return best, scratch
