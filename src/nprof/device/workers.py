"""The multi-worker runner: N simulated workers executing programs that synchronise at collectives.

Contract of `simulate_workers(programs, inputs=None, *, world_size, workers_per_node=None, preset=None,
numerics=True, profile_ranks=None, executions=1, ignore_exec_errors=False) -> JobResult`:

* `programs`: one Program for every rank, or a sequence of `world_size` Programs (ranks may run different
  code, e.g. a deliberately slower rank). `inputs`: None, one mapping for every rank, or a mapping rank ->
  {name: array} (missing ranks run on zeros, with the usual warning).
* Matching: the k-th collective instruction of rank r with group G (attrs `group`; empty = every rank) is
  the same operation as the k-th collective with group G of every other rank in G. A rank in G that never
  reaches it, or mismatched kinds/ops, raise NprofError naming the ranks (a deadlock on real hardware).
* Timing (deterministic): every rank is scheduled by `device.schedule` on its own plan. A collective starts on
  rank r when its dependencies are done (its *arrival*); the operation starts when the last participant
  arrives and lasts `ring_time_ns` (NeuronLink inside a node, EFA across nodes), so it ends at the same time
  on every participant: `duration_r = end - arrival_r`, `wait_r = max(arrival) - arrival_r`. Since arrivals
  only depend on earlier operations, the durations are fixed-point iterated (at most K+2 passes for K
  operations); ranks with the same program, start delay and collective durations share one schedule (computed
  once: a job of identical ranks schedules one rank). `start_delay_ns` (rank -> ns) starts a rank late (a
  straggler: a slow host or input pipeline): its whole timeline is shifted, so the others wait for it.
* Numerics (`numerics=True`): every rank's program runs in program order on its own `Memory` until its next
  collective; an operation executes (`collectives.combine`, in float64, written back in the output dtype)
  once every participant has reached it. Outputs per rank as in `simulate`.
* Profiles for `profile_ranks` (default all): the usual instruction/DMA tables (CC instructions on tracks
  `cc.<k>`), plus one `collectives` row per operation the rank took part in (op id shared by all ranks,
  ids in order of operation start), and a manifest with rank, world_size, nc_idx, nd_idx and meta
  `node`, `workers_per_node`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from nprof.arch.isa import COLLECTIVES, Instruction
from nprof.arch.presets import Preset, get_preset
from nprof.device.collectives import KIND, Topology, algorithm, ring_time_ns
from nprof.device.cores import check_preset_runs
from nprof.device.plan import Plan, plan_for
from nprof.device.record import build_tables
from nprof.device.schedule import Timing, schedule
from nprof.device.simulate import ZERO_INPUTS_WARNING, SimResult, prepare_inputs, sim_profile_info
from nprof.device.worker_numerics import run_lockstep
from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.program.model import Program
from nprof.progress import progress

OpKey = tuple[tuple[int, ...], int]  # (participating ranks, sequence number within that group)


@dataclass(frozen=True)
class CollectiveOp:
    """One collective operation of the job, as all its participants saw it."""

    id: int  # shared op id (order of start)
    key: OpKey
    kind: str  # all-reduce, all-gather, reduce-scatter, all-to-all
    nbytes: int  # input payload per rank
    ranks: tuple[int, ...]
    arrival: dict[int, float]  # rank -> ns its instruction became ready
    start: float  # max(arrival)
    end: float  # start + ring time
    algorithm: str


@dataclass(frozen=True)
class JobResult:
    """What one multi-worker run produced."""

    results: dict[int, SimResult]  # profiled rank -> its outputs, profile, latencies and warnings
    ops: tuple[CollectiveOp, ...]  # every collective of the job, by id
    topology: Topology


def _delays(start_delay_ns: Mapping[int, float] | None, world_size: int) -> list[float]:
    """Each rank's start delay in ns (0.0 unless given); NprofError for a rank outside the job or a negative delay."""
    out = [0.0] * world_size
    for r, d in (start_delay_ns or {}).items():
        if not 0 <= r < world_size:
            raise NprofError(f"start delay given for rank {r}, outside the job's ranks 0..{world_size - 1}")
        if not d >= 0:
            raise NprofError(f"start delay of rank {r} must be >= 0 ns, got {d}")
        out[r] = float(d)
    return out


