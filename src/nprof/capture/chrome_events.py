"""The per-event parse of Chrome-trace import: parsed event dicts sorted by phase into slice columns.

Contract: `parse_events(events)` sorts the orjson-parsed event dicts of a trace by phase (the reference
path of `chrome.import_chrome_trace`; malformed events raise AttributeError/KeyError/TypeError/ValueError,
which the caller turns into one-line errors); `fold_other_events` folds the B/E/C/i/M events into slices,
counters and names (shared with `chrome_fast`); `SliceColumns` holds the slices column-wise, normalised
(names as text, categories lower-cased, args a dict) the same way whichever parse built them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq, itemgetter
from typing import Any

import numpy as np

FLOW_PHASES = frozenset({"s", "t", "f"})
OTHER_PHASES = frozenset({"B", "E", "C", "i", "I", "n", "M"})


def _num(value: Any) -> float:
    return float(value)


class SliceColumns:
    """Column lists of duration slices (X events and matched B/E pairs), built column-wise."""

    def __init__(self, xs: list[dict[str, Any]]) -> None:
        try:  # one C-level pass when every slice has every field (Kineto, torch.profiler)
            cols = list(zip(*map(itemgetter("name", "cat", "pid", "tid", "ts", "dur", "args"), xs), strict=True))
            name, cats, pid, tid, ts, dur, args = (list(c) for c in cols) if cols else ([], [], [], [], [], [], [])
        except KeyError:
            name = [e.get("name", "") for e in xs]
            cats = [e.get("cat") for e in xs]
            pid, tid = [e.get("pid") for e in xs], [e.get("tid") for e in xs]
            ts, dur = [e["ts"] for e in xs], [e.get("dur", 0) for e in xs]
            args = [e.get("args") for e in xs]
        self.set_columns(name, cats, pid, tid, ts, dur, args)

    @classmethod
    def from_columns(cls, cols: dict[str, list[Any]]) -> SliceColumns:
        """From raw column lists (name, cat, pid, tid, ts, dur, args: the event fields, `dict.get` defaults)."""
        self = cls.__new__(cls)
        self.set_columns(*(cols[k] for k in ("name", "cat", "pid", "tid", "ts", "dur", "args")))
        return self

    def set_columns(
        self, name: list[Any], cats: list[Any], pid: list[Any], tid: list[Any], ts: list[Any], dur: list[Any],
        args: list[Any],
    ) -> None:
        """Normalise and store the columns: names as text, categories lower-cased, args a dict ({} if not)."""
        if not set(map(type, name)) <= {str}:
            name = ["" if n is None else str(n) for n in name]
        try:
            lowered = {c: "" if c is None else str(c).lower() for c in set(cats)}
        except TypeError:  # an unhashable "cat" (not a string): compare by text
            cats = [None if c is None else str(c) for c in cats]
            lowered = {c: "" if c is None else c.lower() for c in set(cats)}
        if not set(map(type, args)) <= {dict}:
            args = [a if a.__class__ is dict else {} for a in args]
        self.name: list[str] = name
        self.cat: list[str] = list(map(lowered.__getitem__, cats))
        self.pid: list[Any] = pid
        self.tid: list[Any] = tid
        self.ts: list[Any] | np.ndarray = ts  # float arrays when chrome_fast built the columns
        self.dur: list[Any] | np.ndarray = dur
        self.args: list[dict[str, Any]] = args


@dataclass
class _Parsed:
    """The events of a trace sorted by phase: complete slices (B/E pairs and unended B included), flows,
    counters, thread/process names, how many B were never ended and how many events had a phase."""

    xs: list[dict[str, Any]]
    flows: list[dict[str, Any]]
    counters: list[tuple[Any, str, Any]]
    names: dict[str, str]
    unmatched: int
    n_phased: int


def parse_events(events: list[Any]) -> _Parsed:
    """Sort `events` by phase (malformed events raise AttributeError/KeyError/TypeError/ValueError)."""
    phases = list(map(dict.get, events, repeat("ph")))
    xs = list(compress(events, map(eq, phases, repeat("X"))))
    flows = list(compress(events, map(FLOW_PHASES.__contains__, phases)))  # the parsed dicts themselves
    other_mask = list(map(OTHER_PHASES.__contains__, phases))
    others, other_phases = list(compress(events, other_mask)), list(compress(phases, other_mask))
    counters: list[tuple[Any, str, Any]] = []
    names: dict[str, str] = {}
    open_b = fold_other_events(others, other_phases, xs, counters, names)
    unmatched = sum(len(v) for v in open_b.values())
    if unmatched:  # Chrome draws a slice never ended up to the end of the trace: so do we
        timed = [e["ts"] for e in others + flows if e.get("ph") != "M" and e.get("ts") is not None]
        last = max([_num(e["ts"]) + _num(e.get("dur") or 0) for e in xs] + list(map(_num, timed)))
        for stack in open_b.values():
            xs.extend({**b, "ph": "X", "dur": last - _num(b["ts"])} for b in stack)
    return _Parsed(xs, flows, counters, names, unmatched, len(phases) - phases.count(None))


def fold_other_events(
    others: list[dict[str, Any]],
    phases: list[str | None],
    xs: list[dict[str, Any]],
    counters: list[tuple[Any, str, Any]],
    names: dict[str, str],
    open_b: defaultdict[tuple[Any, Any], list[dict[str, Any]]] | None = None,
) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    """Fold the B/E/C/i/M events into `xs` (ended B/E pairs), `counters` and `names`; returns the B events
    still open, per (pid, tid) (`open_b`, when given: those open before these events, updated in place)."""
    open_b = defaultdict(list) if open_b is None else open_b
    for ev, ph in zip(others, phases, strict=True):
        if ph == "B":
            open_b[(ev.get("pid"), ev.get("tid"))].append(ev)
        elif ph == "E":
            stack = open_b.get((ev.get("pid"), ev.get("tid")))
            if stack:
                b = stack.pop()
                args = dict(b.get("args") or {})
                args.update(ev.get("args") or {})
                dur = _num(ev["ts"]) - _num(b["ts"])
                xs.append({**b, "ph": "X", "dur": dur, "args": args})
        elif ph == "C":
            args = ev.get("args") or {}
            base = str(ev.get("name", "counter"))
            if ev.get("id") is not None:
                base = f"{base}[{ev['id']}]"
            for key, value in args.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    counters.append((ev["ts"], base if len(args) == 1 else f"{base}.{key}", value))
        elif ph in ("i", "I", "n") and ev.get("name") == "[memory]":
            _memory_counters(ev, counters)
        elif ph == "M" and ev.get("name") in ("thread_name", "process_name"):
            label = (ev.get("args") or {}).get("name")
            if label is not None:
                names[f"{ev['name']}.{ev.get('pid')}.{ev.get('tid')}"] = str(label)
    return open_b


def _memory_counters(ev: dict[str, Any], out: list[tuple[Any, str, Any]]) -> None:
    args = ev.get("args") or {}
    dev_type = args.get("Device Type", 0)
    dev = "cpu" if dev_type in (0, None) else f"cuda{args.get('Device Id', 0)}"
    if isinstance(args.get("Total Allocated"), int | float):
        out.append((ev["ts"], f"{dev}_allocated_bytes", args["Total Allocated"]))
    if dev != "cpu" and isinstance(args.get("Total Reserved"), int | float):
        out.append((ev["ts"], f"{dev}_reserved_bytes", args["Total Reserved"]))
