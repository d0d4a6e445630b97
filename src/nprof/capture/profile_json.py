"""Import profile JSON: `neuron-profile view --output-format json` output and nprof's own `json` export.

Contract of `profile_from_json(data, path) -> Profile` for a parsed document
``{"summary": [{...}], "instruction": [...], "dma": [...], "collective": [...]}``
(only ``instruction`` is required):
* instruction records: ``timestamp`` (ns) and ``duration`` (ns) are required;
  ``opcode``, ``operands``, ``hlo_name``, ``nki_source_location`` and every other
  column of the profile schema present in a record are kept; ``label`` (the
  timeline row, e.g. "TensorMatrix", "Vector", "Tensor (LoadStationary)")
  gives ``track`` and ``engine`` when the record has none;
* dma records: ``timestamp``, ``duration`` and the dma columns present (``queue``
  from ``label`` "DMA <queue>" when absent); collective records must use the
  collectives table's own column names (as nprof writes them);
* timestamps become ns since the first event (nprof's own export, recognised by
  its ``track``/``engine`` fields, is already relative and kept as is); the summary's ``total_time``
  (seconds) becomes the execution window when it is longer than the events;
* a document that is not of this shape raises `NprofError` naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nprof import __version__
from nprof.errors import NprofError
from nprof.profile import Profile, ProfileInfo
from nprof.profile.schema import COLLECTIVES, DMA, INSTRUCTIONS
from nprof.profile.validate import MAX_TS

# row label (real profiler and nprof's json `label`) -> (track, engine)
_LABELS = {
    "tensormatrix": ("tensor.moving", "tensor"),
    "tensormatrix (multiplymoving)": ("tensor.moving", "tensor"),
    "tensor": ("tensor.stationary", "tensor"),
    "tensor (loadstationary)": ("tensor.stationary", "tensor"),
    "vector": ("vector", "vector"),
    "scalar": ("scalar", "scalar"),
    "act": ("scalar", "scalar"),
    "gpsimd": ("gpsimd", "gpsimd"),
    "pool": ("gpsimd", "gpsimd"),
    "sync": ("sync", "sync"),
}


def _track_engine(label: Any) -> tuple[str, str]:
    text = str(label or "other").strip()
    got = _LABELS.get(text.lower())
    if got:
        return got
    if text.lower().startswith("cc-core "):
        return f"cc.{text[8:]}", "cc"
    return text, "other"  # real-hardware rows (cpu:<tid>, cuda:<dev>:<stream>) and unknown labels


def _summary(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The first summary record, checked: total_time a finite number of seconds >= 0 (< 2^53 ns) or
    absent; nc_idx/nd_idx whole numbers >= 0 or absent."""
    records = data.get("summary") or [{}]
    if not isinstance(records, list) or not isinstance(records[0], dict):
        raise NprofError(f"{path}: 'summary' must be a list of JSON objects; re-export the profile JSON")
    s = records[0]
    total = s.get("total_time")
    if total is not None and (type(total) not in (int, float) or not 0 <= total < MAX_TS / 1e9):
        raise NprofError(f"{path}: summary total_time {str(total)[:30]} is not a number of seconds >= 0")
    for key in ("nc_idx", "nd_idx"):
        if s.get(key) is not None and (type(s[key]) is not int or not 0 <= s[key] < 1 << 16):
            raise NprofError(f"{path}: summary {key} must be a whole number >= 0")
    return s


