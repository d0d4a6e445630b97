"""The fast, chunked parse of a Chrome trace: typed msgspec decoding into columns, no full event dicts.

Contract: `fast_parse(raw) -> FastTrace | None` reads the bytes of a Chrome trace (``{"traceEvents": [...]}``
or a bare event list) into what `chrome.events_to_profile` builds from fully parsed events: the slice
columns (`chrome_events.SliceColumns`), flows, counters, thread names and counts, plus the top-level metadata.
It returns None whenever the trace is anything but plain (not a JSON object or list, no ``traceEvents``,
an event that is not an object, a value of a type the typed schema does not take, a slice or flow without
``ts``, args that are not an object, a ``B`` never ended, invalid UTF-8, ...): the caller then runs the reference
path (`chrome.load_json` and `events_to_profile` over dicts), which imports those traces or raises their one-line
errors.

How: msgspec splits the event list into raw spans (views of the input), kept only as each chunk's byte
range, then decodes chunks of `CHUNK` events (one copy of their contiguous bytes each) with a typed schema into
small structs holding only the fields the importer reads, and transposes them into columns (`chrome_chunk`: why
typed, and the passes). From a `FileSource` (the importer's plain files) the file's bytes are let go once the chunk
ranges are known and each chunk is re-read from the open file (a file changed meanwhile: None), so the peak holds
the columns and one chunk of bytes and structs, not the whole file besides (mlp384.cuda of bench/chrome_import.py:
151 -> 117 MB peak extra RSS, 96 MB file); never a dict per event.
Events of other phases (B/E/C/M, rare) are decoded to dicts with `loads` and go through the reference's own
fold (`chrome_events.fold_other_events`). Numbers follow `loads`' rule in both paths. Without msgspec installed
`fast_parse` returns None.

Why msgspec (measured on this 2-core machine, CPU s, on the real-shaped traces of bench/chrome_import.py):
on mlp384 (73 MB, 210 k events) orjson into dicts takes 1.0; msgspec's typed decode of every field the importer
reads 0.13 in chunks; pyarrow's JSON reader (the events re-serialised as NDJSON, an explicit schema) 0.25 for five
fields, and it refuses a column whose type changes (Kineto's pid: a number, a string in metadata events); on
mlp384.cuda (96 MB) DuckDB's read_json 0.34 for eight columns on one thread; numba costs ~0.45 s to load in each
process before it reads a byte (HTA imports a whole 6 k-event trace in 0.14 s). So msgspec scans, and the rest is
column passes: one transposition per chunk of `CHUNK` events (`chrome_chunk`), which costs about half of a map
per field (each struct is visited once, while the chunk is in the CPU cache).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, BinaryIO

import numpy as np
import orjson

from nprof.capture.chrome_events import ABSENT, FLOW_KEYS, ArgColumns, fold_other_events

try:
    import msgspec
    from msgspec import Raw

    from nprof.capture.chrome_chunk import RAWS, SCHEMA_TYPES, Interned, loads, read_chunk
except ImportError:  # pragma: no cover - msgspec is a core dependency; the reference path still works
    msgspec = None  # type: ignore[assignment]
    loads = orjson.loads  # type: ignore[assignment]

CHUNK = 512  # events decoded at a time: their structs stay in the CPU cache for the column passes
# the top-level keys the importer reads (manifest `trace.<key>`; deviceProperties names the GPU)
META_KEYS = ("deviceProperties", "schemaVersion", "host_name", "trace_id", "displayTimeUnit", "baseTimeNanoseconds",
             "traceName")  # fmt: skip
_SLICE_FIELDS = ("name", "cat", "pid", "tid", "ts", "dur")


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
    # (a `chrome_chunk.Interned`)
    shapes: dict[str, dict[bytes, Any]] = dc_field(default_factory=dict)  # per args key: list values by text
    # (`chrome_chunk.Values`)
    args: dict[str, list[Any]] = dc_field(default_factory=dict)  # ArgColumns.cols of the X slices so far
    types: dict[str, set[type]] = dc_field(default_factory=dict)  # the types pid/tid/scalar args columns can
    # hold (the typed schema's)
    n_x: int = 0  # X slices so far


if msgspec is not None:
    _NO_RAW = Raw(b"")

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
        return RAWS.decode(raw), {}
    if head != b"{":
        return None
    top = _TOP.decode(raw)
    meta = {k: loads(v) for k in META_KEYS if len(v := getattr(top, k))}
    return top.traceEvents, meta


class FileSource:
    """A plain trace file (no gzip, no byte-order mark) to parse: its bytes (`data`) until `fast_parse` has split
    its top level into chunks, then each chunk re-read from the open file (`chunk`), so the peak holds the
    columns and one chunk, not the whole file besides. `unchanged()`: the file kept its size, mtime and inode."""

    def __init__(self, fh: BinaryIO, data: bytes) -> None:
        self.fd, self.data = fh.fileno(), data
        self.stamp = _stamp(self.fd)

    def chunk(self, lo: int, hi: int) -> bytearray:
        """Bytes lo..hi of the file as one JSON array; ValueError if the file is shorter now."""
        buf = bytearray(hi - lo + 2)
        buf[0], buf[-1] = 0x5B, 0x5D  # "[", "]"
        if os.preadv(self.fd, [memoryview(buf)[1:-1]], lo) != hi - lo:
            raise ValueError("the trace file changed while it was read")
        return buf

    def unchanged(self) -> bool:
        return _stamp(self.fd) == self.stamp


def _stamp(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return st.st_size, st.st_mtime_ns, st.st_ino


def fast_parse(raw: bytes | FileSource) -> FastTrace | None:
    """The columns of a plain Chrome trace, or None (see module doc). From a `FileSource`, its bytes are let go
    once the chunks are found, and None is returned too if the file changed meanwhile."""
    if msgspec is None:
        return None
    source, data = (raw, raw.data) if isinstance(raw, FileSource) else (None, raw)
    del raw
    if source is not None:
        source.data = b""  # `data` holds the only reference
    try:
        top = _top_level(data)
        if top is None:
            return None
        spans, meta = top
        n = len(spans)
        blocks = _Blocks(data, spans)  # each chunk's bytes; the span objects (~100 B an event) are let go here
        del spans, top
        if blocks.bounds is None:
            return None  # pragma: no cover - spans copied out of the input
        utf8 = not data.isascii()  # ASCII (the usual trace) is valid UTF-8: no per-chunk check
        if source is not None:  # the chunks are re-read from the file: its bytes go now
            blocks.view = memoryview(b"")
            del data
        flows: dict[str, Any] = {k: [] for k in FLOW_KEYS}
        out = FastTrace({k: [] for k in _SLICE_FIELDS}, flows, [], {}, n, 0, meta, Interned())
        out.types = dict(SCHEMA_TYPES)
        xs: list[dict[str, Any]] = []
        open_b: defaultdict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
        for k in range(len(blocks.bounds)):
            block = blocks(k) if source is None else source.chunk(*blocks.bounds[k])
            if utf8:  # skipped fields are not validated by the typed decoder; the reference rejects invalid UTF-8
                block.decode("utf-8")
            others = read_chunk(block, out)
            if others is None:
                return None
            fold_other_events(others, [e.get("ph") for e in others], xs, out.counters, out.names, open_b)
    except (msgspec.DecodeError, msgspec.ValidationError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    except RecursionError:  # nesting deeper than msgspec decodes: the reference refuses it in one line
        return None
    except (AttributeError, KeyError, TypeError, ValueError):
        return None  # a malformed B/E/C/i/M event: the reference raises its own error
    if any(open_b.values()) or (source is not None and not source.unchanged()):
        return None  # unended B: the reference draws them to the trace's end; a changed file: it reads it anew
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


class _Blocks:
    """JSON arrays of `CHUNK` consecutive event spans of `raw`: one copy of the bytes from a chunk's first span
    to its last (msgspec's Raw spans are views of the input, and only commas and blanks lie between them).
    Only each chunk's byte range is kept (`bounds`; None when a span is not a view of `raw`)."""

    def __init__(self, raw: bytes, spans: list[Any]) -> None:
        self.view: memoryview = memoryview(raw)
        base = _address(raw)
        bounds = []
        for a in range(0, len(spans), CHUNK):
            first, last = spans[a], spans[min(a + CHUNK, len(spans)) - 1]
            lo, hi = _address(first) - base, _address(last) - base + len(last)
            bounds.append((lo, hi))
        ok = all(0 <= lo <= hi <= len(raw) for lo, hi in bounds)
        self.bounds: list[tuple[int, int]] | None = bounds if ok else None

    def __call__(self, k: int) -> bytes:
        """The events of chunk k as one JSON array."""
        lo, hi = self.bounds[k]  # type: ignore[index]
        return b"".join((b"[", self.view[lo:hi], b"]"))


def _address(buffer: Any) -> int:
    """The memory address of a buffer's first byte."""
    return int(np.frombuffer(buffer, np.uint8).__array_interface__["data"][0])
