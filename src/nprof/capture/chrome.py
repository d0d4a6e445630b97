"""Import Chrome-trace JSON (torch.profiler, Kineto, generic) into a Profile.

Contract of `import_chrome_trace(path, info=None) -> Profile`:
* accepts ``{"traceEvents": [...], ...}`` or a bare event list (also Chrome's
  unterminated array form), plain or gzip-compressed; anything else raises
  `NprofError` naming the file and the problem (one line);
* ``X`` complete slices and ``B``/``E`` pairs become instruction rows on one
  track per thread (``cpu:<tid>``, or ``cpu:<pid>.<tid>`` when several processes
  recorded host events) or per CUDA stream (``cuda:<device>:<stream>``); nested
  host slices are reduced to the work level (see `chrome_tree`), so rows of a
  track never overlap and FLOPs are counted once;
* Kineto categories: ``kernel`` -> instruction on its stream's track,
  ``gpu_memcpy`` / ``gpu_memset`` -> DMA rows (queue ``memcpy:<dev>:<stream>`` /
  ``memset:<dev>:<stream>``, direction host->device, device->host,
  device->device, host->host or ``memset``, with bytes); ``cpu_op``,
  ``cuda_runtime``, ``cuda_driver`` and uncategorised slices -> host rows;
  ``python_function`` / ``user_annotation`` / ``gpu_user_annotation`` are
  context only (module path -> ``layer``, innermost user frame -> source line,
  ``ProfilerStep#N`` -> ``iteration``); the ``Trace`` span is dropped;
* device work inherits layer/source/iteration from the host op that launched it
  (by ``correlation``) and depends on that op's row; the op's FLOPs move to its
  first tensor-engine kernel; backward ops take the layer of their forward op
  (``Sequence number``); flow events (``s``/``t``/``f``, e.g. ac2g, fwdbwd) add
  dependencies; ``C`` counters and Kineto ``[memory]`` events become counters
  (``cpu_allocated_bytes``, ``cuda0_allocated_bytes``, ``cuda0_reserved_bytes``);
* timestamps become integer ns since the first event (manifest `trace.origin_ns`: that event's
  trace time, ts x 1000); FLOPs are computed from the
  recorded input shapes (`opclass.op_flops`); ``hbm_read_bytes`` estimates memory
  reads as the bytes of an op's recorded inputs (caches ignored; on the op's
  first kernel in GPU traces, where host rows read none); other byte columns stay 0.
"""

from __future__ import annotations

import gc
import os
import zlib
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import eq, itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from nprof import __version__
from nprof.capture.chrome_check import check_events, check_flows, check_slices, check_times
from nprof.capture.chrome_rows import build_profile
from nprof.errors import NprofError
from nprof.profile import Profile, ProfileInfo
from nprof.profile.model import validated

MAX_GZIP_RATIO = 100  # real Chrome/Kineto traces compress 5-30x
GZIP_SLACK = 64 << 20  # ... plus this many bytes, for tiny files
_OTHER_PHASES = frozenset({"B", "E", "C", "i", "I", "n", "M"})
_FLOW_PHASES = frozenset({"s", "t", "f"})


