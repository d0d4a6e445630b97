"""The fast, chunked parse of a Chrome trace: typed msgspec decoding into columns, no full event dicts.

Contract: `fast_parse(raw) -> FastTrace | None` reads the bytes of a Chrome trace (``{"traceEvents": [...]}``
or a bare event list) into what `chrome.events_to_profile` builds from fully parsed events: the slice
columns (`chrome_events.SliceColumns`), flows, counters, thread names and counts, plus the top-level metadata.
It returns None whenever the trace is anything but plain (not a JSON object or list, no ``traceEvents``,
an event that is not an object, a non-string phase, a slice or flow without ``ts``, args that are not an
object, a ``B`` never ended, invalid UTF-8, ...): the caller then runs the reference path (`chrome.load_json`
and `events_to_profile` over orjson dicts), which imports those traces or raises their one-line errors.

How: msgspec splits the event list into raw (zero-copy) spans, then decodes chunks of `CHUNK` events into
small typed structs holding only the fields the importer reads (the args keys of `ARG_KEYS`; unknown keys
are skipped without building objects), so the peak holds the file, one chunk of structs and the columns,
never a dict per event. Events of other phases (B/E/C/i/M: counters, names) are decoded one by one with
orjson and go through the reference's own fold (`chrome_events.fold_other_events`). Without msgspec installed
`fast_parse` returns None.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field
from itertools import compress, repeat
from operator import attrgetter, contains, eq, setitem
from typing import Any

import numpy as np
import orjson

from nprof.capture.chrome_events import FLOW_PHASES, OTHER_PHASES, fold_other_events

try:
    import msgspec
    from msgspec import UNSET, Raw, field
except ImportError:  # pragma: no cover - msgspec is a core dependency; the reference path still works
    msgspec = None  # type: ignore[assignment]

CHUNK = 2048  # events decoded at a time: bounds the transient structs to a few MB
# every args key the importer reads or checks on a slice (chrome_check, chrome_rows, chrome_host, chrome_dma)
ARG_KEYS = (
    "device", "stream", "correlation", "External id", "Sequence number", "registers per thread", "shared memory",
    "bytes", "Input Dims", "Input type", "Concrete Inputs", "grid", "block",
)  # fmt: skip
# the top-level keys the importer reads (manifest `trace.<key>`; deviceProperties names the GPU)
META_KEYS = ("deviceProperties", "schemaVersion", "host_name", "trace_id", "displayTimeUnit", "baseTimeNanoseconds",
             "traceName")  # fmt: skip
_SLICE_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur", "args")
_FLOW_FIELDS = ("ph", "cat", "pid", "tid", "ts", "id", "bp")  # what chrome_tree.flow_deps reads


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


def json_key(value: Any) -> bytes:
    """A compact JSON text of `value`, to key memo tables by (orjson.dumps would hold ~4 KB per result)."""
    return msgspec.json.encode(value) if msgspec is not None else bytes(orjson.dumps(value))


@dataclass
class FastTrace:
    """The parsed columns of a plain trace: slice columns (name, cat, pid, tid, ts, dur, args lists in
    file order), flow event dicts (their scalar fields only), counters, thread/process names, the number of
    events, of phased events, and the top-level metadata (every key but traceEvents)."""

    slices: dict[str, Any]  # column name -> list of values (ts/dur: float arrays once the chunks are joined)
    flows: list[dict[str, Any]]
    counters: list[tuple[Any, str, Any]]
    names: dict[str, str]
    n_events: int
    n_phased: int
    meta: dict[str, Any]
    interned: dict[Any, Any] = dc_field(default_factory=dict)  # name/cat/pid/tid values, one object each
    shapes: dict[bytes, Any] = dc_field(default_factory=dict)  # decoded list-valued args by their text


if msgspec is not None:

    _NO_RAW = Raw(b"")
    _NULL = Raw(b"null")

    def _arg(name: str) -> Any:
        return field(name=name, default=UNSET)

    class _Args(msgspec.Struct, gc=False):
        """The scalar args keys the importer reads (see ARG_KEYS); others are skipped by the decoder."""

        device: Any = UNSET
        stream: Any = UNSET
        correlation: Any = UNSET
        external_id: Any = _arg("External id")
        sequence_number: Any = _arg("Sequence number")
        registers: Any = _arg("registers per thread")
        shared: Any = _arg("shared memory")
        bytes: Any = UNSET

    class _Shapes(msgspec.Struct, gc=False):
        """The list-valued args keys as raw spans: a training loop repeats them, so each distinct text is
        decoded once and its value shared by the slices that carry it."""

        input_dims: Raw = field(name="Input Dims", default=_NO_RAW)
        input_type: Raw = field(name="Input type", default=_NO_RAW)
        concrete: Raw = field(name="Concrete Inputs", default=_NO_RAW)
        grid: Raw = _NO_RAW
        block: Raw = _NO_RAW

    class _Event(msgspec.Struct, gc=False):
        """The top-level fields of an event the importer reads, with the reference's defaults for absent
        ones (`dict.get`), except `ts` (UNSET: the reference requires it on slices and flows)."""

        ph: Any = None
        name: Any = ""
        cat: Any = None
        pid: Any = None
        tid: Any = None
        ts: Any = UNSET
        dur: Any = None
        id: Any = None
        bp: Any = None
        args: Raw = _NULL

    _EVENTS = msgspec.json.Decoder(list[_Event])
    _ARGS = msgspec.json.Decoder(list[_Args | None])
    _SHAPES = msgspec.json.Decoder(list[_Shapes | None])
    _SHAPE_KEYS: tuple[tuple[str, str], ...] = (("input_dims", "Input Dims"), ("input_type", "Input type"))
    _SHAPE_KEYS += (("concrete", "Concrete Inputs"), ("grid", "grid"), ("block", "block"))
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
        out = FastTrace({k: [] for k in _SLICE_FIELDS}, [], [], {}, len(spans), 0, meta)
        xs: list[dict[str, Any]] = []
        open_b: defaultdict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
        for a in range(0, len(spans), CHUNK):
            others = _chunk(spans, a, out, utf8)
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
    for key in ("name", "cat", "pid", "tid", "args"):  # ended B/E pairs, after the X slices as in the reference
        cols[key] += [e.get(key, "" if key == "name" else None) for e in xs]
    times = [_floats(e["ts"] for e in xs), _floats((e["dur"] for e in xs), none=0)]
    if times[0] is None or times[1] is None:
        return None
    cols["ts"] = np.concatenate([*cols["ts"], times[0]])
    cols["dur"] = np.concatenate([*cols["dur"], times[1]])
    return out


def _floats(values: Iterable[Any], none: float | None = None) -> np.ndarray | None:
    """`values` as a 1-d float64 array as the reference converts them (`none` replacing null), or None
    when they do not convert (the reference then raises its error)."""
    col = list(values) if none is None else [none if v is None else v for v in values]
    try:
        out = np.asarray(col, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if out.ndim == 1 else None


def _chunk(spans: list[Any], a: int, out: FastTrace, utf8: bool) -> list[dict[str, Any]] | None:
    """Decode events spans[a:a + CHUNK] into `out` (slices, flows); returns the chunk's other events
    (B/E/C/i/M, as dicts), None when not plain. `utf8`: check the text is valid UTF-8."""
    block = b"[" + b",".join(spans[a : a + CHUNK]) + b"]"
    if utf8:  # skipped fields are not validated by the typed decoder; the reference rejects invalid UTF-8
        block.decode("utf-8")
    events = _EVENTS.decode(block)
    phases = list(map(attrgetter("ph"), events))
    if not set(map(type, phases)) <= {str, type(None)}:
        return None
    out.n_phased += len(phases) - phases.count(None)
    xs = list(compress(events, map(eq, phases, repeat("X"))))
    flows = list(compress(events, map(contains, repeat(FLOW_PHASES), phases)))
    if UNSET in map(attrgetter("ts"), xs) or UNSET in map(attrgetter("ts"), flows):
        return None
    cols = out.slices
    for key in ("name", "cat", "pid", "tid"):
        col = list(map(attrgetter(key), xs))
        if set(map(type, col)) <= {str, int, type(None)}:
            col = list(map(out.interned.setdefault, col, col))  # one object per distinct value
        cols[key] += col
    times = [_floats(map(attrgetter("ts"), xs)), _floats(map(attrgetter("dur"), xs), none=0)]
    if times[0] is None or times[1] is None:
        return None
    cols["ts"].append(times[0])  # float arrays per chunk: no float object per slice
    cols["dur"].append(times[1])
    cols["args"] += _args(list(map(attrgetter("args"), xs)), out.shapes)
    flow_cols = [list(map(attrgetter(k), flows)) for k in _FLOW_FIELDS]
    out.flows += map(dict, map(zip, repeat(_FLOW_FIELDS), zip(*flow_cols, strict=True)))
    other = [i for i, ph in enumerate(phases) if ph in OTHER_PHASES]
    return [loads(spans[a + i]) for i in other]


def _args(raws: list[Any], shapes: dict[bytes, Any]) -> list[Any]:
    """The args of slices as dicts of the keys the importer reads (None where args is null or absent); the
    list values are decoded once per distinct text (orjson, as the reference) and shared."""
    block = b"[" + b",".join(raws) + b"]"
    dicts = msgspec.to_builtins(_ARGS.decode(block))
    found = _SHAPES.decode(block)
    if not any(found):
        return dicts
    empty = _Shapes()
    found = [f or empty for f in found]
    for attr, key in _SHAPE_KEYS:
        texts = list(map(bytes, map(attrgetter(attr), found)))
        if not any(texts):
            continue
        for text in set(texts) - shapes.keys() - {b""}:
            shapes[text] = loads(text)
        deque(map(setitem, compress(dicts, texts), repeat(key), map(shapes.__getitem__, filter(None, texts))), 0)
    return dicts
