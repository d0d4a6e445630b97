"""The fast, chunked parse of a Chrome trace: typed msgspec decoding into columns, no full event dicts.

Contract: `fast_parse(raw) -> FastTrace | None` reads the bytes of a Chrome trace (``{"traceEvents": [...]}``
or a bare event list) into what `chrome.events_to_profile` builds from fully parsed events: the slice
columns (`chrome_events.SliceColumns`), flows, counters, thread names and counts, plus the top-level metadata.
It returns None whenever the trace is anything but plain (not a JSON object or list, no ``traceEvents``,
an event that is not an object, a non-string phase, a slice or flow without ``ts``, args that are not an
object, a ``B`` never ended, invalid UTF-8, ...): the caller then runs the reference path (`chrome.load_json`
and `events_to_profile` over dicts), which imports those traces or raises their one-line errors.

How: msgspec splits the event list into raw spans (views of the input), then decodes chunks of `CHUNK`
events (one copy of their contiguous bytes each) into small typed structs holding only the fields the
importer reads (the args keys of `ARG_KEYS`, list values as raw text decoded once per distinct text and
shared; unknown keys are skipped without building objects), and reads them into columns, one C-level map
per field (counting the types of pid/tid and scalar args on the way, for the checks): slices
(args as `chrome_events.ArgColumns`), flows (`chrome_events.FLOW_KEYS`), Kineto [memory] counters. The peak
holds the file, one chunk of structs and the columns, never a dict per event. Events of other phases
(B/E/C/M, rare) are decoded to dicts with `loads` and go through the reference's own fold
(`chrome_events.fold_other_events`). Numbers follow `loads`' rule in both paths. Without msgspec installed
`fast_parse` returns None.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field
from itertools import compress, repeat
from operator import attrgetter, contains, eq
from typing import Any

import numpy as np
import orjson

from nprof.capture.chrome_events import (
    ABSENT,
    ARG_KEYS,
    FLOW_KEYS,
    FLOW_PHASES,
    OTHER_PHASES,
    ArgColumns,
    fold_other_events,
    memory_counters,
)

try:
    import msgspec
    from msgspec import UNSET, Raw, field
except ImportError:  # pragma: no cover - msgspec is a core dependency; the reference path still works
    msgspec = None  # type: ignore[assignment]

CHUNK = 2048  # events decoded at a time: bounds the transient structs to a few MB
# the top-level keys the importer reads (manifest `trace.<key>`; deviceProperties names the GPU)
META_KEYS = ("deviceProperties", "schemaVersion", "host_name", "trace_id", "displayTimeUnit", "baseTimeNanoseconds",
             "traceName")  # fmt: skip
_SLICE_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur")
_INTERN_FLOW = frozenset({"cat", "pid", "tid"})


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(raw: bytes | memoryview) -> Any:
    """Decode JSON text as both import paths read it: msgspec's rules (integers exact at any size) and a
    number beyond the double range read as +-inf (as JavaScript's JSON.parse does), not a refusal. The fast
    path skips the numbers it does not read without a range check, so this keeps the two paths equal: an
    unread 1e400 is accepted by both, a read one is refused by the checks (times, bytes, counters).
    Invalid JSON raises ValueError (msgspec.DecodeError, json.JSONDecodeError) or RecursionError."""
    if msgspec is None:
        return orjson.loads(raw)
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        if not str(exc).startswith("Number out of range"):
            raise
    return json.loads(bytes(raw), parse_constant=_no_constant)  # Python's json: 1e400 -> inf, big ints exact


@dataclass
class FastTrace:
    """The parsed columns of a plain trace: slice columns (name, cat, pid, tid, ts, dur, args lists in
    file order), flow event dicts (their scalar fields only), counters, thread/process names, the number of
    events, of phased events, and the top-level metadata (every key but traceEvents)."""

    slices: dict[str, Any]  # column name -> list of values (ts/dur: float arrays once the chunks are joined;
    # args: ArgColumns once joined)
    flows: dict[str, Any]  # FLOW_KEYS columns (ts: float arrays per chunk, then one array)
    counters: list[tuple[Any, str, Any]]
    names: dict[str, str]
    n_events: int
    n_phased: int
    meta: dict[str, Any]
    interned: dict[Any, Any] = dc_field(default_factory=dict)  # name/cat/pid/tid values, one object each
    shapes: dict[str, dict[bytes, Any]] = dc_field(default_factory=dict)  # per args key: list values by text
    args: dict[str, list[Any]] = dc_field(default_factory=dict)  # ArgColumns.cols of the X slices so far
    types: dict[str, set[type]] = dc_field(default_factory=dict)  # the types in pid/tid/scalar args columns
    n_x: int = 0  # X slices so far


if msgspec is not None:

    _NO_RAW = Raw(b"")

    def _arg(name: str) -> Any:
        return field(name=name, default=UNSET)

    class _Args(msgspec.Struct, gc=False):
        """The args keys the importer reads (ARG_KEYS; others are skipped by the decoder): scalars as values
        (UNSET = ABSENT where absent), list values as raw spans: a training loop repeats them, so each
        distinct text is decoded once and its value shared by the slices that carry it."""

        device: Any = UNSET
        stream: Any = UNSET
        correlation: Any = UNSET
        external_id: Any = _arg("External id")
        sequence_number: Any = _arg("Sequence number")
        registers: Any = _arg("registers per thread")
        shared: Any = _arg("shared memory")
        bytes: Any = UNSET
        input_dims: Raw = field(name="Input Dims", default=_NO_RAW)
        input_type: Raw = field(name="Input type", default=_NO_RAW)
        concrete: Raw = field(name="Concrete Inputs", default=_NO_RAW)
        grid: Raw = _NO_RAW
        block: Raw = _NO_RAW
        # the keys of Kineto's [memory] instants (read by `_memory`, after the ARG_KEYS above)
        total_allocated: Any = _arg("Total Allocated")
        total_reserved: Any = _arg("Total Reserved")
        device_type: Any = _arg("Device Type")
        device_id: Any = _arg("Device Id")

    class _Event(msgspec.Struct, gc=False):
        """The top-level fields of an event the importer reads, with the reference's defaults for absent
        ones (`dict.get`), except `ts` (UNSET: the reference requires it on slices and flows). Args that
        are not an object (or null) fail the decode: the reference path then takes the trace."""

        ph: Any = None
        name: Any = ""
        cat: Any = None
        pid: Any = None
        tid: Any = None
        ts: Any = UNSET
        dur: Any = None
        id: Any = None
        bp: Any = None
        args: _Args | None = None

    _EVENTS = msgspec.json.Decoder(list[_Event])
    _NO_ARGS = _Args()
    # one getter per column: a map per column costs less than a tuple per event and a transposition
    _ARG_GETS = tuple(map(attrgetter, _Args.__struct_fields__[: len(ARG_KEYS)]))  # ARG_KEYS: 8 scalars, raw spans
    _X_GETS = tuple(map(attrgetter, ("name", "cat", "pid", "tid", "ts", "dur", "args")))
    _FLOW_GETS = tuple(map(attrgetter, FLOW_KEYS))
    _INTERNED = {str, int, type(None), type(UNSET)}
    _ABSENT_ONLY = {type(UNSET)}
    _NUMBER_TYPES = frozenset({int, float, bool})  # isinstance(v, int | float) for JSON values
    _INSTANTS = frozenset({"i", "I", "n"})  # equal values of these types are interchangeable
    _RAWS = msgspec.json.Decoder(list[Raw])

    class _Top(msgspec.Struct, gc=False):
        """A trace object: its events as raw spans and the metadata keys the importer reads (META_KEYS)."""

        traceEvents: list[Raw]
        deviceProperties: Raw = _NO_RAW
        schemaVersion: Raw = _NO_RAW
        host_name: Raw = _NO_RAW
        trace_id: Raw = _NO_RAW
        displayTimeUnit: Raw = _NO_RAW
        baseTimeNanoseconds: Raw = _NO_RAW
        traceName: Raw = _NO_RAW

    _TOP = msgspec.json.Decoder(_Top)


def _first_byte(raw: bytes) -> bytes:
    """The first byte of `raw` that is not whitespace (b"" if none), without copying the whole buffer."""
    for start in range(0, len(raw), 4096):
        head = raw[start : start + 4096].lstrip()
        if head:
            return head[:1]
    return b""


def _top_level(raw: bytes) -> tuple[list[Any], dict[str, Any]] | None:
    """(raw event spans, metadata) of a trace object or bare list; None for anything else."""
    head = _first_byte(raw)
    if head == b"[":
        return _RAWS.decode(raw), {}
    if head != b"{":
        return None
    top = _TOP.decode(raw)
    meta = {k: loads(v) for k in META_KEYS if len(v := getattr(top, k))}
    return top.traceEvents, meta


def fast_parse(raw: bytes) -> FastTrace | None:
    """The columns of a plain Chrome trace, or None (see module doc)."""
    if msgspec is None:
        return None
    try:
        top = _top_level(raw)
        if top is None:
            return None
        spans, meta = top
        utf8 = not raw.isascii()  # ASCII (the usual trace) is valid UTF-8: no per-chunk check
        flows: dict[str, Any] = {k: [] for k in FLOW_KEYS}
        out = FastTrace({k: [] for k in _SLICE_FIELDS}, flows, [], {}, len(spans), 0, meta)
        xs: list[dict[str, Any]] = []
        open_b: defaultdict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
        blocks = _Blocks(raw, spans)
        for a in range(0, len(spans), CHUNK):
            others = _chunk(blocks, a, out, utf8)
            if others is None:
                return None
            fold_other_events(others, [e.get("ph") for e in others], xs, out.counters, out.names, open_b)
    except (msgspec.DecodeError, msgspec.ValidationError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    except RecursionError:  # nesting deeper than msgspec decodes: the reference refuses it in one line
        return None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None  # a malformed B/E/C/i/M event: the reference raises its own error
    if any(open_b.values()):
        return None  # unended B: the reference draws them to the trace's end
    cols = out.slices
    for key in ("name", "cat", "pid", "tid"):  # ended B/E pairs, after the X slices as in the reference
        cols[key] += [e.get(key, "" if key == "name" else None) for e in xs]
    distinct = {k: [v for v in memo.values() if v is not ABSENT] for k, memo in out.shapes.items()}
    cols["args"] = ArgColumns(out.n_x, out.args, distinct)
    if xs:
        cols["args"] = ArgColumns.concat([cols["args"], ArgColumns.from_dicts([e.get("args") for e in xs])])
        out.types = {}  # the B/E pairs' values are not counted: the checks look at every value
    out.args = {}
    times = [_floats(e["ts"] for e in xs), _floats((e["dur"] for e in xs), none=0)]
    if times[0] is None or times[1] is None:
        return None
    cols["ts"] = np.concatenate([*cols["ts"], times[0]])
    out.flows["ts"] = np.concatenate([np.zeros(0), *out.flows["ts"]])
    cols["dur"] = np.concatenate([*cols["dur"], times[1]])
    return out


def _floats(values: Iterable[Any], none: float | None = None) -> np.ndarray | None:
    """`values` as a 1-d float64 array as the reference converts them (`none` replacing null), or None
    when they do not convert (the reference then raises its error)."""
    col = values if isinstance(values, list | tuple) else list(values)
    if none is not None and None in col:
        col = [none if v is None else v for v in col]
    try:
        out = np.asarray(col, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if out.ndim == 1 else None


def _flows(flows: list[Any], out: FastTrace) -> None:
    """Append a chunk's flow events to the columns `out.flows` (repeated cat/pid/tid values interned, ts as
    floats; ph and bp are one-character strings, which Python shares already)."""
    for key, get in zip(FLOW_KEYS, _FLOW_GETS, strict=True):
        col = list(map(get, flows))
        if key == "ts":
            ts = _floats(col)
            if ts is None:
                raise ValueError("a flow event has a non-numeric ts")  # the reference refuses it
            out.flows[key].append(ts)
        elif key in _INTERN_FLOW and set(map(type, col)) <= _INTERNED:
            out.flows[key] += map(out.interned.setdefault, col, col)
        else:
            out.flows[key] += col


class _Blocks:
    """JSON arrays of consecutive event spans of `raw`: one copy of the bytes from the first span to the last
    (msgspec's Raw spans are views of the input, and only commas and blanks lie between them), else joined."""

    def __init__(self, raw: bytes, spans: list[Any]) -> None:
        self.spans, self.view, self.size, self.base = spans, memoryview(raw), len(raw), _address(raw)

    def __call__(self, a: int, b: int) -> bytes:
        """The events spans[a:b] as one JSON array."""
        first, last = self.spans[a], self.spans[b - 1]
        lo, hi = _address(first) - self.base, _address(last) - self.base + len(last)
        if 0 <= lo <= hi <= self.size:
            return b"".join((b"[", self.view[lo:hi], b"]"))
        return b"[" + b",".join(self.spans[a:b]) + b"]"  # pragma: no cover - spans copied out of the input


def _address(buffer: Any) -> int:
    """The memory address of a buffer's first byte."""
    return int(np.frombuffer(buffer, np.uint8).__array_interface__["data"][0])


def _chunk(blocks: _Blocks, a: int, out: FastTrace, utf8: bool) -> list[dict[str, Any]] | None:
    """Decode events spans[a:a + CHUNK] into `out` (slices, flows, [memory] counters); returns the chunk's
    other events (B/E/C/i/M, as dicts: none when all are instants), None when not plain. `utf8`: check the
    text is valid UTF-8."""
    spans = blocks.spans
    block = blocks(a, min(a + CHUNK, len(spans)))
    if utf8:  # skipped fields are not validated by the typed decoder; the reference rejects invalid UTF-8
        block.decode("utf-8")
    events = _EVENTS.decode(block)
    phases = list(map(attrgetter("ph"), events))
    if not set(map(type, phases)) <= {str, type(None)}:
        return None
    out.n_phased += len(phases) - phases.count(None)
    xs = list(compress(events, map(eq, phases, repeat("X"))))
    flows = list(compress(events, map(contains, repeat(FLOW_PHASES), phases)))
    x_cols = [list(map(get, xs)) for get in _X_GETS]  # the X slices' fields as columns: C-level passes
    if UNSET in x_cols[4] or UNSET in map(attrgetter("ts"), flows):
        return None
    cols = out.slices
    for key, col in zip(("name", "cat", "pid", "tid"), x_cols, strict=False):
        types = set(map(type, col))
        out.types.setdefault(key, set()).update(types)
        if types <= _INTERNED:
            cols[key] += map(out.interned.setdefault, col, col)  # one object per distinct value
        else:
            cols[key] += col
    times = [_floats(x_cols[4]), _floats(x_cols[5], none=0)]
    if times[0] is None or times[1] is None:
        return None
    cols["ts"].append(times[0])  # float arrays per chunk: no float object per slice
    cols["dur"].append(times[1])
    _args(x_cols[6], out)
    _flows(flows, out)
    is_other = list(map(OTHER_PHASES.__contains__, phases))
    others = list(compress(events, is_other))
    if set(compress(phases, is_other)) <= _INSTANTS:  # instants only (Kineto's [memory]): typed, no dicts
        _memory(others, out.counters)
        return []
    return loads(b"[" + b",".join(compress(spans[a : a + len(phases)], is_other)) + b"]")


def _memory(instants: list[Any], counters: list[tuple[Any, str, Any]]) -> None:
    """Append the counters of Kineto [memory] instants (typed events), by the reference's rule
    (`chrome_events.memory_counters`: a total counts when it is a number, bools included), with the
    counter names made once per distinct (Device Type, Device Id) values and types."""
    mem = list(compress(instants, map(eq, map(attrgetter("name"), instants), repeat("[memory]"))))
    times = list(map(attrgetter("ts"), mem))
    if UNSET in times:
        raise KeyError("ts")
    labels: dict[tuple[Any, ...], tuple[str, str | None]] = {}
    append = counters.append
    for ts, a in zip(times, map(attrgetter("args"), mem), strict=True):
        a = a or _NO_ARGS
        dev_type, dev_id = a.device_type, a.device_id
        key = (dev_type, dev_id, dev_type.__class__, dev_id.__class__)  # 1, 1.0 and True name differently
        names = labels.get(key)
        if names is None:
            names = labels[key] = _memory_names(0 if dev_type is UNSET else dev_type, 0 if dev_id is UNSET else dev_id)
        if a.total_allocated.__class__ in _NUMBER_TYPES:
            append((ts, names[0], a.total_allocated))
        if names[1] is not None and a.total_reserved.__class__ in _NUMBER_TYPES:
            append((ts, names[1], a.total_reserved))


def _memory_names(dev_type: Any, dev_id: Any) -> tuple[str, str | None]:
    """(allocated counter, reserved counter or None) of a [memory] instant's device, as `memory_counters`
    names them (it is the rule: each name is read off a one-instant run of it)."""
    out: list[tuple[Any, str, Any]] = []
    memory_counters(0, dev_type, dev_id, 0, 0, out)
    return out[0][1], (out[1][1] if len(out) > 1 else None)


def _args(found: list[Any], out: FastTrace) -> None:
    """Append the args structs of a chunk's X slices (None where args is null or absent) to the columns
    `out.args` (ARG_KEYS; a key enters when a slice first has it); list values are decoded once per distinct
    text (`loads`, as the reference) and shared. The types met in each scalar column are added to
    `out.types` (`chrome_check.check_slices` then needs no pass of its own)."""
    m = len(found)
    if None in found:
        found = [f or _NO_ARGS for f in found]
    for k, (key, get) in enumerate(zip(ARG_KEYS, _ARG_GETS, strict=True)):
        col: list[Any] | tuple[Any, ...] = list(map(get, found))
        if k >= 8:  # raw spans
            if col.count(_NO_RAW) == m:
                col = ()
            else:
                texts = list(map(bytes, col))
                shapes = out.shapes.setdefault(key, {})
                for text in set(texts) - shapes.keys():
                    shapes[text] = loads(text) if text else ABSENT
                col = list(map(shapes.__getitem__, texts))
        elif (types := set(map(type, col))) == _ABSENT_ONLY:
            col = ()
        else:
            out.types.setdefault(key, set()).update(types)
            if k in (5, 6, 7) and types <= _INTERNED:  # registers, shared memory, bytes: memo keys
                col = list(map(out.interned.setdefault, col, col))
        have = out.args.get(key)
        if col:
            if have is None:
                out.args[key] = have = [ABSENT] * out.n_x
            have += col
        elif have is not None:
            have += repeat(ABSENT, m)
    out.n_x += m
