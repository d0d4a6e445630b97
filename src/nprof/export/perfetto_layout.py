"""Layout of the Perfetto trace: which tracks exist, their order, and the packet order on each track.

Contract:
* `plan_rows(profile)` lists the slice rows (one per instruction track and DMA
  queue, in the viewer's order: DMA queues, then engine rows, then other
  tracks); `streamable` tells which rows' events already follow each other in
  table order (they are then written batch by batch from `batches`, zero-copy
  slices of the table, so memory stays bounded), and `sorted_rows` gives the
  table positions of another row's events sorted by (ts, -duration).
* `split_lanes(ts, end)` splits a row's events into lanes whose events are
  sequential or properly nested (Perfetto draws one stack per track, so partly
  overlapping events need their own lane); most rows have one lane and take the
  vectorised fast path.
* `packet_order(ts, end)` gives the order of begin/end/instant packets of one
  lane so that every track's packets are in time order with ends before begins
  at equal times and nested slices closing inner first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from nprof.analysis.facts import encode_arrow, facts, to_numpy
from nprof.analysis.sources import group_rows
from nprof.export.labels import queue_label, track_label
from nprof.profile import Profile

KIND_END, KIND_INSTANT, KIND_BEGIN = 0, 1, 2
_ENGINE_ORDER = ("tensor.stationary", "tensor.moving", "tensor", "vector", "scalar", "gpsimd", "sync")


@dataclass
class Row:
    """One slice row of the trace: a DMA queue or an instruction track."""

    table: str  # "instructions" or "dma"
    key: str  # track or queue name
    label: str  # display name


KEY_COLUMN = {"instructions": "track", "dma": "queue"}


def _natural(name: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def _track_rank(track: str) -> tuple[int, list[object]]:
    if track in _ENGINE_ORDER:
        return (_ENGINE_ORDER.index(track), [])
    if track.startswith("cc."):
        return (len(_ENGINE_ORDER), _natural(track))
    return (len(_ENGINE_ORDER) + 1, _natural(track))


def _ties_ordered(t: np.ndarray, d: np.ndarray) -> bool:
    same = t[1:] == t[:-1]
    return bool(np.all(d[1:][same] <= d[:-1][same]))


def plan_rows(profile: Profile) -> list[Row]:
    """Every slice row of `profile` in display order (see module doc)."""
    out: list[Row] = []
    queues = [q for q in pc.unique(profile.dma["queue"]).to_pylist() if q is not None]
    for q in sorted(queues, key=_natural):
        out.append(Row("dma", q, queue_label(q)))
    tracks = [t for t in pc.unique(profile.instructions["track"]).to_pylist() if t is not None]
    for t in sorted(tracks, key=_track_rank):
        out.append(Row("instructions", t, track_label(t)))
    return out


@dataclass
class Batch:
    """Rows [start, stop) of a table: their times and their rows grouped by track/queue name."""

    start: int
    stop: int
    ts: np.ndarray
    end: np.ndarray
    groups: dict[str, np.ndarray]  # name -> positions in the batch (ascending)


def batches(profile: Profile, table: str, size: int) -> Iterator[Batch]:
    """The table in contiguous batches of `size` rows (zero-copy slices; memory bounded by the batch)."""
    t = profile.table(table)
    for b0 in range(0, t.num_rows, size):
        sl = t.slice(b0, size).select(["ts", "duration", KEY_COLUMN[table]])
        ts = to_numpy(sl["ts"])
        end = ts + to_numpy(sl["duration"])
        codes, names = encode_arrow(sl[KEY_COLUMN[table]])
        group_codes, offsets, order = group_rows(codes)
        values = names.to_pylist()
        groups = {values[c]: order[offsets[g] : offsets[g + 1]] for g, c in enumerate(group_codes.tolist())}
        yield Batch(b0, b0 + sl.num_rows, ts, end, groups)


def streamable(profile: Profile, table: str, size: int) -> set[str]:
    """Names of the rows whose events, in table order, follow each other (one pass over the table in batches)."""
    last: dict[str, int] = {}
    bad: set[str] = set()
    for b in batches(profile, table, size):
        for name, pos in b.groups.items():
            if name in bad:
                continue
            ts, end = b.ts[pos], b.end[pos]
            if (name in last and ts[0] < last[name]) or not is_sequential(ts, end):
                bad.add(name)
            else:
                last[name] = int(end[-1])
    return set(last) - bad


def row_times(profile: Profile, table: str) -> tuple[np.ndarray, np.ndarray]:
    f = facts(profile)
    return (f.i_ts, f.i_end) if table == "instructions" else (f.d_ts, f.d_end)


def sorted_rows(profile: Profile, row: Row) -> np.ndarray:
    """Table positions of the row's events, sorted by (ts, -duration)."""
    ts, end = row_times(profile, row.table)
    codes, names = facts(profile).strings(row.table, KEY_COLUMN[row.table])
    rows = np.flatnonzero(codes == names.index(row.key))
    t, d = ts[rows], end[rows] - ts[rows]
    if rows.size > 1 and not (np.all(t[1:] > t[:-1]) or (np.all(t[1:] >= t[:-1]) and _ties_ordered(t, d))):
        rows = rows[np.lexsort((-d, t))]
    return rows


