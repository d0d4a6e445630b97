"""Collectives of a compiled graph exchanged with the other processes of a torch.distributed job (torchrun).

Contract:
* `current_job() -> Job | None`: this process's place in a multi-process torch.distributed job (initialised,
  world size > 1): rank, world size and workers per node (`LOCAL_WORLD_SIZE`, which torchrun sets; else the
  world size); None in a single process.
* `run_in_job(program, inputs, job, *, allow_nonfinite=True) -> SimResult`: what `simulate(program, inputs)`
  gives on this rank's virtual NeuronCore, except that every collective instruction exchanges its data with
  the other processes. Each rank runs its instructions in program order up to its next collective; the ranks
  then all-gather a header (sequence number, kind, reduce op, element counts) and, when every header agrees,
  move the data through a gloo group of their own (`Exchange`, `exchange_data`): a float64 chain reduction in
  rank order then a scatter (and all-gather) of its chunks for all-reduce/reduce-scatter, an all-gather or
  pairwise all-to-all in the data's own dtype otherwise; each rank gets the bits `collectives.combine` (the
  device model) gives, with a traffic per process independent of the process count. Each rank writes its
  part in the output's dtype.
* Timing: the model of `device.workers`, with the other ranks' arrivals exchanged: a collective *arrives*
  on a rank when its dependencies are done there; the ranks all-gather their arrivals, the operation starts
  at the last one and lasts `collectives.ring_time_ns` (NeuronLink inside a node, EFA across nodes). The
  durations are iterated to the fixed point; every rank decides from the same gathered arrivals, so all
  iterate equally often.
* The profile is this rank's (instructions, DMA, one `collectives` row per operation with its bytes, wait and
  algorithm), as `simulate_workers` writes for one rank, with the rank, world size, nd_idx and nc_idx. Its
  manifest meta `host.exchange_unix_ns` is the host's measured side: per collective (in program order) the
  Unix ns (`time.time_ns()`) when this process entered its data exchange and when it left it — a blocking
  all-gather, so it leaves only after every rank entered (what the system view's host waits and the
  multi-node clock alignment are measured from).
* The compiler's runtime calls `run_in_job` for every execution of a program with collectives
  (`has_collectives`) inside a multi-process job (`current_job`). `run_in_job(..., gatherer=G)` exchanges
  through G instead (tests run ranks as threads). Schedules are
  cached per live program and collective durations (timing does not depend on data).
* Bad input, one NprofError line on every rank, never a hang: ranks issuing different collectives (kind,
  reduce op, size) name what each rank issued; a rank that does not reach a collective within
  `NPROF_COLLECTIVE_TIMEOUT` seconds (default 300) is a timeout error saying how to wait longer.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import Any, Protocol

import numpy as np

from nprof.arch.isa import COLLECTIVES, Opcode
from nprof.arch.presets import get_preset
from nprof.device.collectives import KIND, Topology, algorithm, ring_time_ns
from nprof.device.exchange_data import exchange_collective
from nprof.device.plan import Plan, plan_for
from nprof.device.schedule import Timing, schedule
from nprof.device.simulate import SimResult, collect_outputs, one_blas_thread, prepare_inputs
from nprof.device.worker_numerics import EXEC_ERRORS, RankState, rank_states
from nprof.device.workers import CollectiveOp, rank_profile
from nprof.errors import NprofError
from nprof.program.model import Program

ENV_TIMEOUT = "NPROF_COLLECTIVE_TIMEOUT"
EXCHANGE_META = "host.exchange_unix_ns"  # manifest meta: [[entered, left], ...] per collective (module doc)
DEFAULT_TIMEOUT_S = 300.0
_KIND_CODE = {op: i + 1 for i, op in enumerate(sorted(COLLECTIVES, key=lambda o: o.value))}
_TIMING = 99  # header kind of the arrival exchange
_OPS = ("add", "maximum", "minimum", "multiply")


@dataclass(frozen=True)
class Job:
    """This process in a multi-process torch.distributed job."""

    rank: int
    world_size: int
    workers_per_node: int


def current_job() -> Job | None:
    """The job this process belongs to, or None outside a multi-process torch.distributed job."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return None
    world = dist.get_world_size()
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    per_node = int(local) if local.isdigit() and 0 < int(local) <= world and world % int(local) == 0 else world
    return Job(dist.get_rank(), world, per_node)


