"""One chunk of a plain Chrome trace decoded into columns: the typed schema and the column passes of `chrome_fast`.

Contract: `read_chunk(block, trace)` decodes `block` (a JSON array of one chunk of the input's events) with the
typed msgspec schema below and appends its X slices, flows and Kineto [memory] counters to the columns of `trace`
(a `chrome_fast.FastTrace`); it returns the chunk's other events (B/E/C/i/M) as dicts for the reference's fold
(none when they are all instants), or None when the chunk is not plain. Anything the schema refuses raises
msgspec.ValidationError (the caller then takes the reference path, which imports the trace or raises its one-line
error). Args keys the checks alone read (`External id`) are validated by the schema and not stored.

Why typed: the schema states the types the checks allow (`chrome_check`): pid/tid int, string or null, the scalar
args a number, string or null, ts/dur numbers, names strings; msgspec then validates each value in C as it reads it
and the columns need no type pass of their own (`FastTrace.types` records the schema's types). The schema is
narrower than the checks where a value would need care (a float or bool pid, a null dur, a non-string name...):
such traces, never written by torch.profiler or Kineto, take the reference path. A chunk costs msgspec's decode,
one transposition of its structs (`msgspec.structs.astuple` + `zip`: each struct visited once) and a few C-level
passes per column (interning, counts, list values looked up by text); no Python code runs per event.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, contains, eq
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from msgspec import UNSET, Raw, UnsetType, field
from msgspec.structs import astuple

from nprof.capture.chrome_events import ABSENT, ARG_KEYS, FLOW_KEYS, FLOW_PHASES, OTHER_PHASES, memory_counters

if TYPE_CHECKING:
    from nprof.capture.chrome_fast import FastTrace

_Scalar = int | float | str | None  # an args value the checks allow (chrome_check._ARG_SCALARS)
_Key = int | str | None  # a value that keys a memo (interned: int and str are never equal to each other)
_NO_RAW = Raw(b"")


class _Args(msgspec.Struct, gc=False):
    """The args keys the importer reads (ARG_KEYS; others are skipped by the decoder): scalars as values
    (UNSET = ABSENT where absent), list values as raw spans: a training loop repeats them, so each distinct
    text is decoded once and its value shared by the slices that carry it."""

    device: _Scalar | UnsetType = UNSET
    stream: _Scalar | UnsetType = UNSET
    correlation: _Scalar | UnsetType = UNSET
    external_id: _Scalar | UnsetType = field(name="External id", default=UNSET)
    sequence_number: _Scalar | UnsetType = field(name="Sequence number", default=UNSET)
    registers: _Key | UnsetType = field(name="registers per thread", default=UNSET)
    shared: _Key | UnsetType = field(name="shared memory", default=UNSET)
    bytes: int | UnsetType | None = UNSET
    input_dims: Raw = field(name="Input Dims", default=_NO_RAW)
    input_type: Raw = field(name="Input type", default=_NO_RAW)
    concrete: Raw = field(name="Concrete Inputs", default=_NO_RAW)
    grid: Raw = _NO_RAW
    block: Raw = _NO_RAW
    # the keys of Kineto's [memory] instants (read by `_memory`, by the reference's rule: any value)
    total_allocated: Any = field(name="Total Allocated", default=UNSET)
    total_reserved: Any = field(name="Total Reserved", default=UNSET)
    device_type: Any = field(name="Device Type", default=UNSET)
    device_id: Any = field(name="Device Id", default=UNSET)


class _Event(msgspec.Struct, gc=False):
    """The top-level fields of an event the importer reads, with the reference's defaults for absent ones
    (`dict.get`), except `ts` (UNSET: the reference requires it on slices and flows)."""

    ph: str | None = None
    name: str = ""
    cat: str | None = None
    pid: _Key = None
    tid: _Key = None
    ts: float | UnsetType = UNSET
    dur: float = 0.0
    id: Any = None
    bp: Any = None
    args: _Args | None = None


EVENTS = msgspec.json.Decoder(list[_Event])
RAWS = msgspec.json.Decoder(list[Raw])
_NO_ARGS = _Args()
# read by the checks only, whose rule (a number, string or null) the schema applied as it decoded: not stored
_CHECKED_ONLY = frozenset({"External id"})
_INTERNED_ARGS = frozenset({"registers per thread", "shared memory", "bytes"})  # memo keys downstream
_FIELDS = _Event.__struct_fields__
_PH, _NAME, _TS, _ARGS = map(attrgetter, ("ph", "name", "ts", "args"))
_INTERN_FLOW = frozenset({"ph", "cat", "pid", "tid"})  # (msgspec makes a new string for each "s", "f"...)
_STRINGS = frozenset({str, type(None)})
_NUMBERS = frozenset({int, float, bool})  # isinstance(v, int | float) for JSON values
_INSTANTS = frozenset({"i", "I", "n"})
# the types each column can hold, by the schema (the checks read these instead of a pass over the column)
_KEY_TYPES = {int, str, type(None)}
_ARG_TYPES = {int, float, str, type(None), UnsetType}
SCHEMA_TYPES: dict[str, set[type]] = {
    "name": {str}, "pid": _KEY_TYPES, "tid": _KEY_TYPES, **dict.fromkeys(ARG_KEYS[:8], _ARG_TYPES),
    "registers per thread": _KEY_TYPES | {UnsetType}, "shared memory": _KEY_TYPES | {UnsetType},
    "bytes": {int, type(None), UnsetType},
}  # fmt: skip


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(raw: bytes | memoryview) -> Any:
    """Decode JSON text as both import paths read it: msgspec's rules (integers exact at any size) and a
    number beyond the double range read as +-inf (as JavaScript's JSON.parse does), not a refusal. The fast
    path skips the numbers it does not read without a range check, so this keeps the two paths equal: an
    unread 1e400 is accepted by both, a read one is refused by the checks (times, bytes, counters), or by the
    schema (the trace then takes the reference path).
    Invalid JSON raises ValueError (msgspec.DecodeError, json.JSONDecodeError) or RecursionError."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        if not str(exc).startswith("Number out of range"):
            raise
    return json.loads(bytes(raw), parse_constant=_no_constant)  # Python's json: 1e400 -> inf, big ints exact


class Interned(dict[Any, Any]):
    """One object per distinct value: `interned[v]` is the first value equal to v seen (keys are ints, strings,
    None and UNSET only, as the schema types them: 1, 1.0 and True would collide)."""

    def __missing__(self, key: Any) -> Any:
        self[key] = key
        return key


def read_chunk(block: bytes | bytearray, trace: FastTrace) -> list[Any] | None:
    """Decode one chunk into `trace`'s columns (see module doc)."""
    events = EVENTS.decode(block)
    phases = list(map(_PH, events))
    kinds = set(phases)
    trace.n_phased += len(phases) - phases.count(None)
    xs = events if kinds == {"X"} else list(compress(events, map(eq, phases, repeat("X"))))
    if not _slices(_columns(xs), trace):
        return None
    if not kinds.isdisjoint(FLOW_PHASES):
        _flows(_columns(list(compress(events, map(contains, repeat(FLOW_PHASES), phases)))), trace)
    if kinds.isdisjoint(OTHER_PHASES):
        return []
    is_other = list(map(OTHER_PHASES.__contains__, phases))
    if kinds & OTHER_PHASES <= _INSTANTS:  # instants only (Kineto's [memory]): typed, no dicts
        _memory(list(compress(events, is_other)), trace.counters)
        return []
    spans = RAWS.decode(block)  # the chunk's events as raw spans: only these are decoded to dicts
    return loads(b"[" + b",".join(compress(spans, is_other)) + b"]")


def _columns(events: list[Any]) -> dict[str, tuple[Any, ...]]:
    """The fields of `events` (structs) as columns: one pass over the structs (a tuple each), transposed."""
    if not events:
        return dict.fromkeys(_FIELDS, ())
    return dict(zip(_FIELDS, zip(*map(astuple, events), strict=True), strict=True))


def _slices(xs: dict[str, Any], trace: FastTrace) -> bool:
    """Append the columns of X slices `xs` to the slice columns; False when one has no ts (not plain)."""
    cols, intern = trace.slices, trace.interned.__getitem__
    for key in ("name", "cat", "pid", "tid"):
        cols[key] += map(intern, xs[key])  # one object per distinct value
    try:
        ts = np.array(xs["ts"], np.float64)  # float arrays per chunk: no float object per slice
    except TypeError:  # UNSET: a slice without ts
        return False
    cols["ts"].append(ts)
    cols["dur"].append(np.array(xs["dur"], np.float64))
    _args(xs["args"], trace)
    return True


def _flows(flows: dict[str, Any], trace: FastTrace) -> None:
    """Append a chunk's flow events (columns) to the columns `trace.flows` (cat/pid/tid interned, ts as floats;
    ph and bp are one-character strings, which Python shares already)."""
    intern = trace.interned.__getitem__
    for key in FLOW_KEYS:
        if key == "ts":
            try:
                trace.flows[key].append(np.array(flows[key], np.float64))
            except TypeError:  # UNSET
                raise ValueError("a flow event has no ts") from None  # the reference refuses it
        elif key in _INTERN_FLOW or (key == "bp" and set(map(type, flows[key])) <= _STRINGS):
            trace.flows[key] += map(intern, flows[key])
        else:
            trace.flows[key] += flows[key]


def _memory(instants: list[Any], counters: list[tuple[Any, str, Any]]) -> None:
    """Append the counters of Kineto [memory] instants (typed events), by the reference's rule
    (`chrome_events.memory_counters`: a total counts when it is a number, bools included): column-wise when
    the instants share one device and their totals are numbers, else instant by instant."""
    mem = list(compress(instants, map(eq, map(_NAME, instants), repeat("[memory]"))))
    times = list(map(_TS, mem))
    if UNSET in times:
        raise KeyError("ts")
    args = list(map(_ARGS, mem))
    if None in args:
        args = [a or _NO_ARGS for a in args]
    dev_type, dev_id = list(map(attrgetter("device_type"), args)), list(map(attrgetter("device_id"), args))
    allocated, reserved = list(map(attrgetter("total_allocated"), args)), list(map(attrgetter("total_reserved"), args))
    devices = set(zip(dev_type, dev_id, map(type, dev_type), map(type, dev_id), strict=True))  # 1, 1.0, True apart
    names = _memory_names(*[0 if v is UNSET else v for v in next(iter(devices))[:2]]) if devices else ("", None)
    if len(devices) == 1 and set(map(type, allocated if names[1] is None else chain(allocated, reserved))) <= _NUMBERS:
        first = zip(times, repeat(names[0]), allocated)
        if names[1] is None:
            counters += first
        else:
            counters += chain.from_iterable(zip(first, zip(times, repeat(names[1]), reserved), strict=True))
        return
    labels: dict[tuple[Any, ...], tuple[str, str | None]] = {}
    found: tuple[str, str | None] | None
    for ts, dt, di, alloc, res in zip(times, dev_type, dev_id, allocated, reserved, strict=True):
        key = (dt, di, dt.__class__, di.__class__)
        found = labels.get(key)
        if found is None:
            found = labels[key] = _memory_names(0 if dt is UNSET else dt, 0 if di is UNSET else di)
        if alloc.__class__ in _NUMBERS:
            counters.append((ts, found[0], alloc))
        if found[1] is not None and res.__class__ in _NUMBERS:
            counters.append((ts, found[1], res))


def _memory_names(dev_type: Any, dev_id: Any) -> tuple[str, str | None]:
    """(allocated counter, reserved counter or None) of a [memory] instant's device, as `memory_counters`
    names them (it is the rule: each name is read off a one-instant run of it)."""
    out: list[tuple[Any, str, Any]] = []
    memory_counters(0, dev_type, dev_id, 0, 0, out)
    return out[0][1], (out[1][1] if len(out) > 1 else None)


def _args(found: list[Any] | tuple[Any, ...], trace: FastTrace) -> None:
    """Append the args structs of a chunk's X slices (None where args is null or absent) to the columns
    `trace.args` (ARG_KEYS; a key enters when a slice first has it); list values are decoded once per distinct
    text (`loads`, as the reference) and shared."""
    m = len(found)
    if None in found:
        found = [f or _NO_ARGS for f in found]
    columns = zip(*map(astuple, found), strict=True) if m else repeat((), len(ARG_KEYS))  # one pass over the structs
    col: Sequence[Any]
    for k, (key, col) in enumerate(zip(ARG_KEYS, columns, strict=False)):
        if key in _CHECKED_ONLY:
            continue
        if k >= 8:  # raw spans
            col = () if col.count(_NO_RAW) == m else _shared_values(col, trace, key)
        elif col.count(UNSET) == m:
            col = ()
        elif key in _INTERNED_ARGS:
            col = list(map(trace.interned.__getitem__, col))
        have = trace.args.get(key)
        if col:
            if have is None:
                trace.args[key] = have = [ABSENT] * trace.n_x
            have += col
        elif have is not None:
            have += repeat(ABSENT, m)
    trace.n_x += m


class Values(dict[bytes, Any]):
    """JSON texts -> their values (`loads`; ABSENT for b""), each decoded on its first lookup."""

    def __missing__(self, text: bytes) -> Any:
        value = self[text] = loads(text) if text else ABSENT
        return value


def _shared_values(raws: tuple[Any, ...], trace: FastTrace, key: str) -> list[Any]:
    """The values of args `key`'s raw JSON spans (ABSENT for an empty one), one object per distinct text
    (`trace.shapes[key]`, updated)."""
    shapes = trace.shapes.get(key)
    if shapes is None:
        shapes = trace.shapes[key] = Values()
    texts = b"\n".join(raws).split(b"\n")  # one C-level pass: JSON values hold no raw newline inside a string
    if len(texts) != len(raws):  # a newline between the tokens of a value (an indented file): one at a time
        texts = list(map(bytes, raws))
    return list(map(shapes.__getitem__, texts))
