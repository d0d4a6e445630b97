"""Host collectives of a multi-process torch capture (gloo's own annotations) as CC work in the system profiles.

Contract:
* `read_host_collectives(trace_path, launches) -> list[HostOp]`: every `gloo:<op>` annotation torch.profiler
  recorded in the trace (the work gloo's thread does for a c10d collective: DDP's gradient-bucket
  all-reduces, its parameter broadcasts, barriers...), in start order, with Unix-ns start and end
  (`baseTimeNanoseconds` + trace time), kind (`all_reduce` -> `all-reduce`), payload bytes (the product of
  the input's dims times its element size; 0 when torch did not record them) and the training step it
  started in (`ProfilerStep#N`). Annotations inside a launch window of `launches` ((start, end) Unix ns of
  the nprof backend's graph launches) are left out: they are nprof's own exchange of compiled collectives,
  whose CC work is in the graphs' device profiles.
* `match_ranks(per_rank) -> {rank: [HostOpRow]}`: gloo runs a group's collectives in order, so the k-th host
  collective of every rank is one operation (op id k). Arrival = the annotation's start on the shared Unix
  clock (one node: one clock; across nodes the clocks' offset is not corrected); the operation can only
  move data once the last rank arrived, so `wait_ns = last arrival - arrival`, capped at the measured
  duration. Operations some rank lacks (it stopped early) keep only the ranks that have them.
* `host_collective_tables(rows, rank, origin_ns) -> (instruction rows, collectives rows)`: one row per
  operation on track `cc:gloo` (engine `cc`, opcode `gloo:<op>`, the measured span, its wait) and one
  `collectives` row (algorithm `gloo (host, measured)`), on the profile's clock (`ts = unix - origin_ns`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

import orjson

_SIZE = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8, "long": 8,
         "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1}  # fmt: skip
_KIND = {"allreduce": "all-reduce", "allgather": "all-gather", "reduce_scatter": "reduce-scatter"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
TRACK = "cc:gloo"
ALGORITHM = "gloo (host, measured)"


@dataclass(frozen=True)
class HostOp:
    """One gloo collective as one rank's torch.profiler saw it."""

    name: str  # gloo:all_reduce
    kind: str  # all-reduce
    start_ns: int  # Unix ns
    end_ns: int
    nbytes: int
    step: int
    shape: str  # "float[36]"


@dataclass(frozen=True)
class HostOpRow:
    """A HostOp matched with the other ranks: its op id, ranks and wait."""

    op: HostOp
    id: int
    ranks: tuple[int, ...]
    wait_ns: int


def _kind(name: str) -> str:
    op = name.split(":", 1)[1]
    return _KIND.get(op, op.replace("_", "-"))


def _payload(args: dict[str, Any]) -> tuple[int, str]:
    """(bytes, "dtype[dims]") of an annotation's first input, (0, "") when torch did not record it."""
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    if not dims or not isinstance(dims[0], list) or not types:
        return 0, ""
    flat = dims[0]
    while flat and isinstance(flat[0], list):  # a TensorList: its first tensor
        flat = flat[0]
    if not all(isinstance(d, int) for d in flat):
        return 0, ""
    size = _SIZE.get(str(types[0]), 0)
    return math.prod(flat) * size, f"{types[0]}[{', '.join(map(str, flat))}]"


def read_host_collectives(trace_path: str | os.PathLike[str], launches: list[tuple[int, int]]) -> list[HostOp]:
    """The gloo annotations of one rank's trace (see module doc)."""
    with open(trace_path, "rb") as fh:
        data = orjson.loads(fh.read())
    base = int(data.get("baseTimeNanoseconds") or 0)
    events = [e for e in data.get("traceEvents") or [] if isinstance(e, dict) and e.get("ph") == "X"]
    steps = []
    for e in events:
        m = _STEP.match(str(e.get("name", "")))
        if m:
            start = base + int(float(e["ts"]) * 1000)
            steps.append((start, start + int(float(e.get("dur") or 0) * 1000), int(m.group(1))))
    out = []
    for e in events:
        name = str(e.get("name", ""))
        if not name.startswith("gloo:"):
            continue
        start = base + int(float(e["ts"]) * 1000)
        end = start + int(float(e.get("dur") or 0) * 1000)
        if any(lo <= start and end <= hi for lo, hi in launches):
            continue  # nprof's own exchange of a compiled graph's collectives
        nbytes, shape = _payload(e.get("args") or {})
        step = next((n for lo, hi, n in steps if lo <= start < hi), 0)
        out.append(HostOp(name, _kind(name), start, end, nbytes, step, shape))
    return sorted(out, key=lambda op: op.start_ns)


def match_ranks(per_rank: dict[int, list[HostOp]]) -> dict[int, list[HostOpRow]]:
    """Op ids, ranks and waits of every rank's host collectives (see module doc)."""
    out: dict[int, list[HostOpRow]] = {r: [] for r in per_rank}
    longest = max((len(ops) for ops in per_rank.values()), default=0)
    for k in range(longest):
        have = {r: ops[k] for r, ops in per_rank.items() if k < len(ops)}
        last = max(op.start_ns for op in have.values())
        ranks = tuple(sorted(have))
        for r, op in have.items():
            wait = min(last - op.start_ns, op.end_ns - op.start_ns)
            out[r].append(HostOpRow(op, k, ranks, max(0, wait)))
    return out


def host_collective_tables(
    rows: list[HostOpRow], rank: int, origin_ns: int, first_op: int = 0
) -> tuple[list[dict[str, Any]], dict[str, list[Any]]]:
    """(instruction rows, collectives columns) of one rank's matched host collectives (see module doc); op ids
    start at `first_op` (after the profile's simulated collectives)."""
    instructions = []
    for row in rows:
        op = row.op
        what = f"{op.kind} of {op.shape} ({op.nbytes} B)" if op.shape else op.kind
        others = f"; waited {row.wait_ns / 1000:.1f} us for the last rank" if len(row.ranks) > 1 else ""
        instructions.append({
            "ts": op.start_ns - origin_ns, "duration": op.end_ns - op.start_ns, "engine": "cc", "track": TRACK,
            "opcode": op.name, "operands": f"{what} on gloo, op {first_op + row.id}{others}",
            "iteration": op.step, "wait_ns": row.wait_ns, "hlo_name": f"{op.kind}#{first_op + row.id}",
        })  # fmt: skip
    collectives: dict[str, list[Any]] = {
        "id": [first_op + r.id for r in rows],
        "kind": [r.op.kind for r in rows],
        "bytes": [r.op.nbytes for r in rows],
        "rank": [rank] * len(rows),
        "ranks": [list(r.ranks) for r in rows],
        "ts": [r.op.start_ns - origin_ns for r in rows],
        "duration": [r.op.end_ns - r.op.start_ns for r in rows],
        "wait_ns": [r.wait_ns for r in rows],
        "algorithm": [ALGORITHM] * len(rows),
    }
    return instructions, collectives