def is_sequential(ts: np.ndarray, end: np.ndarray) -> bool:
    """True when no event starts before the previous one ended (events sorted by ts)."""
    return ts.size < 2 or bool(np.all(ts[1:] >= end[:-1]))


def split_lanes(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane number of each event (events sorted by (ts, -duration)); lane 0 when the row is already drawable."""
    lanes = np.zeros(ts.size, np.int32)
    if ts.size < 2:
        return lanes
    reach = np.maximum.accumulate(end)
    if np.all(ts[1:] >= reach[:-1]) or _properly_nested(ts, end):
        return lanes
    stacks: list[list[int]] = []
    for i, (s, e) in enumerate(zip(ts.tolist(), end.tolist(), strict=True)):
        if e == s:
            continue  # instants never disturb a stack
        for li, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                lanes[i] = li
                break
        else:
            stacks.append([e])
            lanes[i] = len(stacks) - 1
    return lanes


def _properly_nested(ts: np.ndarray, end: np.ndarray) -> bool:
    """True when intervals (sorted by (ts, -dur)) only nest or follow each other, never partly overlap."""
    stack: list[int] = []
    for s, e in zip(ts.tolist(), end.tolist(), strict=True):
        while stack and stack[-1] <= s:
            stack.pop()
        if stack and e > stack[-1]:
            return False
        if e > s:
            stack.append(e)
    return True


def packet_order(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(event index, kind, time) of each packet of one lane, in write order (see module doc)."""
    n = ts.size
    instant = end == ts
    if is_sequential(ts, end):
        count = np.where(instant, 1, 2)
        total = int(count.sum())
        first = np.zeros(n, np.int64)
        np.cumsum(count[:-1], out=first[1:])
        event = np.empty(total, np.int64)
        kind = np.empty(total, np.int8)
        event[first] = np.arange(n)
        kind[first] = np.where(instant, KIND_INSTANT, KIND_BEGIN)
        timed = np.flatnonzero(~instant)
        event[first[timed] + 1] = timed
        kind[first[timed] + 1] = KIND_END
        time = np.where(kind == KIND_END, end[event], ts[event])
        return event, kind, time
    timed = np.flatnonzero(~instant)
    idx = np.arange(n)
    event = np.concatenate([idx, timed])
    kind = np.concatenate([np.where(instant, KIND_INSTANT, KIND_BEGIN), np.full(timed.size, KIND_END)]).astype(np.int8)
    time = np.concatenate([ts, end[timed]])
    secondary = np.where(kind == KIND_END, -event, event)
    order = np.lexsort((secondary, kind, time))
    return event[order], kind[order], time[order]
