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

from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, contains, eq
from typing import Any

import orjson

try:
    import msgspec
    from msgspec import UNSET, Raw, field
except ImportError:  # pragma: no cover - msgspec is a core dependency; the reference path still works
    msgspec = None

CHUNK = 8192  # events decoded at a time: bounds the transient structs to a few MB
FLOW_PHASES = frozenset({"s", "t", "f"})
OTHER_PHASES = frozenset({"B", "E", "C", "i", "I", "n", "M"})
# every args key the importer reads or checks on a slice (chrome_check, chrome_rows, chrome_host, chrome_dma)
ARG_KEYS = (
    "device", "stream", "correlation", "External id", "Sequence number", "registers per thread", "shared memory",
    "bytes", "Input Dims", "Input type", "Concrete Inputs", "grid", "block",
)  # fmt: skip
_SLICE_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur", "args")
_FLOW_FIELDS = ("ph", "cat", "pid", "tid", "ts", "id", "bp")  # what chrome_tree.flow_deps reads


@dataclass
class FastTrace:
    """The parsed columns of a plain trace: slice columns (name, cat, pid, tid, ts, dur, args lists in
    file order), flow event dicts (their scalar fields only), counters, thread/process names, the number of
    events, of phased events, and the top-level metadata (every key but traceEvents)."""

    slices: dict[str, list[Any]]
    flows: list[dict[str, Any]]
    counters: list[tuple[Any, str, Any]]
    names: dict[str, str]
    n_events: int
    n_phased: int
    meta: dict[str, Any]


if msgspec is not None:

    def _arg(name: str) -> Any:
        return field(name=name, default=UNSET)

    class _Args(msgspec.Struct, gc=False):
        """The args keys the importer reads (see ARG_KEYS); others are skipped by the decoder."""

        device: Any = UNSET
        stream: Any = UNSET
        correlation: Any = UNSET
        external_id: Any = _arg("External id")
        sequence_number: Any = _arg("Sequence number")
        registers: Any = _arg("registers per thread")
        shared: Any = _arg("shared memory")
        bytes: Any = UNSET
        input_dims: Any = _arg("Input Dims")
        input_type: Any = _arg("Input type")
        concrete: Any = _arg("Concrete Inputs")
        grid: Any = UNSET
        block: Any = UNSET

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
        args: _Args | None = None

    _EVENTS = msgspec.json.Decoder(list[_Event])
    _RAWS = msgspec.json.Decoder(list[Raw])
    _TOP = msgspec.json.Decoder(dict[str, Raw])


def _top_level(raw: bytes) -> tuple[list[Any], dict[str, Any]] | None:
    """(raw event spans, metadata) of a trace object or bare list; None for anything else."""
    head = raw.lstrip()[:1]
    if head == b"[":
        return _RAWS.decode(raw), {}
    if head != b"{":
        return None
    top = _TOP.decode(raw)
    events = top.pop("traceEvents", None)
    if events is None or bytes(events).lstrip()[:1] != b"[":
        return None
    return _RAWS.decode(events), {k: orjson.loads(bytes(v)) for k, v in top.items()}


def fast_parse(raw: bytes) -> FastTrace | None:
    """The columns of a plain Chrome trace, or None (see module doc)."""
    if msgspec is None:
        return None
    try:
        top = _top_level(raw)
        if top is None:
            return None
        spans, meta = top
        out = FastTrace({k: [] for k in _SLICE_FIELDS}, [], [], {}, len(spans), 0, meta)
        others: list[dict[str, Any]] = []
        for a in range(0, len(spans), CHUNK):
            if not _chunk(spans, a, out, others):
                return None
    except (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError, UnicodeDecodeError):
        return None
    from nprof.capture.chrome_events import fold_other_events

    xs: list[dict[str, Any]] = []
    try:
        open_b = fold_other_events(others, [e.get("ph") for e in others], xs, out.counters, out.names)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None  # the reference raises its own error for these
    if any(open_b.values()):
        return None  # unended B: the reference draws them to the trace's end
    for e in xs:  # ended B/E pairs, after the X slices as in the reference
        for key in _SLICE_FIELDS:
            out.slices[key].append(e.get(key, "" if key == "name" else None))
    return out


def _chunk(spans: list[Any], a: int, out: FastTrace, others: list[dict[str, Any]]) -> bool:
    """Decode events spans[a:a + CHUNK] into `out` (slices, flows) and `others`; False when not plain."""
    block = b"[" + b",".join(spans[a : a + CHUNK]) + b"]"
    block.decode("utf-8")  # skipped fields are not validated by the typed decoder; the reference rejects these
    events = _EVENTS.decode(block)
    phases = list(map(attrgetter("ph"), events))
    if not set(map(type, phases)) <= {str, type(None)}:
        return False
    out.n_phased += len(phases) - phases.count(None)
    xs = list(compress(events, map(eq, phases, repeat("X"))))
    flows = list(compress(events, map(contains, repeat(FLOW_PHASES), phases)))
    if UNSET in map(attrgetter("ts"), xs) or UNSET in map(attrgetter("ts"), flows):
        return False
    cols = out.slices
    for key in _SLICE_FIELDS[:-1]:
        cols[key] += map(attrgetter(key), xs)
    cols["args"] += msgspec.to_builtins(list(map(attrgetter("args"), xs)))
    flow_cols = [list(map(attrgetter(k), flows)) for k in _FLOW_FIELDS]
    out.flows += map(dict, map(zip, repeat(_FLOW_FIELDS), zip(*flow_cols, strict=True)))
    other = [i for i, ph in enumerate(phases) if ph in OTHER_PHASES]
    others += [orjson.loads(memoryview(spans[a + i])) for i in other]
    return True
