"""Event details by id: every column, grouped, with help text, plus dependencies.

Contract: `event_details(cur, event_id)` finds the event in `instructions` or `dma`
(both sorted by id, so the lookup prunes by zone maps), returns every column in
groups Timing / IDs / Source / Operands / Memory / Other (field: key, label, value,
unit, help), `deps` (events it waited for) and `dependents` (events listing it in
their deps, from the `deps_rev` index; at most MAX_LINKS each). Unknown id ->
NotFound.
"""

from __future__ import annotations

from typing import Any

import duckdb

MAX_LINKS = 1000

# column -> (group, label, unit, help)
FIELDS: dict[str, tuple[str, str, str, str]] = {
    "ts": ("Timing", "Start", "ns", "Start time, nanoseconds since execution start"),
    "end": ("Timing", "End", "ns", "End time (start + duration)"),
    "duration": ("Timing", "Duration", "ns", "Time the instruction or transfer took"),
    "wait_ns": ("Timing", "Semaphore wait", "ns", "Time it was next in its queue but waited on semaphores"),
    "iteration": ("Timing", "Iteration", "", "Execution index (0 = the profiled execution)"),
    "id": ("IDs", "Event id", "", "Unique id of the event (instructions and DMAs share one id space)"),
    "pc": ("IDs", "Program counter", "", "Index of the instruction in the program (-1 when not from a program)"),
    "engine": ("IDs", "Engine", "", "Engine that executed the instruction"),
    "track": (
        "IDs",
        "Row",
        "",
        "Timeline row: tensor.stationary, tensor.moving, vector, scalar, gpsimd, sync, cc.k...",
    ),
    "queue": ("IDs", "DMA queue", "", "DMA queue that carried the transfer"),
    "layer": ("Source", "Layer", "", "Framework module path the instruction was compiled from"),
    "hlo_name": ("Source", "Graph node", "", "Compiled graph node (HLO-like name) the instruction belongs to"),
    "nki_source_location": ("Source", "NKI source", "", "Kernel source file:line that issued the instruction"),
    "opcode": ("Operands", "Opcode", "", "Instruction opcode"),
    "operands": ("Operands", "Operands", "", "Operands as text: destination <- sources, with memory and ranges"),
    "direction": ("Operands", "Direction", "", "Source and destination memory of the transfer"),
    "tensor": ("Operands", "Tensor", "", "HBM tensor moved by the transfer"),
    "partitions": ("Operands", "Partitions", "", "Rows (partitions) of the DMA descriptor"),
    "bytes": ("Memory", "Bytes", "B", "Bytes moved by the transfer"),
    "flops": ("Memory", "Model FLOPs", "FLOP", "Useful floating-point operations (2 x multiply-accumulates)"),
    "hw_flops": ("Memory", "Hardware FLOPs", "FLOP", "FLOPs the hardware spent, padding included"),
    "is_transpose": ("Memory", "Transpose", "", "A TensorE transpose (counts as transpose FLOPs)"),
    "hbm_read_bytes": ("Memory", "HBM read", "B", "Bytes read from HBM"),
    "hbm_write_bytes": ("Memory", "HBM write", "B", "Bytes written to HBM"),
    "sbuf_read_bytes": ("Memory", "SBUF read", "B", "Bytes read from the state buffer (SBUF)"),
    "sbuf_write_bytes": ("Memory", "SBUF write", "B", "Bytes written to the state buffer (SBUF)"),
    "psum_read_bytes": ("Memory", "PSUM read", "B", "Bytes read from the partial-sum buffer (PSUM)"),
    "psum_write_bytes": ("Memory", "PSUM write", "B", "Bytes written to the partial-sum buffer (PSUM)"),
    "is_spill": ("Memory", "Spill save", "", "Saves an intermediate from SBUF to HBM (register spill)"),
    "is_reload": ("Memory", "Spill reload", "", "Reloads a saved intermediate from HBM to SBUF"),
}
# fields that only mean something on a NeuronCore (hidden for CPU / GPU / imported-trace profiles)
NEURON_ONLY = frozenset(
    {
        "wait_ns", "pc", "partitions", "is_transpose", "is_spill", "is_reload",
        "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes", "hw_flops",
    }
)  # fmt: skip
_TABLES = (("instructions", "instruction", "track", "opcode"), ("dma", "dma", "queue", "direction"))
GROUPS = ("Timing", "IDs", "Source", "Operands", "Memory", "Other")

_LINK_SQL = (
    "SELECT id, track AS row, ts, duration AS dur, opcode FROM instructions WHERE id IN ({ids}) "
    "UNION ALL SELECT id, queue, ts, duration, direction FROM dma WHERE id IN ({ids}) ORDER BY ts, id"
)


def _links(cur: duckdb.DuckDBPyConnection, ids: list[int]) -> list[dict[str, Any]]:
    ids = sorted({int(i) for i in ids})[:MAX_LINKS]
    if not ids:
        return []
    sql = _LINK_SQL.format(ids=",".join(map(str, ids)))
    return [{"id": i, "row": r, "ts": t, "dur": d, "opcode": o} for i, r, t, d, o in cur.execute(sql).fetchall()]


def is_neuron(device: str | None) -> bool:
    """True for profiles of a (virtual) NeuronCore: the device name mentions neuron (None: assume so)."""
    return device is None or "neuron" in device.lower()


def event_details(cur: duckdb.DuckDBPyConnection, event_id: int, device: str | None = None) -> dict[str, Any]:
    """Every field of one event, grouped (see module doc); Neuron-only fields are left out unless
    `is_neuron(device)`."""
    from nprof.store.store import NotFound

    rec: dict[str, Any] | None = None
    kind, row_col, op_col = "", "", ""
    for table, kind, row_col, op_col in _TABLES:  # noqa: B007  (the matching table's names are used below)
        res = cur.execute(f"SELECT * FROM {table} WHERE id = ?", [event_id])
        found = res.fetchone()
        if found is not None:
            rec = dict(zip([d[0] for d in res.description], found, strict=True))
            break
    if rec is None:
        raise NotFound(f"no event with id {event_id} in this profile")
    deps = list(rec.pop("deps") or [])
    rec["end"] = rec["ts"] + rec["duration"]
    groups: dict[str, list[dict[str, Any]]] = {g: [] for g in GROUPS}
    neuron = is_neuron(device)
    hide = frozenset() if neuron else NEURON_ONLY
    for key, value in rec.items():
        if key in hide:
            continue
        group, label, unit, help_ = FIELDS.get(key, ("Other", key, "", key))
        if key == "nki_source_location" and not neuron:  # a CPU/GPU capture: the user's Python line
            label, help_ = "Source line", "The user's source file:line the operation was issued from"
        groups[group].append({"key": key, "label": label, "value": value, "unit": unit, "help": help_})
    order = list(FIELDS)
    for fields in groups.values():
        fields.sort(key=lambda f: order.index(f["key"]) if f["key"] in order else len(order))
    dependents = [
        i for (i,) in cur.execute("SELECT id FROM deps_rev WHERE dep = ? LIMIT ?", [event_id, MAX_LINKS]).fetchall()
    ]
    return {
        "id": event_id,
        "kind": kind,
        "row": rec[row_col],
        "opcode": rec[op_col],
        "ts": rec["ts"],
        "dur": rec["duration"],
        "groups": [{"name": g, "fields": f} for g, f in groups.items() if f],
        "deps": _links(cur, deps),
        "dependents": _links(cur, dependents),
    }