def _programs(programs: Program | Sequence[Program], world_size: int) -> list[Program]:
    if isinstance(programs, Program):
        return [programs] * world_size
    progs = list(programs)
    if len(progs) != world_size:
        raise NprofError(f"{len(progs)} programs given for {world_size} workers; give one or one per rank")
    return progs


def _inputs(inputs: object, world_size: int) -> list[Mapping[str, object]]:
    if inputs is None:
        return [{}] * world_size
    if isinstance(inputs, Mapping) and all(isinstance(k, int) for k in inputs):
        bad = [k for k in inputs if not 0 <= k < world_size]
        if bad:
            raise NprofError(f"inputs given for rank {bad[0]}, outside the job's ranks 0..{world_size - 1}")
        return [inputs.get(r, {}) for r in range(world_size)]
    if isinstance(inputs, Mapping):
        return [inputs] * world_size
    seq = list(inputs)  # type: ignore[call-overload]
    if len(seq) != world_size:
        raise NprofError(f"inputs given for {len(seq)} ranks of a {world_size}-worker job")
    return seq


def collective_keys(
    program: Program, rank: int, world_size: int, groups: list[tuple[int, tuple[int, ...]]] | None = None
) -> list[tuple[int, OpKey]]:
    """(instruction index, op key) of every collective of `program` when run as `rank`; `groups`: the
    program's `collective_groups` when already known (ranks running one program share them)."""
    counters: dict[tuple[int, ...], int] = {}
    out: list[tuple[int, OpKey]] = []
    for i, group in collective_groups(program, world_size) if groups is None else groups:
        if rank not in group:
            ins = program.instructions[i]
            raise NprofError(f"instruction {i} ({ins.opcode.value}) on rank {rank} names group {group} without it")
        seq = counters.get(group, 0)
        counters[group] = seq + 1
        out.append((i, (group, seq)))
    return out


def collective_groups(program: Program, world_size: int) -> list[tuple[int, tuple[int, ...]]]:
    """(instruction index, checked participant group) of every collective of `program`."""
    everyone = tuple(range(world_size))
    return [
        (i, _group(ins, world_size, everyone, i))
        for i, ins in enumerate(program.instructions)
        if ins.opcode in COLLECTIVES
    ]


def _group(ins: Instruction, world_size: int, everyone: tuple[int, ...], i: int) -> tuple[int, ...]:
    raw = ins.attr("group", ()) or ()
    group = tuple(sorted(int(r) for r in raw)) if raw else everyone
    if any(not 0 <= r < world_size for r in group) or len(set(group)) != len(group):
        raise NprofError(
            f"instruction {i} ({ins.opcode.value}) has group {tuple(raw)}; ranks must be distinct, 0..{world_size - 1}"
        )
    return group


def match_ops(programs: list[Program], world_size: int) -> dict[OpKey, dict[int, int]]:
    """op key -> {rank: instruction index}; NprofError when a participant never reaches an op."""
    distinct = {id(p): p for p in programs}
    groups = {key: collective_groups(p, world_size) for key, p in distinct.items()}
    per_rank = {r: collective_keys(p, r, world_size, groups[id(p)]) for r, p in enumerate(programs)}
    ops: dict[OpKey, dict[int, int]] = {}
    for r, keys in per_rank.items():
        for i, key in keys:
            ops.setdefault(key, {})[r] = i
    for key, where in ops.items():
        group, seq = key
        missing = [r for r in group if r not in where]
        if missing:
            have = sorted(where)[0]
            ins = programs[have].instructions[where[have]]
            raise NprofError(
                f"collective #{seq} ({ins.opcode.value}) of group {_fmt(group)} is never reached by rank "
                f"{missing[0]} (rank {have} waits at instruction {where[have]}); every rank must issue the same "
                "collectives in the same order"
            )
        first = programs[group[0]].instructions[where[group[0]]]
        for r in group[1:]:
            ins = programs[r].instructions[where[r]]
            if ins.opcode is not first.opcode or ins.attr("op", "add") != first.attr("op", "add"):
                raise NprofError(
                    f"collective #{seq} of group {_fmt(group)}: rank {group[0]} issues {first.opcode.value} but "
                    f"rank {r} issues {ins.opcode.value}; every rank must issue the same collectives in order"
                )
    return ops