def has_collectives(program: Program) -> bool:
    """True when `program` has a collective (CC-core) instruction."""
    return any(ins.opcode in COLLECTIVES for ins in program.instructions)


def _timeout_s() -> float:
    raw = os.environ.get(ENV_TIMEOUT, "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise NprofError(f"{ENV_TIMEOUT}={raw!r}: give a number of seconds") from None
    if value <= 0:
        raise NprofError(f"{ENV_TIMEOUT}={raw!r}: give a positive number of seconds")
    return value


def _timeout_error(describe: str, timeout: float, why: str) -> NprofError:
    import torch.distributed as dist

    return NprofError(
        f"rank {dist.get_rank()} {describe}: the other processes did not all reach it within "
        f"{timeout:g} s ({why}); every rank must run the same compiled graphs with the same "
        f"collectives in the same order (set {ENV_TIMEOUT}=SECONDS to wait longer)"
    )


def _arrive_all(describe: str, generation: int) -> None:
    """Wait (at most the timeout) until every rank reached its first exchange, counting on the job's store
    (`generation`: how many exchanges this process made before, so a re-initialised job counts anew)."""
    import time

    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_store

    store, key, world = _get_default_store(), f"nprof.exchange.arrived.{generation}", dist.get_world_size()
    timeout = _timeout_s()
    deadline = time.monotonic() + timeout
    count = store.add(key, 1)
    while count < world:
        if time.monotonic() > deadline:
            raise _timeout_error(describe, timeout, f"{count} of {world} ranks arrived")
        time.sleep(0.01)
        count = store.add(key, 0)


class Gatherer(Protocol):
    """What the runner needs of an exchange: every rank's payload once all headers agree (timing), and this
    rank's result of one collective once all headers agree (data)."""

    def gather(self, header: list[int], payload: np.ndarray, describe: str) -> list[np.ndarray]: ...

    def collective(
        self, header: list[int], opcode: Opcode, op: str, payload: np.ndarray, describe: str
    ) -> np.ndarray: ...


class Exchange:
    """All-gathers between the job's processes on a gloo group of nprof's own (its timeout: see module doc)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.world = dist.group.WORLD  # the job's process group this exchange belongs to
        self.generation = len(_GENERATIONS)
        _GENERATIONS.append(self.generation)
        self._group: Any = None
        self.seq = 0  # exchanges so far in this process (the same count on every rank)

    def _pg(self, describe: str) -> Any:
        import torch.distributed as dist

        if self._group is None:  # every wait has its own timeout (`_timeout_s`); the group's is a backstop
            _arrive_all(describe, self.generation)  # new_group would wait for absent ranks as long as the store does
            backstop = timedelta(seconds=max(3600.0, _timeout_s()))
            self._group = dist.new_group(backend="gloo", timeout=backstop)
        return self._group

    def gather(self, header: list[int], payload: np.ndarray, describe: str) -> list[np.ndarray]:
        """Every rank's `payload` (rank order) once all headers agree; NprofError otherwise (see module doc).
        `describe` says in words what this rank issues (used in the error)."""
        import torch

        self._agree(header, describe)
        data = torch.from_numpy(np.ascontiguousarray(payload, dtype=np.float64).reshape(-1))
        return [t.numpy() for t in self._all_gather(data, describe)]

    def collective(self, header: list[int], opcode: Opcode, op: str, payload: np.ndarray, describe: str) -> np.ndarray:
        """This rank's flat result of one collective once all headers agree (`exchange_data`: the same bits as
        `collectives.combine`, a traffic per process independent of the process count)."""
        import torch.distributed as dist

        self._agree(header, describe)
        group = self._pg(describe)
        return exchange_collective(group, dist.get_rank(), dist.get_world_size(), opcode, op, payload,
                                   partial(self._wait, describe=describe))  # fmt: skip

    def _agree(self, header: list[int], describe: str) -> None:
        """All-gather this exchange's sequence number and `header`; NprofError naming every rank's collective
        when they differ."""
        import torch

        self.seq += 1
        mine = torch.tensor([self.seq, *header], dtype=torch.int64)
        heads = self._all_gather(mine, describe)
        if any(not torch.equal(h, mine) for h in heads):
            self._mismatch(describe)

    def _wait(self, work: Any, describe: str) -> None:
        timeout = _timeout_s()
        try:
            work.wait(timeout=timedelta(seconds=timeout))
        except RuntimeError as exc:
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            raise _timeout_error(describe, timeout, why) from None

    def _all_gather(self, tensor: Any, describe: str) -> list[Any]:
        import torch
        import torch.distributed as dist

        group = self._pg(describe)
        out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        self._wait(dist.all_gather(out, tensor, group=group, async_op=True), describe)
        return out

    def _mismatch(self, describe: str) -> None:
        import torch.distributed as dist

        texts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(texts, describe, group=self._pg(describe))  # every rank is here: headers differed
        lines = "; ".join(f"rank {r} {t}" for r, t in enumerate(texts))
        raise NprofError(
            f"ranks issue different collectives: {lines}; every rank must run the same compiled graphs with the "
            "same collectives in the same order"
        )


_EXCHANGE: list[Exchange] = []
_GENERATIONS: list[int] = []  # one entry per Exchange this process created


def exchange() -> Exchange:
    """The process's exchange (created on first use, by every rank at the same collective; again after the
    job's process group was destroyed and initialised anew)."""
    import torch.distributed as dist

    if not _EXCHANGE or _EXCHANGE[0].world is not dist.group.WORLD:
        _EXCHANGE[:] = [Exchange()]
    return _EXCHANGE[0]


