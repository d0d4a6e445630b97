"""Regions of the dependency tracker's compiled core (`nprof.nki.depcore`): the array layout and the geometry.

The column layout of the state arrays (see depcore's module doc), decoding one encoded access into a region row
(E columns SID..BL and BOX: memory, box or none, span, bucket range), and the region predicates the rules use
(overlap, containment, equality), as defined in the module doc of `nprof.nki.deps`.
"""

from __future__ import annotations

import numpy as np

from nprof.compiled import njit

MAXR = 8  # HBM tensor axes a region box can have
NBK = 258  # bucket slots per memory: slot 0 for entries spanning too much (or past the last), then 257 buckets
WIDE = 64  # a region touching more buckets than this goes to slot 0
GRANULE = (1024, 512)  # bucket width in bytes: SBUF, PSUM (H[sid, GRAN]; a tracker may coarsen it; HBM: rows per
# bucket, from the layout)

# E columns
SID, STATE, HASBOX, RANK, S0, S1, WRITER, RHEAD, RTAIL, BF, BL, NODES, NEXT, DIDX, BOX = range(15)
EW = BOX + 2 * MAXR
LIVE, DEFERRED = 1, 2
# P columns
VAL, NXT, PRV, SLOT, ENXT = range(5)
PW = 5
# H columns (after the NBK bucket heads)
WRITTEN, DHEAD, DTAIL, DCOST, KIND, HRANK, ROW, GRAN, NLIVE, SHAPE = range(NBK, NBK + 10)
STRIDE = SHAPE + MAXR
HW = STRIDE + MAXR
HBM = 2  # KIND of an HBM tensor (0: SBUF, 1: PSUM)
# M slots
E_FREE, E_USED, E_NFREE, P_FREE, P_USED, P_NFREE, NEED_E, NEED_P, SCANNED, T_USED = range(10)
MW = 10


@njit(nogil=True)
def decode_region(H: np.ndarray, io: np.ndarray, pos: int, row: np.ndarray) -> int:
    """Decode the access at `io[pos:]` into `row` (E columns SID..BL, BOX); returns the next access's position."""
    sid, item, off, parts, pst, pstr, nf = io[pos], io[pos + 1], io[pos + 2], io[pos + 3], io[pos + 4], \
        io[pos + 5], io[pos + 6]  # fmt: skip
    lo = 0
    hi = 0
    for k in range(nf):
        ext = io[pos + 7 + 2 * k] * (io[pos + 8 + 2 * k] - 1)
        if ext < 0:
            lo += ext
        else:
            hi += ext
    row[SID] = sid
    kind = H[sid, KIND]
    if kind != HBM:
        b0 = off + lo * item
        b1 = off + (hi + 1) * item
        row[HASBOX], row[RANK], row[S0], row[S1] = 1, 2, b0, b1
        row[BOX], row[BOX + 1], row[BOX + 2], row[BOX + 3] = pst, pst + parts, b0, b1
        first, last = b0 // H[sid, GRAN], (b1 - 1) // H[sid, GRAN]  # (bytes per bucket: GRANULE, or coarser)
    else:
        pext = pstr * (parts - 1)
        flo = off + lo + min(0, pext)
        fhi = off + hi + max(0, pext) + 1
        row[S0], row[S1], row[RANK] = flo, fhi, H[sid, HRANK]
        row[HASBOX] = 0
        if H[sid, HRANK] > 0:
            row[HASBOX] = hbm_box(H, sid, io, pos, row)
        first = flo // H[sid, ROW] // H[sid, GRAN]
        last = (fhi - 1) // H[sid, ROW] // H[sid, GRAN]
    if first < 0 or last < first or last - first > WIDE or last + 1 >= NBK:
        row[BF], row[BL] = -1, -1
    else:
        row[BF], row[BL] = first, last
    return pos + 7 + 2 * nf


@njit(nogil=True)
def hbm_box(H: np.ndarray, sid: int, io: np.ndarray, pos: int, row: np.ndarray) -> int:
    """Write the access's box in the tensor's coordinates into row[BOX:]; 1 if it maps onto the axes, else 0."""
    n = H[sid, HRANK]
    rem = io[pos + 2]
    for d in range(n):
        st = H[sid, STRIDE + d]
        row[BOX + 2 * d] = rem // st
        rem = rem % st
        row[BOX + 2 * d + 1] = 1  # extent, made an end below
    if row[BOX] >= H[sid, SHAPE]:
        return 0
    used = 0  # a bit per axis taken
    nf = io[pos + 6]
    for k in range(-1, nf):
        stride = io[pos + 5] if k < 0 else io[pos + 7 + 2 * k]
        size = io[pos + 3] if k < 0 else io[pos + 8 + 2 * k]
        if size == 1:
            continue
        found = False
        for d in range(n):
            if not (used >> d) & 1 and H[sid, STRIDE + d] == stride and H[sid, SHAPE + d] > 1:
                used |= 1 << d
                row[BOX + 2 * d + 1] = size
                found = True
                break
        if not found:
            return 0
    for d in range(n):
        c = row[BOX + 2 * d]
        if c + row[BOX + 2 * d + 1] > H[sid, SHAPE + d]:
            return 0
        row[BOX + 2 * d + 1] += c
    return 1


@njit(nogil=True)
def meets(E: np.ndarray, e: int, q: np.ndarray) -> bool:
    """Does entry `e` overlap region `q` (boxes when both have one, else spans)?"""
    if E[e, HASBOX] and q[HASBOX]:
        for j in range(q[RANK]):
            if not (E[e, BOX + 2 * j] < q[BOX + 2 * j + 1] and q[BOX + 2 * j] < E[e, BOX + 2 * j + 1]):
                return False
        return True
    return E[e, S0] < q[S1] and q[S0] < E[e, S1]


@njit(nogil=True)
def inside(E: np.ndarray, e: int, q: np.ndarray, need_box: bool) -> bool:
    """Is entry `e` within region `q`? (`need_box`: with no box on `e` only a box-less `q` covers it by span.)"""
    if E[e, HASBOX] and q[HASBOX]:
        for j in range(q[RANK]):
            if not (q[BOX + 2 * j] <= E[e, BOX + 2 * j] and E[e, BOX + 2 * j + 1] <= q[BOX + 2 * j + 1]):
                return False
        return True
    if need_box and q[HASBOX]:
        return False
    return q[S0] <= E[e, S0] and E[e, S1] <= q[S1]


@njit(nogil=True)
def same_region(E: np.ndarray, e: int, q: np.ndarray) -> bool:
    """Same box (or both none) and same span."""
    if E[e, HASBOX] != q[HASBOX] or E[e, S0] != q[S0] or E[e, S1] != q[S1]:
        return False
    if q[HASBOX]:
        for j in range(2 * q[RANK]):
            if E[e, BOX + j] != q[BOX + j]:
                return False
    return True


@njit(nogil=True)
def bucket_count(q: np.ndarray) -> int:
    """Bucket lists region q is in."""
    return 1 if q[BF] < 0 else q[BL] - q[BF] + 1


@njit(nogil=True)
def region_hash(q: np.ndarray, size: int) -> int:
    """Slot of region q in a hash table of `size` (a power of two) slots."""
    h = q[SID] * 1000003 + q[S0] * 8191 + q[S1] * 131 + q[BF]
    if q[HASBOX]:
        for j in range(2 * q[RANK]):
            h = h * 31 + q[BOX + j]
    return (h ^ (h >> 17)) & (size - 1)
