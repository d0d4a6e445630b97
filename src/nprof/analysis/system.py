"""System-profile analysis: where each training step's time went, and findings about the host side.

Contract (only for system profiles — manifest meta `system` == "1" — else an empty table / no findings):
* `system_steps(profile) -> Table`, one row per step (`iteration`): start/end/wall_ns of the step's
  host rows; `forward_device_ns` / `backward_device_ns` (simulated time of the step's forward and
  backward graph executions, `nc_exec_running` rows by graph name), `device_busy_ns`; host time of
  `compile_ns` (torch.compile's tracing — host rows under a `dynamo` annotation —, nprof's lowering and
  compile-cache loads), `launch_ns` (the host's wall time in graph calls: on the
  virtual device this is the *simulator's* time, not what hardware would take), `copy_ns` and
  `copy_bytes` (host<->device copies), `host_ops_ns` (union of torch op rows on host threads outside
  launches: Python, loss, optimizer, data), `host_gap_ns` (step wall not covered by any host row), and
  two phases that overlap the others (not parts of the wall): `optimizer_ns` (union of the host rows of
  torch's `Optimizer.*` annotations: step, zero_grad) and `collectives_ns` / `collective_wait_ns` (union of
  the host collective rows — gloo `cc:gloo`, nprof's exchange `nprof.exchange` — and the sum of their
  measured waits for other ranks).
* `system_findings(profile) -> list[dict]` rows for the findings table (`nprof.analysis.findings`):
  `recompile` (a graph compiled after the first step), `host_bound` (a step whose host work —
  compiles, copies and torch ops, excluding the simulator's launch time — exceeds the device's busy
  time by `Thresholds.host_bound_ratio`), `launch_gap` (the longest host time between the end of one graph call
  and the start of the next, where the device idles) and `repeated_copies` (a graph copying the same
  number of bytes host->device on every call: parameters that could stay on the device).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis import intervals as iv
from nprof.analysis.sources import human_bytes, human_ns
from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from nprof.profile import Profile
from nprof.profile.codes import plain_table

STEP_COLUMNS = (
    "step", "start", "end", "wall_ns", "forward_device_ns", "backward_device_ns", "device_busy_ns", "compile_ns",
    "launch_ns", "copy_ns", "copy_bytes", "host_ops_ns", "host_gap_ns", "optimizer_ns", "collectives_ns",
    "collective_wait_ns",
)  # fmt: skip
OPTIMIZER = "Optimizer."  # torch.optim's profiler annotations: Optimizer.step#SGD.step, Optimizer.zero_grad#...
HOST_COLLECTIVE_TRACKS = ("cc:gloo", "nprof.exchange")  # capture.host_collectives.TRACK, capture.system


def is_system(profile: Profile) -> bool:
    """True for a system profile written by `nprof.capture.system`."""
    return profile.info.meta.get("system") == "1"


def _track_rows(profile: Profile, prefix: str) -> pa.Table:
    t = plain_table(profile.instructions)
    return t.filter(pc.starts_with(t["track"], prefix))


def _spans(table: pa.Table, step: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) arrays of a table's rows, of one step when `step` is given."""
    if step is not None and table.num_rows:
        table = table.filter(pc.equal(table["iteration"], step))
    ts = table["ts"].to_numpy() if table.num_rows else np.zeros(0, np.int64)
    return ts, ts + (table["duration"].to_numpy() if table.num_rows else np.zeros(0, np.int64))


def _graph_time(device: pa.Table, step: int, which: str) -> int:
    rows = device.filter(pc.equal(device["iteration"], step)).to_pylist()
    return sum(r["duration"] for r in rows if (r["operands"] or "").split(":")[0].endswith(f"_{which}"))


