"""Compiled emission of stamped loop iterations (`nprof.nki.stamp`): many instructions per call of the dependency
tracker's core, with the builder's matmul decisions made in order.

Contract: `run(E, P, H, M, T, stream, IO, state, out, deps, dep_off)` walks `stream` (one row per iteration, the
events below), registers each instruction with `depcore.record` exactly as `DepTracker.record` would (growing E,
P and T as `DepTracker._grow` would), and decides what `ProgramBuilder._emit_matmul` and `nprof.nki.replay.replay`
decide: whether a MATMUL accumulates (the region's last writer against the result tile's placement) and whether
an LDWEIGHTS precedes it (the stationary operand differs from the loaded one, or was written since it was loaded;
a TRANSPOSE displaces the loaded weights). Returns (E, P, T, deps, instructions made, dependencies made);
`dep_off` is filled in place.

Stream events (int64): MAT [1, tile] (the tile is placed now: its `born` is the instruction count); APP [2, event,
weights (`weights_effect`: 0 none, DISPLACE, LOAD), reads, writes, access...]; MM [3, event, accumulate asked,
checked, placed kind (0: fixed, 1: a tile of the iteration), placed value, stationary, moving, result]. An access is
[name code, dtype code] followed by its `DepTracker._encode` form (memory, itemsize, offset, partitions, partition
start, partition stride, free dims, (stride, size) per free dim); two accesses are equal `Access`es exactly when
these integers are equal. (Regions are decoded by `nprof.nki.depregions`, whose on-chip bucket width is per memory.)

`state` (int64, in and out): [instruction count, weights loaded (0/1), the LDWEIGHTS index, key length, the
output row of the LDWEIGHTS that loaded them last (-1: none in this call, -2: displaced), then the loaded
stationary's access key]. `out[k]` = (event, iteration, what: 0 the event's instruction, 1 LDWEIGHTS, 2 MATMUL,
accumulate) of the k-th instruction made; its dependencies are deps[dep_off[k]:dep_off[k + 1]].
"""

from __future__ import annotations

import numpy as np

from nprof.arch.isa import Opcode
from nprof.compiled import njit
from nprof.nki import depcore as core
from nprof.nki.depregions import E_NFREE, E_USED, EW, NEED_E, NEED_P, P_NFREE, P_USED, PW, T_USED

MAT, APP, MM = 1, 2, 3
DISPLACE, LOAD = 1, 2  # what an APP instruction does to the loaded weights (a TRANSPOSE, an MX LDWEIGHTS; an
# LDWEIGHTS of one stationary, e.g. one a replay logged as an instruction)


def weights_effect(opcode: Opcode, reads: int) -> int:
    """What an instruction other than a stamped matmul does to the loaded weights (`ProgramBuilder._append`)."""
    if opcode is Opcode.TRANSPOSE:
        return DISPLACE
    if opcode is Opcode.LDWEIGHTS:
        return LOAD if reads == 1 else DISPLACE
    return 0
HDR = 2  # name code and dtype code before an access's tracker encoding
KEY = 5  # where the loaded stationary's key starts in `state`


@njit(nogil=True)
def _grown(E: np.ndarray, P: np.ndarray, T: np.ndarray, M: np.ndarray) -> tuple:
    """(E, P, T) with the room `record` asked for (M[NEED_E], M[NEED_P]), doubling as `DepTracker._grow` does."""
    if 2 * (M[T_USED] + M[NEED_E]) > T.shape[0]:
        size = T.shape[0]
        live = 0
        for v in T:
            if v >= 0:
                live += 1
        while 2 * (live + M[NEED_E]) > size:
            size *= 2
        T = core.rehash(E, T, size)
        M[T_USED] = live
    rows, nodes = E.shape[0], P.shape[0]
    while rows - M[E_USED] + M[E_NFREE] < M[NEED_E]:
        rows *= 2
    while nodes - M[P_USED] + M[P_NFREE] < M[NEED_P]:
        nodes *= 2
    if rows > E.shape[0]:
        grown = np.zeros((rows, EW), np.int64)
        grown[: E.shape[0]] = E
        E = grown
    if nodes > P.shape[0]:
        grown = np.zeros((nodes, PW), np.int64)
        grown[: P.shape[0]] = P
        P = grown
    return E, P, T


@njit(nogil=True)
def _length(row: np.ndarray, at: int) -> int:
    """Length of the access (with its header) at row[at:]."""
    return HDR + 7 + 2 * row[at + HDR + 6]


@njit(nogil=True)
def _load(IO: np.ndarray, q: int, row: np.ndarray, at: int) -> int:
    """Copy the tracker encoding of the access at row[at:] into IO[q:]; returns the position after it."""
    n = _length(row, at) - HDR
    IO[q : q + n] = row[at + HDR : at + HDR + n]
    return q + n