def _fmt(group: tuple[int, ...]) -> str:
    return f"{group[0]}..{group[-1]}" if group == tuple(range(group[0], group[-1] + 1)) else str(group)


def _shifted(timing: Timing, delay: float) -> Timing:
    """`timing` moved `delay` ns later (a rank that starts late)."""
    return Timing(timing.start + delay, timing.end + delay, timing.wait) if delay else timing


def _schedule_ranks(
    programs: list[Program],
    pre: Preset,
    ops: dict[OpKey, dict[int, int]],
    topo: Topology,
    delays: Sequence[float],
) -> tuple[list[Plan], list[Timing], dict[OpKey, tuple[dict[int, float], float, float]]]:
    """Fixed-point timing of every rank (see module doc), rank r starting `delays[r]` ns late; returns plans,
    timings and op (arrivals, start, end). Ranks with the same program, delay and collective durations share
    one schedule (the same objects)."""
    world = len(programs)
    base = [plan_for(p, pre) for p in programs]
    ring: dict[OpKey, float] = {}
    for key, where in ops.items():
        r0 = key[0][0]
        ins = programs[r0].instructions[where[r0]]
        nbytes = ins.ins[0].nbytes if ins.ins else 0
        ring[key] = ring_time_ns(ins.opcode, nbytes, key[0], topo, pre)
    # per rank: collective instruction index -> duration (start with the bare ring time)
    cdur: list[dict[int, float]] = [{} for _ in range(world)]
    for key, where in ops.items():
        for r, i in where.items():
            cdur[r][i] = ring[key]
    result: dict[OpKey, tuple[dict[int, float], float, float]] = {}
    plans: list[Plan] = list(base)
    timings: list[Timing] = []
    for _ in range(len(ops) + 2):
        cache: dict[tuple, tuple[Plan, Timing]] = {}
        plans, timings = [], []
        for r in range(world):
            sig = (id(programs[r]), delays[r], tuple(sorted(cdur[r].items())))
            hit = cache.get(sig)
            if hit is None:
                dur = base[r].dur.copy()
                for i, d in cdur[r].items():
                    dur[i] = d
                plan = replace(base[r], dur=dur)
                hit = cache[sig] = (plan, _shifted(schedule(plan), delays[r]))
            plans.append(hit[0])
            timings.append(hit[1])
        changed = False
        for key, where in ops.items():
            arrival = {r: timings[r].start[i] for r, i in where.items()}
            start = max(arrival.values())
            end = start + ring[key]
            result[key] = (arrival, start, end)
            for r, i in where.items():
                d = end - arrival[r]
                if abs(cdur[r][i] - d) > 1e-6:
                    cdur[r][i] = d
                    changed = True
        if not changed:
            break
    return plans, timings, result


