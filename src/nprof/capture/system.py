"""The system profile: a torch capture's host rows joined with what the nprof backend did.

Contract of `attach_system(profile, work_dir, out) -> SystemProfile`:
* reads the log `nprof.capture.system_recorder` wrote in `work_dir` (none: the profile is returned
  as it is, with the manifest note `system` saying no device graph was launched);
* adds, on the profile's clock, host rows for the backend — `nprof::compile`, `nprof::cache_hit` and
  `nprof::fallback` on track `nprof.compile`, each graph launch (`nprof::launch`, the host's wall time of the
  call) on `nprof.launch` — DMA rows for the copies of inputs (queue `h2d:nc0`, direction host->device) and
  outputs (`d2h:nc0`, device->host) with their bytes, and one `nc_exec_running` row per execution on the device
  track `nc:0`, with `layer` = module, `hlo_name` = `module#k`, depending on its launch (a flow arrow in
  Perfetto and the viewer); when those executions ran on a preset with assumed figures (trn3), the manifest
  carries its `preset_assumptions` and `system.device_preset`, so the profile shows the assumed-figures note
  device profiles show; an execution with collectives (a multi-process job) adds one row per simulated
  collective on `cc:nc0` (engine cc, its bytes, algorithm and simulated wait), at the execution's start plus the
  collective's simulated time, and one `collectives` row each (`device_collectives`: op k = the k-th simulated
  collective of the process, algorithm marked `(simulated)`), so the aggregated multi-rank view lists them; and,
  when the run timed it, the host's data exchange of each such collective on `nprof.exchange` (opcode
  `nprof::exchange`, `hlo_name` = `<kind>#<op>`, the measured span; its measured wait for the other ranks is set
  by `rendezvous.match_waits`);
* the clocks: torch.profiler's trace time plus the trace's `baseTimeNanoseconds` is Unix time, which
  the backend's events are stamped in, so host rows land exactly where they happened. A device row
  starts where its launch started and lasts the *simulated* device time; the host did not wait for
  that modelled time, so a device row may end after the host copied the outputs back;
* the selected device profiles (`--device-profile`) are returned for saving beside the profile in
  `<profile>.devices/`; the manifest lists them (`system.device_profiles`: hlo_name -> file name).
`save_system(result, out)` writes the device profiles (atomically, as a directory) then the profile.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from nprof.atomic import atomic_dir
from nprof.capture.system_recorder import DEVICES, EXEC_LOG
from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.profile.model import make_table

DEVICE_TRACK = "nc:0"
DEVICE_CC_TRACK = "cc:nc0"  # simulated collectives of an execution (multi-process jobs)
EXCHANGE_TRACK = "nprof.exchange"  # the host's measured data exchange of each simulated collective
CLOCK_NOTE = (
    "host rows: torch.profiler and the backend's events on one Unix clock; device rows (nc_exec_running) "
    "start at their launch and last the simulated device time"
)
_HOST_TRACK = {"compile": "nprof.compile", "cache_hit": "nprof.compile", "fallback": "nprof.compile"}
_DMA_KEYS = ("ts", "duration", "layer", "hlo_name", "iteration")
_COPY = {"h2d": ("h2d:nc0", "host->device"), "d2h": ("d2h:nc0", "device->host")}


@dataclass
class SystemProfile:
    """A system profile and the device profile files to save beside it."""

    profile: Profile
    device_files: dict[str, Path] = field(default_factory=dict)  # file name -> where the recorder wrote it


def read_log(work_dir: Path) -> list[dict[str, Any]]:
    """The backend events `SystemRecorder.write` logged in `work_dir` ([] without a log)."""
    path = work_dir / EXEC_LOG
    if not path.is_file():
        return []
    data = orjson.loads(path.read_bytes())
    return data if isinstance(data, list) else []


def origin_unix_ns(profile: Profile) -> int:
    """Unix time (ns) of the profile's ts = 0, from the trace's base time and the importer's origin."""
    meta = profile.info.meta
    try:
        return int(meta["trace.baseTimeNanoseconds"]) + int(meta["trace.origin_ns"])
    except (KeyError, ValueError):
        raise NprofError("the torch trace has no baseTimeNanoseconds; cannot place device executions") from None


def _row(ev: dict[str, Any], origin: int, track: str, opcode: str, **extra: Any) -> dict[str, Any]:
    """One instruction row of a backend event on the profile's clock."""
    key = f"{ev['module']}#{ev['exec_index']}" if ev["exec_index"] >= 0 else ev["module"]
    start = ev["start_ns"] - origin
    row = {"ts": start, "duration": max(0, ev["end_ns"] - ev["start_ns"]), "engine": "other", "track": track,
           "opcode": opcode, "layer": ev["module"], "hlo_name": key, "iteration": ev["step"],
           "operands": ev.get("graph") or None, "wait_ns": 0}  # fmt: skip
    row.update(extra)
    return row


