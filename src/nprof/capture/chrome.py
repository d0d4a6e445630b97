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

Parsing: a plain trace is decoded chunk by chunk into columns (`chrome_fast`, msgspec); anything else
(and every trace when msgspec is missing) goes through the reference path: dicts per event
(`parse_json`, `chrome_events.parse_events`). Both read numbers by one rule (`chrome_fast.loads`): integers
exact at any size, a number beyond the double range as +-inf (refused where the importer reads it). Both
give the same Profile (tests/capture/test_chrome_fast.py).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nprof import __version__
from nprof.capture.chrome_check import check_counters, check_events, check_flows, check_slices, check_times
from nprof.capture.chrome_events import ABSENT, SliceColumns, flow_columns, parse_events
from nprof.capture.chrome_fast import META_KEYS, FastTrace, FileSource, fast_parse, loads
from nprof.capture.chrome_rows import build_profile, numpy_array
from nprof.capture.devices import gpu_peaks  # small: imported with the importer, not in its first run
from nprof.errors import NprofError
from nprof.gcpause import gc_paused
from nprof.profile import Profile, ProfileInfo
from nprof.profile.model import validated
from nprof.profile.schema import TABLES

MAX_GZIP_RATIO = 100  # real Chrome/Kineto traces compress 5-30x
GZIP_SLACK = 64 << 20  # ... plus this many bytes, for tiny files


def load_json(path: Path) -> Any:
    """Read and parse a JSON file (plain or gzip) with one-line errors naming the file."""
    return parse_json(read_bytes(path), path)


def read_bytes(path: Path) -> bytes:
    """The bytes of a JSON file (gzip decompressed, a UTF-8 byte-order mark dropped); one-line errors."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NprofError(f"{path}: no such file; check the path") from None
    except OSError as exc:
        raise NprofError(f"{path}: cannot read ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip_bounded(raw, path)
    return raw.removeprefix(b"\xef\xbb\xbf")


def parse_json(raw: bytes, path: Path) -> Any:
    """Parse JSON bytes (Chrome's unterminated array form accepted); NprofError naming `path` if invalid."""
    try:
        return loads(raw)
    except RecursionError:
        raise NprofError(f"{path}: not valid JSON (nested too deeply); is it a trace?") from None
    except ValueError as exc:
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
        data = loads(text.rstrip(b",") + b"]")
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, list) else None


def import_chrome_trace(path: str | os.PathLike[str], info: ProfileInfo | None = None) -> Profile:
    """Import a Chrome-trace JSON file as a Profile (see module doc); `info` overrides the manifest.

    Profile JSON (neuron-profile / nprof `--output-format json`) is recognised too and imported by
    `nprof.capture.profile_json`."""
    p = Path(path)
    with gc_paused():
        fast = _fast_parse_file(p)
        if fast is not None:
            profile = columns_to_profile(fast, p, info)
            validated(profile, p)
            return profile
        raw = read_bytes(p)  # read anew: the reference path, or the file's one-line error
        data = parse_json(raw, p)
        del raw
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


def _fast_parse_file(p: Path) -> FastTrace | None:
    """`fast_parse` of the trace file at `p`, or None (the caller then reads it for the reference path, which
    raises the file's errors): a plain file as a `FileSource` (its bytes let go once split into chunks: the
    peak holds one chunk of the file, not all of it), a gzip file or one with a byte-order mark in memory."""
    try:
        with open(p, "rb") as fh:
            data = fh.read()
            if data[:2] == b"\x1f\x8b" or data[:3] == b"\xef\xbb\xbf":
                del data
                return fast_parse(read_bytes(p))
            source = FileSource(fh, data)
            del data  # the source holds the only reference
            return fast_parse(source)
    except OSError:
        return None