def load_json(path: Path) -> Any:
    """Read and parse a JSON file (plain or gzip) with one-line errors naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NprofError(f"{path}: no such file; check the path") from None
    except OSError as exc:
        raise NprofError(f"{path}: cannot read ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip_bounded(raw, path)
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        data = _salvage_array(raw)
        if data is None:
            raise NprofError(f"{path}: not valid JSON ({exc}); is the file complete?") from None
        return data


def gunzip_bounded(raw: bytes, path: Path) -> bytes:
    """Decompress a gzip file, refusing output past MAX_GZIP_RATIO x its size + GZIP_SLACK: a gzip bomb."""
    limit = MAX_GZIP_RATIO * len(raw) + GZIP_SLACK
    out = bytearray()
    try:
        while raw:
            d = zlib.decompressobj(wbits=31)
            out += d.decompress(raw, limit + 1 - len(out))
            if len(out) > limit or d.unconsumed_tail:
                raise NprofError(
                    f"{path}: decompresses to more than {limit >> 20} MiB ({MAX_GZIP_RATIO}x the file): "
                    "a gzip bomb? refusing it"
                )
            if not d.eof:
                raise NprofError(f"{path}: truncated gzip file; re-create it")
            raw = d.unused_data  # concatenated gzip members
    except zlib.error as exc:
        raise NprofError(f"{path}: corrupt gzip file ({exc}); re-create it") from None
    return bytes(out)


def is_profile_json(data: Any) -> bool:
    """True for neuron-profile / nprof `json` output ({"summary", "instruction", ...}), not a Chrome trace."""
    return isinstance(data, dict) and "traceEvents" not in data and "instruction" in data


def trace_events(data: Any, path: Path) -> tuple[list[Any], dict[str, Any]]:
    """(events, top-level metadata) of a parsed Chrome trace; NprofError if it is not one."""
    if isinstance(data, dict):
        events = data.get("traceEvents")
        if events is None:
            raise NprofError(f"{path}: not a Chrome trace (no 'traceEvents' list); export one with torch.profiler")
        meta = {k: v for k, v in data.items() if k != "traceEvents"}
    elif isinstance(data, list):
        events, meta = data, {}
    else:
        raise NprofError(f"{path}: not a Chrome trace (JSON {type(data).__name__}, expected an object or a list)")
    if not isinstance(events, list):
        raise NprofError(f"{path}: not a Chrome trace ('traceEvents' is not a list)")
    return events, meta


def _salvage_array(raw: bytes) -> list[Any] | None:
    """Chrome's JSON Array Format may omit the closing bracket; accept that form."""
    text = raw.rstrip()
    if not text.startswith(b"["):
        return None
    try:
        data = orjson.loads(text.rstrip(b",") + b"]")
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, list) else None


def import_chrome_trace(path: str | os.PathLike[str], info: ProfileInfo | None = None) -> Profile:
    """Import a Chrome-trace JSON file as a Profile (see module doc); `info` overrides the manifest.

    Profile JSON (neuron-profile / nprof `--output-format json`) is recognised too and imported by
    `nprof.capture.profile_json`."""
    p = Path(path)
    with _gc_paused():
        data = load_json(p)
        if is_profile_json(data):
            from nprof.capture.profile_json import profile_from_json

            profile = profile_from_json(data, p)
            if info is not None:
                profile = replace(profile, info=replace(info, meta={**profile.info.meta, **info.meta}))
        else:
            events, meta = trace_events(data, p)
            profile = events_to_profile(events, meta, p, info)
            del events
        validated(profile, p)
        del data  # freed by refcount now, before the collector is back (else a full collection scans it)
    return profile


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: parsing creates millions of acyclic dicts and lists, and the collector
    would rescan them all again and again (4-5x slower parsing); they are freed by refcount anyway."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
        self.ts: list[Any] = ts
        self.dur: list[Any] = dur
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


def _parse_events(events: list[Any]) -> _Parsed:
    """Sort `events` by phase (malformed events raise AttributeError/KeyError/TypeError/ValueError)."""
    phases = list(map(dict.get, events, repeat("ph")))
    xs = list(compress(events, map(eq, phases, repeat("X"))))
    flows = list(compress(events, map(_FLOW_PHASES.__contains__, phases)))  # the parsed dicts themselves
    other_mask = list(map(_OTHER_PHASES.__contains__, phases))
    others, other_phases = list(compress(events, other_mask)), list(compress(phases, other_mask))
    counters: list[tuple[Any, str, Any]] = []
    names: dict[str, str] = {}
    open_b = _other_events(others, other_phases, xs, counters, names)
    unmatched = sum(len(v) for v in open_b.values())
    if unmatched:  # Chrome draws a slice never ended up to the end of the trace: so do we
        timed = [e["ts"] for e in others + flows if e.get("ph") != "M" and e.get("ts") is not None]
        last = max([_num(e["ts"]) + _num(e.get("dur") or 0) for e in xs] + list(map(_num, timed)))
        for stack in open_b.values():
            xs.extend({**b, "ph": "X", "dur": last - _num(b["ts"])} for b in stack)
    return _Parsed(xs, flows, counters, names, unmatched, len(phases) - phases.count(None))


def _other_events(
    others: list[dict[str, Any]],
    phases: list[str | None],
    xs: list[dict[str, Any]],
    counters: list[tuple[Any, str, Any]],
    names: dict[str, str],
) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    """Fold the B/E/C/i/M events into `xs` (ended B/E pairs), `counters` and `names`; returns the B events
    still open, per (pid, tid)."""
    open_b: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
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