@njit(nogil=True)
def _record(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, IO: np.ndarray, index: int,
            nreads: int, nwrites: int, W: tuple) -> tuple:  # fmt: skip
    """`depcore.record` with room made as needed and the scratch arrays W (`depcore.workspace`): (E, P, T, its
    result, W)."""
    Q, dd, sc = W
    n, Q, dd, sc = core.record_in(E, P, H, M, T, IO, index, nreads, nwrites, Q, dd, sc)
    while n < 0:
        E, P, T = _grown(E, P, T, M)
        n, Q, dd, sc = core.record_in(E, P, H, M, T, IO, index, nreads, nwrites, Q, dd, sc)
    return E, P, T, n, (Q, dd, sc)


@njit(nogil=True)
def _last_writer(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, IO: np.ndarray, W: tuple) -> tuple:
    """`depcore.last_writer` with the scratch arrays W: (its result, W)."""
    Q, dd, sc = W
    writer, sc = core.last_writer_in(E, P, H, M, IO, Q, sc)
    return writer, (Q, dd, sc)


@njit(nogil=True)
def _keep(deps: np.ndarray, nd: int, IO: np.ndarray, q: int, n: int) -> tuple:
    """deps with IO[q:q + n] appended at nd (grown when full)."""
    if nd + n > deps.shape[0]:
        grown = np.empty(2 * (nd + n), np.int64)
        grown[:nd] = deps[:nd]
        deps = grown
    deps[nd : nd + n] = IO[q : q + n]
    return deps, nd + n


@njit(nogil=True)
def _same_key(state: np.ndarray, row: np.ndarray, at: int) -> bool:
    n = _length(row, at)
    if state[3] != n:
        return False
    for i in range(n):  # noqa: SIM110 (numba: a plain loop)
        if state[KEY + i] != row[at + i]:
            return False
    return True


@njit(nogil=True)
def run(E: np.ndarray, P: np.ndarray, H: np.ndarray, M: np.ndarray, T: np.ndarray, stream: np.ndarray,
        IO: np.ndarray, state: np.ndarray, out: np.ndarray, deps: np.ndarray, dep_off: np.ndarray,
        tiles: int) -> tuple:  # fmt: skip
    """See module doc."""
    born = np.zeros(max(tiles, 1), np.int64)
    W = core.workspace()
    count, ni, nd = state[0], 0, 0
    for j in range(stream.shape[0]):
        row = stream[j]
        pos = 0
        while pos < row.shape[0]:
            kind = row[pos]
            if kind == MAT:
                born[row[pos + 1]] = count
                pos += 2
                continue
            ev = row[pos + 1]
            if kind == APP:
                nr, nw = row[pos + 3], row[pos + 4]
                effect = row[pos + 2]
                pos += 5
                first = pos
                q = 0
                for _ in range(nr + nw):
                    q = _load(IO, q, row, pos)
                    pos += _length(row, pos)
                E, P, T, n, W = _record(E, P, H, M, T, IO, count, nr, nw, W)
                deps, nd = _keep(deps, nd, IO, q, n)
                out[ni, 0], out[ni, 1], out[ni, 2], out[ni, 3] = ev, j, 0, 0
                dep_off[ni + 1] = nd
                ni += 1
                count += 1
                if effect == DISPLACE:
                    state[1], state[4] = 0, -2
                elif effect == LOAD:
                    n = _length(row, first)
                    state[1], state[2], state[3], state[4] = 1, count - 1, n, ni - 1
                    state[KEY : KEY + n] = row[first : first + n]
                continue
            asked, checked, pkind, pval = row[pos + 2], row[pos + 3], row[pos + 4], row[pos + 5]
            s = pos + 6
            mv = s + _length(row, s)
            o = mv + _length(row, mv)
            pos = o + _length(row, o)
            accumulate = asked
            if asked and checked:
                placed = pval if pkind == 0 else born[pval]
                _load(IO, 0, row, o)
                writer, W = _last_writer(E, P, H, M, IO, W)
                accumulate = 0 if (writer < 0 or writer < placed) else 1
            need = state[1] == 0 or not _same_key(state, row, s)
            if not need:
                _load(IO, 0, row, s)
                writer, W = _last_writer(E, P, H, M, IO, W)
                need = writer >= 0 and writer > state[2]
            if need:
                q = _load(IO, 0, row, s)
                E, P, T, n, W = _record(E, P, H, M, T, IO, count, 1, 0, W)
                deps, nd = _keep(deps, nd, IO, q, n)
                out[ni, 0], out[ni, 1], out[ni, 2], out[ni, 3] = ev, j, 1, 0
                dep_off[ni + 1] = nd
                n = _length(row, s)
                state[1], state[2], state[3], state[4] = 1, count, n, ni
                state[KEY : KEY + n] = row[s : s + n]
                ni += 1
                count += 1
            q = _load(IO, 0, row, s)
            q = _load(IO, q, row, mv)
            q = _load(IO, q, row, o)
            E, P, T, n, W = _record(E, P, H, M, T, IO, count, 2, 1, W)
            deps, nd = _keep(deps, nd, IO, q, n)
            out[ni, 0], out[ni, 1], out[ni, 2], out[ni, 3] = ev, j, 2, accumulate
            dep_off[ni + 1] = nd
            ni += 1
            count += 1
    state[0] = count
    return E, P, T, deps, ni, nd
