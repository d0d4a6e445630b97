"""Layout of the Perfetto trace: which tracks exist, their order, and the packet order on each track.

Contract:
* `plan_rows(profile)` lists the slice rows (one per instruction track and DMA
  queue, in the viewer's order: DMA queues, then engine rows, then other
  tracks); `in_table_order` tells whether a row's events already follow each
  other in table order (then they can be streamed batch by batch), and
  `sorted_rows` gives the table positions of its events sorted by (ts, -duration).
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
from dataclasses import dataclass

import numpy as np

from nprof.analysis.facts import facts
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
    code: int  # code of `key` in the table's track/queue encoding


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
    f = facts(profile)
    out: list[Row] = []
    names = f.queue[1]
    for k in sorted(range(len(names)), key=lambda i: _natural(names[i])):
        out.append(Row("dma", names[k], queue_label(names[k]), k))
    names = f.track[1]
    for k in sorted(range(len(names)), key=lambda i: _track_rank(names[i])):
        out.append(Row("instructions", names[k], track_label(names[k]), k))
    return out


def row_codes(profile: Profile, table: str) -> np.ndarray:
    """Track (instructions) or queue (dma) code of every row of `table`."""
    f = facts(profile)
    return (f.track if table == "instructions" else f.queue)[0]


def row_times(profile: Profile, table: str) -> tuple[np.ndarray, np.ndarray]:
    f = facts(profile)
    return (f.i_ts, f.i_end) if table == "instructions" else (f.d_ts, f.d_end)


def in_table_order(profile: Profile, row: Row) -> bool:
    """True when the row's events, in table order, follow each other (the streaming writer can take them)."""
    ts, end = row_times(profile, row.table)
    mask = row_codes(profile, row.table) == row.code
    return is_sequential(ts[mask], end[mask])


def sorted_rows(profile: Profile, row: Row) -> np.ndarray:
    """Table positions of the row's events, sorted by (ts, -duration)."""
    ts, end = row_times(profile, row.table)
    rows = np.flatnonzero(row_codes(profile, row.table) == row.code)
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