def _time_arrays(
    slices: SliceColumns, parsed: _Parsed, path: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(slice ts, slice dur, counter ts, flow ts) in µs as float arrays; non-numeric times raise NprofError."""
    try:
        ts_us = np.asarray(slices.ts, dtype=np.float64)
        dur_us = np.asarray([0 if d is None else d for d in slices.dur], dtype=np.float64)
        c_ts = np.asarray([c[0] for c in parsed.counters], dtype=np.float64)
        f_ts = np.asarray(list(map(itemgetter("ts"), parsed.flows)), dtype=np.float64)
    except KeyError:
        raise NprofError(f"{path}: not a Chrome trace (a flow event has no 'ts')") from None
    except (TypeError, ValueError):
        raise NprofError(f"{path}: not a Chrome trace (an event has a non-numeric 'ts' or 'dur')") from None
    return ts_us, dur_us, c_ts, f_ts


def events_to_profile(events: list[Any], meta: dict[str, Any], path: Path, info: ProfileInfo | None = None) -> Profile:
    """Turn parsed trace events into a Profile (see module doc)."""
    events = check_events(events, path)
    try:
        parsed = _parse_events(events)
        slices = SliceColumns(parsed.xs)
        check_slices(slices, path)
        check_flows(parsed.flows, path)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise NprofError(f"{path}: not a Chrome trace (malformed event: {_describe(exc)})") from None
    if parsed.n_phased == 0:
        raise NprofError(f"{path}: not a Chrome trace (no events with a 'ph' phase)")
    if not slices.name and not parsed.counters:
        raise NprofError(f"{path}: the trace has no timed events (slices or counters); nothing to import")
    ts_us, dur_us, c_ts, f_ts = _time_arrays(slices, parsed, path)
    check_times(ts_us, dur_us, c_ts, f_ts, path)
    rows = build_profile(slices, ts_us, dur_us, parsed.counters, c_ts, parsed.flows, f_ts)
    base_info = ProfileInfo(
        device="chrome-trace",
        name=path.name,
        producer=f"nprof {__version__} (chrome-trace import)",
        device_name=_device_name(meta),
        meta={**_meta(meta, parsed.names, len(events), parsed.unmatched), "trace.origin_ns": str(rows.origin_ns)},
    )
    if info is not None:
        merged = dict(base_info.meta)
        merged.update(info.meta)
        base_info = replace(info, meta=merged, device_name=info.device_name or base_info.device_name)
    if base_info.peak_flops is None and base_info.device_name and base_info.device != "cpu":
        from nprof.capture.devices import gpu_peaks

        peaks = gpu_peaks(base_info.device_name, rows.dtype)
        if peaks is not None:
            base_info = replace(base_info, peak_flops=peaks[0], hbm_bandwidth=peaks[1], peaks_source=peaks[2])
    return Profile.build(base_info, rows.instructions, rows.dma, None, rows.counters)


def _memory_counters(ev: dict[str, Any], out: list[tuple[Any, str, Any]]) -> None:
    args = ev.get("args") or {}
    dev_type = args.get("Device Type", 0)
    dev = "cpu" if dev_type in (0, None) else f"cuda{args.get('Device Id', 0)}"
    if isinstance(args.get("Total Allocated"), int | float):
        out.append((ev["ts"], f"{dev}_allocated_bytes", args["Total Allocated"]))
    if dev != "cpu" and isinstance(args.get("Total Reserved"), int | float):
        out.append((ev["ts"], f"{dev}_reserved_bytes", args["Total Reserved"]))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc.args[0]!r}"
    if isinstance(exc, AttributeError):
        return "an event is not a JSON object"
    text = str(exc).splitlines()
    return text[0][:120] if text else type(exc).__name__


def _device_name(meta: dict[str, Any]) -> str | None:
    props = meta.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict) and props[0].get("name"):
        return str(props[0]["name"])
    return None


def _meta(meta: dict[str, Any], names: dict[str, str], n_events: int, unmatched: int) -> dict[str, str]:
    out = {"source_events": str(n_events)}
    for key in ("schemaVersion", "host_name", "trace_id", "displayTimeUnit", "baseTimeNanoseconds", "traceName"):
        if key in meta:
            out[f"trace.{key}"] = str(meta[key])
    if unmatched:
        out["unended_begin_events"] = str(unmatched)  # drawn up to the end of the trace
    for key, label in list(names.items())[:256]:
        out[key] = label
    return out