def _describe(program: Program, i: int) -> str:
    ins = program.instructions[i]
    op = f" ({ins.attr('op')})" if ins.attr("op") else ""
    return f"issues {KIND[ins.opcode]}{op} of {ins.ins[0].elements} elements at instruction {i} of {program.name}" + (
        f" ({ins.source})" if ins.source else ""
    )


def _header(program: Program, i: int) -> list[int]:
    ins = program.instructions[i]
    op = str(ins.attr("op", "add"))
    return [_KIND_CODE[ins.opcode], _OPS.index(op) if op in _OPS else 9, ins.ins[0].elements, ins.outs[0].elements]


def _check_group(program: Program, i: int, job: Job) -> None:
    group = program.instructions[i].attr("group", ()) or ()
    if group and tuple(sorted(int(r) for r in group)) != tuple(range(job.world_size)):
        raise NprofError(
            f"instruction {i} of {program.name} is a collective on ranks {tuple(group)} in a {job.world_size}-process "
            "job: nprof exchanges collectives across every process only; use the default (world) group"
        )


def _collective(state: RankState, i: int, job: Job, ex: Gatherer) -> tuple[int, int]:
    """Exchange one collective's data and write this rank's result (see module doc); returns the Unix ns when
    the exchange was entered and left."""
    program = state.program
    ins = program.instructions[i]
    _check_group(program, i, job)
    contribution = state.mem.read(ins.ins[0])
    entered = time.time_ns()
    try:
        result = ex.collective(_header(program, i), ins.opcode, str(ins.attr("op", "add")), contribution,
                               _describe(program, i))  # fmt: skip
        left = time.time_ns()
        if result.size != ins.outs[0].elements:
            raise ValueError(
                f"{KIND[ins.opcode]} on {job.world_size} ranks produces {result.size} elements per rank but the "
                f"output holds {ins.outs[0].elements}"
            )
        state.mem.write(ins.outs[0], result.reshape(ins.outs[0].shape))
    except EXEC_ERRORS as exc:
        left = time.time_ns()
        state.fail(i, exc, False)
    return entered, left


def _numerics(
    program: Program, checked: dict[str, np.ndarray], job: Job, ex: Gatherer
) -> tuple[RankState, list[int], list[tuple[int, int]]]:
    """Run this rank's instructions with every collective exchanged; returns the state, the collective indices
    and each exchange's (entered, left) Unix ns."""
    pre = get_preset(program.preset)
    (state,) = rank_states([program], pre, [(checked, [])])
    state.members = [job.rank]  # errors name this process's rank
    stops = [i for i, ins in enumerate(program.instructions) if ins.opcode in COLLECTIVES]
    host = []
    with np.errstate(all="ignore"), one_blas_thread():
        for i in stops:
            state.run_until(i, False)
            host.append(_collective(state, i, job, ex))
            state.pos = i + 1
        state.run_until(len(program.instructions), False)
    return state, stops, host