def _step_row(profile: Profile, step: int, parts: dict[str, pa.Table]) -> dict[str, Any]:
    """One `system_steps` row (see module doc)."""
    host = [_spans(t, step) for t in (parts["cpu"], parts["compile"], parts["launch"], parts["copies"])]
    starts, ends = np.concatenate([h[0] for h in host]), np.concatenate([h[1] for h in host])
    start, end = (int(starts.min()), int(ends.max())) if starts.size else (0, 0)
    launch = iv.merge(*_spans(parts["launch"], step))
    ops = iv.merge(*_spans(parts["cpu"], step))
    ops_outside = iv.union_length(*ops) - iv.intersection_length(ops, launch)
    copies = parts["copies"].filter(pc.equal(parts["copies"]["iteration"], step)) if parts["copies"].num_rows else None
    return {
        "step": step, "start": start, "end": end, "wall_ns": end - start,
        "forward_device_ns": _graph_time(parts["device"], step, "fw"),
        "backward_device_ns": _graph_time(parts["device"], step, "bw"),
        "device_busy_ns": int(np.sum(np.subtract(*_spans(parts["device"], step)[::-1]))),
        "compile_ns": iv.union_length(*_spans(parts["compile"], step)),
        "launch_ns": iv.union_length(*launch),
        "copy_ns": iv.union_length(*_spans(parts["copies"], step)),
        "copy_bytes": int(pc.sum(copies["bytes"]).as_py() or 0) if copies is not None else 0,
        "host_ops_ns": int(ops_outside),
        "host_gap_ns": (end - start) - iv.union_length(starts, ends),
        "optimizer_ns": iv.union_length(*_spans(parts["optimizer"], step)),
        "collectives_ns": iv.union_length(*_spans(parts["collectives"], step)),
        "collective_wait_ns": _step_sum(parts["collectives"], step, "wait_ns"),
    }  # fmt: skip


def _step_sum(table: pa.Table, step: int, column: str) -> int:
    """Sum of `column` over the rows of `step`."""
    if not table.num_rows:
        return 0
    return int(pc.sum(table.filter(pc.equal(table["iteration"], step))[column]).as_py() or 0)


def _parts(profile: Profile) -> dict[str, pa.Table]:
    dma = plain_table(profile.dma)
    copies = dma.filter(pc.or_(pc.equal(dma["queue"], "h2d:nc0"), pc.equal(dma["queue"], "d2h:nc0")))
    cpu = _track_rows(profile, "cpu:")
    tracing = pc.fill_null(pc.starts_with(cpu["hlo_name"], "dynamo"), False)  # torch.compile's own tracing
    ins = plain_table(profile.instructions)
    collective = pc.is_in(ins["track"], pa.array(HOST_COLLECTIVE_TRACKS))
    optimizer = pc.fill_null(pc.starts_with(cpu["opcode"], OPTIMIZER), False)
    return {
        "optimizer": cpu.filter(optimizer),
        "collectives": ins.filter(collective),
        "cpu": cpu.filter(pc.invert(tracing)),
        "compile": pa.concat_tables([_track_rows(profile, "nprof.compile"), cpu.filter(tracing)]),
        "launch": _track_rows(profile, "nprof.launch"),
        "device": _track_rows(profile, "nc:"),
        "copies": copies,
    }


def system_steps(profile: Profile) -> pa.Table:
    """Per-step time breakdown of a system profile (see module doc); empty for other profiles."""
    if not is_system(profile):
        return pa.table({c: pa.array([], pa.int64()) for c in STEP_COLUMNS})
    parts = _parts(profile)
    steps = sorted(set(parts["device"]["iteration"].to_pylist()) | set(parts["cpu"]["iteration"].to_pylist()))
    rows = [_step_row(profile, s, parts) for s in steps]
    return pa.table({c: pa.array([r[c] for r in rows], pa.int64()) for c in STEP_COLUMNS})


def _finding(severity: str, kind: str, title: str, message: str, span: tuple[int, int], impact: int,
             ids: list[int]) -> dict[str, Any]:  # fmt: skip
    """One row of the findings table (`nprof.analysis.findings.SCHEMA`)."""
    return {"severity": severity, "kind": kind, "title": title, "message": message, "ts": int(span[0]),
            "end": int(span[1]), "impact_ns": int(impact), "event_ids": ids[:64], "sources": []}  # fmt: skip


