"""The per-event parse of Chrome-trace import: parsed event dicts sorted by phase into slice columns.

Contract: `parse_events(events)` sorts the parsed event dicts of a trace by phase (the reference
path of `chrome.import_chrome_trace`; malformed events raise AttributeError/KeyError/TypeError/ValueError,
which the caller turns into one-line errors); `fold_other_events` folds the B/E/C/i/M events into slices,
counters and names (shared with `chrome_fast`); `SliceColumns` holds the slices column-wise, normalised
(names as text, categories lower-cased) the same way whichever parse built them, and their args as
`ArgColumns`: one list per args key the importer reads (`ARG_KEYS`), ABSENT where a slice lacks the key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import eq, itemgetter
from typing import Any

import numpy as np

try:
    from msgspec import UNSET as ABSENT  # the typed decoder's "field absent": chrome_fast's columns need no rewrite
except ImportError:  # pragma: no cover - msgspec is a core dependency

    class _Absent:
        def __bool__(self) -> bool:
            return False

    ABSENT = _Absent()  # type: ignore[assignment,misc]

FLOW_PHASES = frozenset({"s", "t", "f"})
# every args key the importer reads or checks on a slice (chrome_check, chrome_rows, chrome_host, chrome_dma)
ARG_KEYS = (
    "device", "stream", "correlation", "External id", "Sequence number", "registers per thread", "shared memory",
    "bytes", "Input Dims", "Input type", "Concrete Inputs", "grid", "block",
)  # fmt: skip
OTHER_PHASES = frozenset({"B", "E", "C", "i", "I", "n", "M"})


def _num(value: Any) -> float:
    return float(value)


FLOW_KEYS = ("ph", "cat", "pid", "tid", "ts", "id", "bp")  # the flow event fields chrome_tree.flow_deps reads


def flow_columns(flows: list[dict[str, Any]]) -> dict[str, Any]:
    """The FLOW_KEYS of flow event dicts as columns (`dict.get`: None where absent; ts: ABSENT)."""
    cols: dict[str, Any] = {k: list(map(dict.get, flows, repeat(k))) for k in FLOW_KEYS}
    cols["ts"] = list(map(dict.get, flows, repeat("ts"), repeat(ABSENT)))
    return cols


class ArgColumns:
    """The args of n slices as columns: `cols[key]` lists each slice's value of `key` (one of ARG_KEYS), ABSENT
    (falsy) where its args lack the key (JSON null stays None); keys no slice has are not stored."""

    def __init__(
        self, n: int, cols: dict[str, list[Any]], distinct: dict[str, list[Any]] | None = None,
        source: tuple[ArgColumns, Sequence[int]] | None = None,
    ) -> None:  # fmt: skip
        """`cols`: lists of n values, each with a present value somewhere; `distinct` (optional): per
        list-valued key, its present values, each object once (the fast parse shares equal texts' values);
        `source`: (columns, indices) whose columns this one gathers on first use (`take`)."""
        self.n = n
        self.cols = cols
        self.distinct = distinct or {}
        self._source = source
        self._dropped: set[str] = set()  # keys `keep_only` let go: reading one is a bug, not an absent key

    def present_keys(self) -> Iterable[str]:
        """The keys some slice has."""
        return self._source[0].present_keys() if self._source is not None else self.cols.keys()

    @classmethod
    def from_dicts(cls, args: list[Any]) -> ArgColumns:
        """From args dicts (anything but a dict counts as no args)."""
        if not set(map(type, args)) <= {dict}:
            args = [a if a.__class__ is dict else {} for a in args]
        present = set(chain.from_iterable(map(dict.keys, args)))
        keys = [k for k in ARG_KEYS if k in present]
        return cls(len(args), {k: list(map(dict.get, args, repeat(k), repeat(ABSENT))) for k in keys})

    @classmethod
    def concat(cls, parts: list[ArgColumns]) -> ArgColumns:
        """The slices of `parts`, one after the other."""
        keys = {k for p in parts for k in p.present_keys()}
        return cls(sum(p.n for p in parts), {k: [v for p in parts for v in p.raw(k)] for k in keys})

    def __len__(self) -> int:
        return self.n

    def raw(self, key: str) -> list[Any]:
        """The column of `key`, ABSENT where a slice lacks it; RuntimeError for a key `keep_only` dropped here or
        in the columns this one gathers from (it would read as absent everywhere: a silent wrong result)."""
        if key in self._dropped or (self._source is not None and key in self._source[0]._dropped):
            raise RuntimeError(f"args column {key!r} was released by keep_only before this read")
        col = self.cols.get(key)
        if col is None and self._source is not None and key in self._source[0].present_keys():
            src, idx = self._source
            col = self.cols[key] = list(map(src.raw(key).__getitem__, idx))
        return [ABSENT] * self.n if col is None else col

    def get(self, key: str, default: Any = None) -> list[Any]:
        """`dict.get(key, default)` per slice."""
        col = self.raw(key)
        return [default if v is ABSENT else v for v in col] if ABSENT in col else col

    def keep_only(self, keys: Iterable[str]) -> None:
        """Drop the stored columns of every key but `keys` (memory: a reader done with them lets them go)."""
        wanted = set(keys)
        self._dropped |= {k for k in ARG_KEYS if k not in wanted}
        for key in [k for k in self.cols if k not in wanted]:
            del self.cols[key]
        self.distinct = {k: v for k, v in self.distinct.items() if k in wanted}

    def take(self, idx: Sequence[int]) -> ArgColumns:
        """The args of slices `idx`, in that order (each column gathered when first read)."""
        return ArgColumns(len(idx), {}, None, (self, idx))

    def distinct_values(self, key: str) -> list[Any]:
        """The present, non-null values of `key`, each object once."""
        got = self.distinct.get(key)
        if got is not None:
            return [v for v in got if v is not None]
        col = self.raw(key)
        return [v for v in dict(zip(map(id, col), col, strict=True)).values() if v is not None and v is not ABSENT]

    def row(self, i: int) -> dict[str, Any]:
        """The args of slice i as a dict of its present keys (for per-slice formatters)."""
        if self._source is not None:
            return self._source[0].row(self._source[1][i])
        return {k: col[i] for k, col in self.cols.items() if col[i] is not ABSENT}


class SliceColumns:
    """Column lists of duration slices (X events and matched B/E pairs), built column-wise."""

    types: dict[str, set[type]]  # known types of some columns (see `from_columns`)

    def column_types(self, key: str, values: list[Any]) -> set[type]:
        """The types in column `key` (`values`): known from the parse, else one pass."""
        known = self.types.get(key)
        return set(map(type, values)) if known is None else known

    def __init__(self, xs: list[dict[str, Any]]) -> None:
        self.types = {}
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
    def from_columns(cls, cols: dict[str, Any], types: dict[str, set[type]] | None = None) -> SliceColumns:
        """From raw column lists (name, cat, pid, tid, ts, dur: the event fields, `dict.get` defaults; args:
        dicts or ArgColumns). `types` (optional): the types each of some columns holds (name, pid, tid, scalar
        args keys), as the fast parse met them: the checks then need no pass over those columns."""
        self = cls.__new__(cls)
        self.types = types or {}
        self.set_columns(*(cols[k] for k in ("name", "cat", "pid", "tid", "ts", "dur", "args")))
        return self

    def set_columns(
        self, name: list[Any], cats: list[Any], pid: list[Any], tid: list[Any], ts: list[Any], dur: list[Any],
        args: list[Any] | ArgColumns,
    ) -> None:
        """Normalise and store the columns: names as text, categories lower-cased, args as ArgColumns (from
        dicts: anything but a dict counts as no args)."""
        if not self.column_types("name", name) <= {str}:
            name = ["" if n is None else str(n) for n in name]
            self.types.pop("name", None)
        try:
            lowered = {c: "" if c is None else str(c).lower() for c in set(cats)}
        except TypeError:  # an unhashable "cat" (not a string): compare by text
            cats = [None if c is None else str(c) for c in cats]
            lowered = {c: "" if c is None else c.lower() for c in set(cats)}
        self.name: list[str] = name
        self.cat: list[str] = list(map(lowered.__getitem__, cats))
        self.pid: list[Any] = pid
        self.tid: list[Any] = tid
        self.ts: list[Any] | np.ndarray = ts  # float arrays when chrome_fast built the columns
        self.dur: list[Any] | np.ndarray = dur
        self.args: ArgColumns = args if isinstance(args, ArgColumns) else ArgColumns.from_dicts(args)


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
    memory_counters(
        ev["ts"], args.get("Device Type", 0), args.get("Device Id", 0), args.get("Total Allocated"),
        args.get("Total Reserved"), out,
    )  # fmt: skip


def memory_counters(
    ts: Any, dev_type: Any, dev_id: Any, allocated: Any, reserved: Any, out: list[tuple[Any, str, Any]]
) -> None:
    """Append the counters of one Kineto [memory] instant (its args values, absent ones already replaced
    by the defaults: Device Type/Id 0, totals None)."""
    dev = "cpu" if dev_type in (0, None) else f"cuda{dev_id}"
    if isinstance(allocated, int | float):
        out.append((ts, f"{dev}_allocated_bytes", allocated))
    if dev != "cpu" and isinstance(reserved, int | float):
        out.append((ts, f"{dev}_reserved_bytes", reserved))