def _time_arrays(
    slices: SliceColumns, counters: list[tuple[Any, str, Any]], flows: dict[str, Any], path: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(slice ts, slice dur, counter ts, flow ts) in µs as float arrays; non-numeric times raise NprofError."""
    try:
        ts_us = np.asarray(slices.ts, dtype=np.float64)
        dur = slices.dur  # an array from chrome_fast (nulls already 0)
        dur_us = np.asarray(dur if isinstance(dur, np.ndarray) else [0 if d is None else d for d in dur], np.float64)
        c_ts = np.asarray([c[0] for c in counters], dtype=np.float64)
        if not isinstance(flows["ts"], np.ndarray) and ABSENT in flows["ts"]:
            raise NprofError(f"{path}: not a Chrome trace (a flow event has no 'ts')")
        f_ts = np.asarray(flows["ts"], dtype=np.float64)
    except (TypeError, ValueError):
        raise NprofError(f"{path}: not a Chrome trace (an event has a non-numeric 'ts' or 'dur')") from None
    return ts_us, dur_us, c_ts, f_ts


def events_to_profile(events: list[Any], meta: dict[str, Any], path: Path, info: ProfileInfo | None = None) -> Profile:
    """Turn parsed trace events into a Profile (see module doc): the reference path, over orjson dicts."""
    events = check_events(events, path)
    try:
        parsed = parse_events(events)
        slices = SliceColumns(parsed.xs)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise NprofError(f"{path}: not a Chrome trace (malformed event: {_describe(exc)})") from None
    trace = FastTrace({}, flow_columns(parsed.flows), parsed.counters, parsed.names, len(events), parsed.n_phased, meta)
    return _slices_to_profile(slices, trace, parsed.unmatched, path, info)


def columns_to_profile(trace: FastTrace, path: Path, info: ProfileInfo | None = None) -> Profile:
    """Turn the columns of `chrome_fast.fast_parse` into a Profile (the same as `events_to_profile`)."""
    try:
        slices = SliceColumns.from_columns(trace.slices, trace.types)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise NprofError(f"{path}: not a Chrome trace (malformed event: {_describe(exc)})") from None
    trace.slices = {}
    return _slices_to_profile(slices, trace, 0, path, info)


def _slices_to_profile(
    slices: SliceColumns, trace: FastTrace, unmatched: int, path: Path, info: ProfileInfo | None
) -> Profile:
    """The Profile of checked slice columns, flows, counters and names (`trace.slices` is not read)."""
    try:
        check_slices(slices, path)
        check_flows(trace.flows, path)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise NprofError(f"{path}: not a Chrome trace (malformed event: {_describe(exc)})") from None
    if trace.n_phased == 0:
        raise NprofError(f"{path}: not a Chrome trace (no events with a 'ph' phase)")
    if not slices.name and not trace.counters:
        raise NprofError(f"{path}: the trace has no timed events (slices or counters); nothing to import")
    ts_us, dur_us, c_ts, f_ts = _time_arrays(slices, trace.counters, trace.flows, path)
    check_times(ts_us, dur_us, c_ts, f_ts, path)
    check_counters([c[2] for c in trace.counters], path)
    rows = build_profile(slices, ts_us, dur_us, trace.counters, c_ts, trace.flows, f_ts)
    meta = trace.meta
    base_info = ProfileInfo(
        device="chrome-trace",
        name=path.name,
        producer=f"nprof {__version__} (chrome-trace import)",
        device_name=_device_name(meta),
        meta={**_meta(meta, trace.names, trace.n_events, unmatched), "trace.origin_ns": str(rows.origin_ns)},
    )
    if info is not None:
        merged = dict(base_info.meta)
        merged.update(info.meta)
        base_info = replace(info, meta=merged, device_name=info.device_name or base_info.device_name)
    if base_info.peak_flops is None and base_info.device_name and base_info.device != "cpu":
        peaks = gpu_peaks(base_info.device_name, rows.dtype)
        if peaks is not None:
            base_info = replace(base_info, peak_flops=peaks[0], hbm_bandwidth=peaks[1], peaks_source=peaks[2])
    tables = (_arrow("instructions", rows.instructions), _arrow("dma", rows.dma), _arrow("counters", rows.counters))
    return Profile.build(base_info, tables[0], tables[1], None, tables[2])


def _arrow(table: str, columns: dict[str, Any]) -> dict[str, Any]:
    """`columns` of profile table `table` as Arrow arrays of its schema's types (as `Profile.build` makes them),
    allocated by the system allocator: Arrow's default pool (mimalloc) grew the peak RSS by 10 MB to build
    1 MB of tables from mlp32.cuda in bench/chrome_import.py (it commits memory in steps of megabytes), while
    malloc reuses what the parse freed."""
    schema, pool = TABLES[table], pa.system_memory_pool()
    return {k: v if isinstance(v, pa.Array) else numpy_array(v, schema.field(k).type) if isinstance(v, np.ndarray)
            else pa.array(v, schema.field(k).type, memory_pool=pool) for k, v in columns.items()}  # fmt: skip


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
    for key in META_KEYS[1:]:
        if key in meta:
            out[f"trace.{key}"] = str(meta[key])
    if unmatched:
        out["unended_begin_events"] = str(unmatched)  # drawn up to the end of the trace
    for key, label in list(names.items())[:256]:
        out[key] = label
    return out