def _records(data: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise NprofError(f"{path}: '{key}' must be a list of JSON objects; re-export the profile JSON")
    return value


def _timed(records: list[dict[str, Any]], what: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        ts = np.asarray([r["timestamp"] for r in records], dtype=np.float64)
        dur = np.asarray([r["duration"] for r in records], dtype=np.float64)
    except KeyError as exc:
        raise NprofError(f"{path}: a {what} record has no {exc.args[0]!r}; re-export the profile JSON") from None
    except (TypeError, ValueError):
        raise NprofError(f"{path}: a {what} record has a non-numeric timestamp or duration") from None
    if not (np.isfinite(ts).all() and np.isfinite(dur).all()) or (dur < 0).any():
        raise NprofError(f"{path}: a {what} record has an invalid timestamp or a negative duration")
    return np.rint(ts).astype(np.int64), np.rint(dur).astype(np.int64)


def _columns(records: list[dict[str, Any]], names: list[str]) -> dict[str, list[Any]]:
    present = set().union(*(r.keys() for r in records)) if records else set()
    return {name: [r.get(name) for r in records] for name in names if name in present}


def profile_from_json(data: Any, path: Path) -> Profile:
    """Build a Profile from a parsed profile-JSON document (see module doc)."""
    if not isinstance(data, dict) or "instruction" not in data:
        raise NprofError(f"{path}: not a profile JSON (no 'instruction' list)")
    ins = _records(data, "instruction", path)
    dma = _records(data, "dma", path)
    coll = _records(data, "collective", path)
    if not ins and not dma:
        raise NprofError(f"{path}: the profile JSON has no instruction or dma records; nothing to import")
    i_ts, i_dur = _timed(ins, "instruction", path)
    d_ts, d_dur = _timed(dma, "dma", path)
    starts = np.concatenate([i_ts, d_ts])
    t0 = int(starts.min()) if len(starts) else 0
    if ins and "track" in ins[0] and "engine" in ins[0] and t0 >= 0:
        t0 = 0  # nprof's own export: already ns since execution start

    skip = {"ts", "duration", "track", "engine", "id"}
    i_cols: dict[str, Any] = _columns(ins, [f.name for f in INSTRUCTIONS if f.name not in skip])
    labels = [_track_engine(r.get("label")) for r in ins]
    i_cols["track"] = [r.get("track") or lab[0] for r, lab in zip(ins, labels, strict=True)]
    i_cols["engine"] = [r.get("engine") or lab[1] for r, lab in zip(ins, labels, strict=True)]
    i_cols["opcode"] = [str(v) if v is not None else "" for v in i_cols.get("opcode", [None] * len(ins))]
    d_cols: dict[str, Any] = _columns(dma, [f.name for f in DMA if f.name not in skip | {"queue"}])
    d_cols["queue"] = [r.get("queue") or str(r.get("label") or "q0").removeprefix("DMA ") for r in dma]
    d_cols["direction"] = [v or "unknown" for v in d_cols.get("direction", [None] * len(dma))]
    ids = [r.get("id") for r in ins] + [r.get("id") for r in dma]
    if all(type(v) is int for v in ids) and len(set(ids)) != len(ids):
        raise NprofError(f"{path}: event ids are not unique across 'instruction' and 'dma'; re-export the profile")
    if all(type(v) is int for v in ids):
        i_cols["id"], d_cols["id"] = ids[: len(ins)], ids[len(ins) :]
    else:  # ids missing (neuron-profile output): number the events; dependencies cannot be resolved
        i_cols["id"], d_cols["id"] = list(range(len(ins))), list(range(len(ins), len(ids)))
        i_cols.pop("deps", None)
        d_cols.pop("deps", None)
    for cols in (i_cols, d_cols):
        for key in ("deps",):
            if key in cols:
                cols[key] = [v if isinstance(v, list) else [] for v in cols[key]]
    c_cols = _columns(coll, COLLECTIVES.names)
    if coll and not {"id", "kind", "bytes", "rank", "ts", "duration"} <= set(c_cols):
        raise NprofError(f"{path}: 'collective' records do not use the collectives columns; re-export the profile")
    if coll:
        c_cols["ts"] = [int(v) - t0 for v in c_cols["ts"]]

    summary = _summary(data, path)
    total = summary.get("total_time")
    end = int(max((i_ts + i_dur).max(initial=t0), (d_ts + d_dur).max(initial=t0))) - t0
    total_ns = round(float(total) * 1e9) if total is not None else None
    info = ProfileInfo(
        device="profile-json",
        name=path.name,
        producer=f"nprof {__version__} (profile JSON import)",
        total_time_ns=total_ns if total_ns is not None and total_ns > end else None,
        nc_idx=summary.get("nc_idx") or 0,
        nd_idx=summary.get("nd_idx") or 0,
        meta={"source_events": str(len(ins) + len(dma))},
    )
    try:
        return Profile.build(
            info,
            instructions={"ts": i_ts - t0, "duration": i_dur, **i_cols},
            dma={"ts": d_ts - t0, "duration": d_dur, **d_cols},
            collectives=c_cols or None,
        )
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise NprofError(f"{path}: profile JSON has a field of the wrong type ({str(exc)[:120]})") from None