def simulate_workers(
    programs: Program | Sequence[Program],
    inputs: object = None,
    *,
    world_size: int,
    workers_per_node: int | None = None,
    preset: str | Preset | None = None,
    numerics: bool = True,
    profile_ranks: Sequence[int] | None = None,
    executions: int = 1,
    ignore_exec_errors: bool = False,
    start_delay_ns: Mapping[int, float] | None = None,
) -> JobResult:
    """Run a `world_size`-worker job on virtual NeuronCores (see the module doc)."""
    if world_size < 1:
        raise NprofError(f"world_size must be >= 1, got {world_size}")
    if executions < 1:
        raise NprofError(f"executions must be >= 1, got {executions}")
    progs = _programs(programs, world_size)
    per_rank_inputs = _inputs(inputs, world_size)
    pre = get_preset(preset if preset is not None else progs[0].preset)
    topo = Topology(world_size, workers_per_node or world_size)
    for p in {id(p): p for p in progs}.values():
        check_preset_runs(p, pre)
        if p.sbuf_bytes > pre.sbuf_partition_bytes or p.psum_bytes > pre.psum_partition_bytes:
            raise NprofError(f"program {p.name!r} does not fit the SBUF/PSUM of preset {pre.name}")
    wanted = sorted(set(range(world_size) if profile_ranks is None else profile_ranks))
    bad = [r for r in wanted if not 0 <= r < world_size]
    if bad:
        raise NprofError(f"rank {bad[0]} is outside the job's ranks 0..{world_size - 1}")
    ops = match_ops(progs, world_size)
    plans, timings, op_times = _schedule_ranks(progs, pre, ops, topo, _delays(start_delay_ns, world_size))
    ordered = sorted(op_times, key=lambda k: (op_times[k][1], k))
    job_ops = []
    for n, key in enumerate(ordered):
        arrival, start, end = op_times[key]
        r0 = key[0][0]
        ins = progs[r0].instructions[ops[key][r0]]
        job_ops.append(
            CollectiveOp(
                n,
                key,
                KIND[ins.opcode],
                ins.ins[0].nbytes if ins.ins else 0,
                key[0],
                arrival,
                start,
                end,
                algorithm(key[0], topo),
            )
        )
    checked: list[tuple[dict[str, np.ndarray], list[str]]] = []
    warnings: list[list[str]] = [[] for _ in range(world_size)]
    for r in range(world_size):
        given, missing = prepare_inputs(progs[r], per_rank_inputs[r])
        checked.append((given, missing))
        if numerics and missing:
            what = "no inputs given: running on all-zero inputs" if not given else f"inputs {', '.join(missing)} "
            warnings[r].append(
                f"rank {r}: {what if not given else what + 'not given: running on zeros for them'}; "
                f"{ZERO_INPUTS_WARNING}"
            )
    outputs: list[dict[str, np.ndarray]] = [{} for _ in range(world_size)]
    if numerics:
        outputs = run_lockstep(progs, pre, checked, ops, ignore_exec_errors, warnings)
    results: dict[int, SimResult] = {}
    shared: dict[tuple[int, int, int], tuple[pa.Table, pa.Table]] = {}  # ranks with one schedule share its tables
    with progress(len(wanted), "building worker profiles") as bar:
        for r in wanted:
            schedule_key = (id(progs[r]), id(plans[r]), id(timings[r]))
            if schedule_key not in shared:
                shared[schedule_key] = build_tables(progs[r], plans[r], timings[r], iteration=0)
            profile = rank_profile(
                progs[r], plans[r], timings[r], pre, r, topo, job_ops, numerics, executions, shared[schedule_key]
            )
            total = profile.info.total_time_ns or 0
            results[r] = SimResult(outputs[r], profile, (total,) * executions, tuple(warnings[r]))
            bar.advance(1)
    return JobResult(results, tuple(job_ops), topo)


def rank_profile(
    program: Program,
    plan: Plan,
    timing: Timing,
    pre: Preset,
    rank: int,
    topo: Topology,
    job_ops: list[CollectiveOp],
    numerics: bool,
    executions: int,
    tables: tuple[pa.Table, pa.Table] | None = None,
) -> Profile:
    """Rank `rank`'s profile: its instruction/DMA tables (`tables`, when already built from this program, plan
    and timing) and a `collectives` row per operation it joined."""
    instructions, dma = tables if tables is not None else build_tables(program, plan, timing, iteration=0)
    mine = [op for op in job_ops if rank in op.arrival]
    arrivals = [int(np.rint(op.arrival[rank])) for op in mine]
    ends = [int(np.rint(op.end)) for op in mine]
    starts = [int(np.rint(op.start)) for op in mine]
    collectives = {
        "id": [op.id for op in mine],
        "kind": [op.kind for op in mine],
        "bytes": [op.nbytes for op in mine],
        "rank": [rank] * len(mine),
        "ranks": [list(op.ranks) for op in mine],
        "ts": arrivals,
        "duration": [e - a for a, e in zip(arrivals, ends, strict=True)],
        "wait_ns": [s - a for a, s in zip(arrivals, starts, strict=True)],
        "algorithm": [op.algorithm for op in mine],
    }
    node, nd_idx, nc_idx = topo.place(rank, pre)
    info = sim_profile_info(
        program,
        pre,
        mode="sim, multi-worker",
        rank=rank,
        world_size=topo.world_size,
        nc_idx=nc_idx,
        nd_idx=nd_idx,
        total_time_ns=round(timing.makespan),
        meta={
            "executions": str(executions),
            "profiled_execution": str(executions),
            "numerics": str(bool(numerics)).lower(),
            "node": str(node),
            "workers_per_node": str(topo.workers_per_node),
        },
    )
    return Profile.build(info, instructions=instructions, dma=dma, collectives=collectives)