def _device_cc_rows(ev: dict[str, Any], device: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per simulated collective of an execution, on `cc:nc0`, placed at the execution's start plus
    its simulated time (the device clock of that execution)."""
    out = []
    for c in ev.get("collectives") or []:
        waited = f", waited {c['wait_ns']} ns for the other ranks" if c["wait_ns"] else ""
        text = f"{c['kind']} of {c['bytes']} B, simulated ({c['algorithm']}{waited}), op {c['id']} of the execution"
        out.append({**device, "ts": device["ts"] + int(c["ts"]), "duration": int(c["duration"]), "engine": "cc",
                    "track": DEVICE_CC_TRACK, "opcode": c["kind"], "operands": text, "wait_ns": int(c["wait_ns"]),
                    "deps": None, "bytes": int(c["bytes"]), "algorithm": c["algorithm"]})  # fmt: skip
    return out


def _exchange_rows(ev: dict[str, Any], origin: int, first_op: int) -> list[dict[str, Any]]:
    """One host row per simulated collective of an execution whose data exchange the run timed, on
    `nprof.exchange`: the measured span this process spent in it (its wait: `rendezvous.match_waits`)."""
    out = []
    for k, c in enumerate(ev.get("collectives") or []):
        if "host_start_ns" not in c:
            continue
        text = f"host exchange of {c['kind']} op {first_op + k} ({c['bytes']} B): measured on the host clock"
        out.append({"ts": int(c["host_start_ns"]) - origin, "duration": max(0, c["host_end_ns"] - c["host_start_ns"]),
                    "engine": "other", "track": EXCHANGE_TRACK, "opcode": "nprof::exchange", "layer": ev["module"],
                    "hlo_name": f"{c['kind']}#{first_op + k}", "iteration": ev["step"], "operands": text,
                    "wait_ns": 0})  # fmt: skip
    return out


def device_collectives(rows: list[dict[str, Any]], info: Any) -> dict[str, list[Any]]:
    """`collectives` columns for the simulated collectives among `rows` (track `cc:nc0`), in order: the k-th
    is op k of the job (every rank runs the same graphs, so op k is the same collective on every rank);
    algorithm marked `(simulated)`; all `info.world_size` ranks take part."""
    cc = [r for r in rows if r["track"] == DEVICE_CC_TRACK]
    world = list(range(max(1, int(info.world_size))))
    return {
        "id": list(range(len(cc))),
        "kind": [r["opcode"] for r in cc],
        "bytes": [r["bytes"] for r in cc],
        "rank": [int(info.rank)] * len(cc),
        "ranks": [world] * len(cc),
        "ts": [r["ts"] for r in cc],
        "duration": [r["duration"] for r in cc],
        "wait_ns": [r["wait_ns"] for r in cc],
        "algorithm": [f"{r['algorithm']} (simulated)" for r in cc],
    }


def _event_rows(events: list[dict[str, Any]], origin: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(instruction rows, dma rows) of the backend's events (see module doc)."""
    rows: list[dict[str, Any]] = []
    dma: list[dict[str, Any]] = []
    ops = 0  # simulated collectives so far: op ids of the process
    for ev in events:
        kind = ev["kind"]
        if kind in _HOST_TRACK:
            rows.append(_row(ev, origin, _HOST_TRACK[kind], f"nprof::{kind}"))
        elif kind == "launch":
            text = f"{ev.get('graph') or ev['module']}: simulated {ev['device_ns']} ns"
            rows.append(_row(ev, origin, "nprof.launch", "nprof::launch", operands=text))
            kept = ev.get("device_profile")
            note = f"device profile {kept}" if kept else "no device profile kept (--device-profile)"
            note = f"{ev.get('graph') or ev['module']}: {note}"
            device = _row(ev, origin, DEVICE_TRACK, "nc_exec_running", operands=note, deps=[len(rows) - 1])
            device["duration"] = int(ev["device_ns"])
            rows.append(device)
            rows.extend(_device_cc_rows(ev, device))
            rows.extend(_exchange_rows(ev, origin, ops))
            ops += len(ev.get("collectives") or [])
        elif kind in _COPY:
            queue, direction = _COPY[kind]
            row = {k: v for k, v in _row(ev, origin, queue, "copy").items() if k in _DMA_KEYS}
            copy = {"queue": queue, "direction": direction, "bytes": int(ev["nbytes"]), "tensor": ev["module"]}
            dma.append({**row, **copy})
    return rows, dma


def append_rows(table: pa.Table, name: str, rows: list[dict[str, Any]], first_id: int) -> pa.Table:
    """`table` plus `rows` (missing columns take their defaults), ids from `first_id`."""
    if not rows:
        return table
    columns = {k: [r.get(k) for r in rows] for k in sorted({k for r in rows for k in r})}
    columns["id"] = list(range(first_id, first_id + len(rows)))
    if "deps" in columns:  # rows name their dependencies by position among `rows`
        columns["deps"] = [[first_id + d for d in deps] if deps else None for deps in columns["deps"]]
    added = make_table(name, columns)
    return pa.concat_tables([table, added.cast(table.schema)])


def _assumed(launches: list[dict[str, Any]]) -> dict[str, str]:
    """The manifest entries naming the assumed figures the device rows rest on: `preset_assumptions` (each
    preset's list once) and `system.device_preset`; {} when every execution ran on a published preset."""
    found = {e.get("preset") or "": e["preset_assumptions"] for e in launches if e.get("preset_assumptions")}
    if not found:
        return {}
    return {"preset_assumptions": " ".join(dict.fromkeys(found.values())),
            "system.device_preset": ", ".join(p for p in found if p)}  # fmt: skip


def attach_system(profile: Profile, work_dir: Path, out: Path) -> SystemProfile:
    """Join the backend's log in `work_dir` to the host `profile` (see module doc)."""
    events = read_log(work_dir)
    launches = [e for e in events if e["kind"] == "launch"]
    if not launches:
        note = "host only: no graph compiled with torch.compile(backend='nprof') was launched"
        return SystemProfile(replace(profile, info=replace(profile.info, meta={**profile.info.meta, "system": note})))
    origin = origin_unix_ns(profile)
    rows, dma = _event_rows(events, origin)
    simulated = make_table("collectives", device_collectives(rows, profile.info))
    collectives = pa.concat_tables([profile.collectives, simulated.cast(profile.collectives.schema)])
    rows = [{k: v for k, v in r.items() if k not in ("bytes", "algorithm")} for r in rows]
    next_id = max(max_id(profile.instructions), max_id(profile.dma)) + 1
    instructions = append_rows(profile.instructions, "instructions", rows, next_id)
    dma_table = append_rows(profile.dma, "dma", dma, next_id + len(rows))
    files = {e["device_profile"]: work_dir / DEVICES / e["device_profile"] for e in launches if e["device_profile"]}
    listing = {f"{e['module']}#{e['exec_index']}": e["device_profile"] for e in launches if e["device_profile"]}
    meta = {
        **profile.info.meta,
        "system": "1",
        "system.clock": CLOCK_NOTE,
        "system.devices_dir": devices_dir(out).name,
        "system.device_profiles": orjson.dumps(listing).decode(),
    }
    meta.update(_assumed(launches))
    info = replace(profile.info, meta=meta)
    tables = {"instructions": instructions, "dma": dma_table, "collectives": collectives}
    return SystemProfile(replace(profile, info=info, **tables), files)


def shift_profile(profile: Profile, delta_ns: int) -> Profile:
    """`profile` with every timestamp `delta_ns` later and its trace origin moved to match."""
    if delta_ns == 0:
        return profile

    def later(t: pa.Table) -> pa.Table:
        if not t.num_rows:
            return t
        return t.set_column(t.schema.get_field_index("ts"), "ts", pc.add(t["ts"], pa.scalar(delta_ns, pa.int64())))

    meta = dict(profile.info.meta)
    meta["trace.origin_ns"] = str(int(meta["trace.origin_ns"]) - delta_ns)
    total = None if profile.info.total_time_ns is None else profile.info.total_time_ns + delta_ns
    info = replace(profile.info, meta=meta, total_time_ns=total)
    return replace(profile, info=info, instructions=later(profile.instructions), dma=later(profile.dma),
                   collectives=later(profile.collectives), counters=later(profile.counters))  # fmt: skip


def max_id(table: pa.Table) -> int:
    """The largest `id` of a profile table, -1 when it is empty."""
    return int(pc.max(table["id"]).as_py()) if table.num_rows else -1


def devices_dir(profile_path: str | os.PathLike[str]) -> Path:
    """Where the device profiles of the system profile at `profile_path` live."""
    p = Path(profile_path)
    return p.with_name(f"{p.name}.devices")


def save_system(result: SystemProfile, out: Path) -> None:
    """Write the device profiles beside `out` (a directory, atomically), then the profile itself."""
    if result.device_files:
        with atomic_dir(devices_dir(out)) as tmp:
            for name, src in result.device_files.items():
                shutil.copyfile(src, Path(tmp) / name)
    result.profile.save(out)