_SCHEDULES: dict[int, tuple[weakref.ref[Program], dict[tuple[float, ...], tuple[Plan, Timing]]]] = {}


def _evict(key: int, _ref: object) -> None:
    _SCHEDULES.pop(key, None)


def _scheduled(program: Program, base: Plan, stops: list[int], durations: list[float]) -> tuple[Plan, Timing]:
    """This rank's plan and schedule with the collectives at `stops` lasting `durations` (cached per live
    program: a graph runs with the same durations step after step, and timing does not depend on data)."""
    hit = _SCHEDULES.get(id(program))
    if hit is None or hit[0]() is not program:
        hit = _SCHEDULES[id(program)] = (weakref.ref(program, partial(_evict, id(program))), {})
    key = tuple(durations)
    got = hit[1].get(key)
    if got is None:
        dur = base.dur.copy()
        for i, d in zip(stops, durations, strict=True):
            dur[i] = d
        plan = replace(base, dur=dur)
        got = hit[1][key] = (plan, schedule(plan))
        if len(hit[1]) > 8:  # a few variants (first call, fixed point) per graph
            hit[1].pop(next(iter(hit[1])))
    return got


def _timing(program: Program, stops: list[int], job: Job, ex: Gatherer) -> tuple[Any, Timing, list[CollectiveOp]]:
    """This rank's plan and timing, and the job's collective operations (fixed point over exchanged arrivals)."""
    pre = get_preset(program.preset)
    topo = Topology(job.world_size, job.workers_per_node)
    base = plan_for(program, pre)
    everyone = tuple(range(job.world_size))
    ring = [ring_time_ns(program.instructions[i].opcode, program.instructions[i].ins[0].nbytes, everyone, topo, pre)
            for i in stops]  # fmt: skip
    durations = list(ring)
    previous: list[np.ndarray] | None = None
    for _ in range(len(stops) + 2):
        plan, timing = _scheduled(program, base, stops, durations)
        mine = np.array([timing.start[i] for i in stops], dtype=np.float64)
        what = f"exchanges the timing of {len(stops)} collectives of {program.name}"
        arrivals = ex.gather([_TIMING, 0, len(stops), 0], mine, what)
        starts = np.max(np.stack(arrivals), axis=0)
        durations = [float(s + r - a) for s, r, a in zip(starts, ring, mine, strict=True)]
        if previous is not None and all(np.array_equal(a, b) for a, b in zip(arrivals, previous, strict=True)):
            break
        previous = arrivals
    ops = []
    for k, i in enumerate(stops):
        ins = program.instructions[i]
        arrival = {r: float(arrivals[r][k]) for r in everyone}
        ops.append(CollectiveOp(k, (everyone, k), KIND[ins.opcode], ins.ins[0].nbytes, everyone, arrival,
                                float(starts[k]), float(starts[k] + ring[k]), algorithm(everyone, topo)))  # fmt: skip
    return plan, timing, ops


def run_in_job(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None,
    job: Job,
    *,
    allow_nonfinite: bool = True,
    gatherer: Gatherer | None = None,
) -> SimResult:
    """Run `program` on this rank's virtual NeuronCore, collectives exchanged across processes (module doc).
    `gatherer` replaces the process's `exchange()` (tests run ranks as threads)."""
    ex = gatherer if gatherer is not None else exchange()
    checked, missing = prepare_inputs(program, inputs)
    warnings: list[str] = []
    state, stops, host = _numerics(program, checked, job, ex)
    warnings.extend(note.replace("{rank}", str(job.rank)) for note in state.notes)
    outputs = collect_outputs(program, state.mem, bool(missing) or allow_nonfinite, warnings)
    plan, timing, ops = _timing(program, stops, job, ex)
    topo = Topology(job.world_size, job.workers_per_node)
    profile = rank_profile(program, plan, timing, get_preset(program.preset), job.rank, topo, ops, True, 1)
    meta = {**profile.info.meta, EXCHANGE_META: json.dumps([list(h) for h in host])}
    profile = replace(profile, info=replace(profile.info, meta=meta))
    total = profile.info.total_time_ns or 0
    return SimResult(outputs, profile, (total,), tuple(warnings))