def _recompiles(parts: dict[str, pa.Table]) -> list[dict[str, Any]]:
    rows = [r for r in parts["compile"].to_pylist() if r["opcode"] == "nprof::compile"]  # lowerings, not tracing
    first = min((r["iteration"] for r in rows), default=0)
    late = [r for r in rows if r["iteration"] > first]
    if not late:
        return []
    total = sum(r["duration"] for r in late)
    names = ", ".join(sorted({f"{r['layer']} (step {r['iteration']})" for r in late})[:5])
    text = (
        f"{len(late)} graph(s) were compiled after the first step: {names}; {human_ns(total)} of compiling. "
        "Dynamo recompiles when a guard fails (a new input shape, dtype or Python value): keep them fixed"
    )
    span = (late[0]["ts"], late[-1]["ts"] + late[-1]["duration"])
    return [_finding("warning", "recompile", "graphs recompiled during training", text, span, total,
                     [r["id"] for r in late])]  # fmt: skip


def _host_bound(steps: pa.Table, ratio: float) -> list[dict[str, Any]]:
    bound = []
    for r in steps.to_pylist():
        host = r["compile_ns"] + r["copy_ns"] + r["host_ops_ns"]
        if r["device_busy_ns"] and host > ratio * r["device_busy_ns"]:
            bound.append((host - r["device_busy_ns"], host, r))
    if not bound:
        return []
    _, host, worst = max(bound, key=lambda b: b[0])
    text = (
        f"{len(bound)} of {steps.num_rows} steps are host-bound: in step {worst['step']} the host worked "
        f"{human_ns(host)} (compiles {human_ns(worst['compile_ns'])}, copies {human_ns(worst['copy_ns'])}, "
        f"torch ops {human_ns(worst['host_ops_ns'])}) while the device was busy "
        f"{human_ns(worst['device_busy_ns'])}; the virtual device's simulation time is not counted as host work"
    )
    return [_finding("warning", "host_bound", "steps bound by the host", text, (worst["start"], worst["end"]),
                     sum(b[0] for b in bound), [])]  # fmt: skip


def _launch_gaps(parts: dict[str, pa.Table]) -> list[dict[str, Any]]:
    calls = sorted(parts["launch"].to_pylist(), key=lambda r: r["ts"])
    gaps = [(b["ts"] - (a["ts"] + a["duration"]), a, b) for a, b in itertools.pairwise(calls)]
    gaps = [g for g in gaps if g[0] > 0]
    if not gaps:
        return []
    gap, a, b = max(gaps, key=lambda g: g[0])
    text = (
        f"between the calls of {a['hlo_name']} and {b['hlo_name']} the host spent {human_ns(gap)} (Python, "
        f"copies, optimizer) with no graph running on the device; {len(gaps)} such gaps total "
        f"{human_ns(sum(g[0] for g in gaps))}"
    )
    return [_finding("info", "launch_gap", "device idle between graph launches", text,
                     (a["ts"] + a["duration"], b["ts"]), gap, [a["id"], b["id"]])]  # fmt: skip


def _repeated_copies(parts: dict[str, pa.Table]) -> list[dict[str, Any]]:
    by_graph: dict[str, list[dict[str, Any]]] = {}
    for r in parts["copies"].to_pylist():
        if r["queue"] == "h2d:nc0":
            by_graph.setdefault(r["tensor"], []).append(r)
    out = []
    for graph, rows in sorted(by_graph.items()):
        sizes = {r["bytes"] for r in rows}
        if len(rows) < 2 or len(sizes) != 1 or not rows[0]["bytes"]:
            continue
        total = sum(r["duration"] for r in rows)
        text = (
            f"graph {graph} copies {human_bytes(rows[0]['bytes'])} host->device on each of its {len(rows)} calls "
            f"({human_bytes(rows[0]['bytes'] * len(rows))}, {human_ns(total)} of host time): parameters and "
            "buffers that do not change between calls could stay in device memory"
        )
        span = (rows[0]["ts"], rows[-1]["ts"] + rows[-1]["duration"])
        title = "the same inputs copied to the device on every call"
        out.append(_finding("info", "repeated_copies", title, text, span, total, [r["id"] for r in rows]))
    return out


def system_findings(profile: Profile, *, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> list[dict[str, Any]]:
    """Findings about the host side of a system profile (see module doc); [] for other profiles."""
    if not is_system(profile):
        return []
    parts = _parts(profile)
    rows = _recompiles(parts) + _host_bound(system_steps(profile), thresholds.host_bound_ratio) + _launch_gaps(parts)
    return rows + _repeated_copies(parts)
