"""Multi-worker capture on the virtual device: `nprof capture -n PROGRAM -r N [--collectives-*] [-m FILE] -s DIR`.

Contract:
* `capture_workers(program_path, out_dir, *, workers_per_node, worker_count=None, start_id=0,
  profile_id="all", inputs=None, rank_inputs=None, preset=None, profile_nth=1, ignore_exec_errors=False,
  timing_only=False, rank_delays=None) -> list[Path]` simulates the whole `worker_count`-rank job (default: one node,
  `start_id + workers_per_node` ranks) with `device.workers.simulate_workers` — nodes are
  `workers_per_node` consecutive ranks, collectives crossing nodes use EFA — and writes
  `out_dir/profile_rank_<i>.ntff` for this node's ranks `start_id .. start_id + workers_per_node - 1`
  (or only `profile_id`), creating `out_dir`. The job is deterministic, so one command per node with the
  same program and inputs writes files that line up across nodes.
* `rank_delays`: `--collectives-rank-delay RANK:US` values (`parse_rank_delays`): those ranks start late (a
  simulated straggler), the others wait for them at the collectives.
* Inputs: `inputs` (name -> .npy) go to every rank; `rank_inputs` (rank -> name -> .npy, from `-m FILE`)
  override them per rank. `parse_multi_input(path)` reads `-m`: one `RANK NAME FILE.npy` per line
  (`#` comments, blank lines; relative paths from the file's directory).
* `scaling_note(program, world, workers_per_node, preset)`: when the program's collectives were traced for
  another job size (instruction attr `traced_world`), one line saying how it scales (the ring model's time of
  its collectives at both sizes), kept in each profile's meta `scaling` and printed; a collective whose
  output shape the traced group fixed (all-gather/reduce-scatter) refuses another size.
* `capture_multi_worker_from_args(args) -> Outcome`: the CLI branch; `-s` names the output directory (a
  `.ntff` path means its directory, as `neuron-profile` accepts `-s output/profile.ntff`; default `.`).
  Its notes are the warnings (merged across ranks), its text the summary `job_report` writes.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from nprof.capture.sim import load_npy
from nprof.device.cores import check_preset_runs
from nprof.device.workers import JobResult, simulate_workers
from nprof.errors import NprofError
from nprof.outcome import Outcome
from nprof.program.file import load_program
from nprof.program.model import Program
from nprof.progress import progress


def rank_file(out_dir: str | os.PathLike[str], rank: int) -> Path:
    return Path(out_dir) / f"profile_rank_{rank}.ntff"


def worker_dir_for(profile: str | os.PathLike[str]) -> Path | None:
    """The directory holding the per-rank files a multi-worker `capture -s DIR/NAME.ntff` wrote
    (DIR/profile_rank_<i>.ntff), when `profile` itself does not exist; else None. Lets
    `nprof view -s DIR/NAME.ntff` open the group as the capture command line named it."""
    p = Path(profile).expanduser()
    if p.exists():
        return None
    d = p.parent if p.suffix == ".ntff" else p
    return d if d.is_dir() and any(d.glob("profile_rank_*.ntff")) else None


def parse_multi_input(path: str | os.PathLike[str]) -> dict[int, dict[str, str]]:
    """rank -> {input name: .npy path} from a `-m` file (see module doc)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise NprofError(f"-m {p}: no such file; it lists `RANK NAME FILE.npy` lines")
    out: dict[int, dict[str, str]] = {}
    for n, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or not parts[0].isdigit():
            raise NprofError(f"{p}:{n}: expected `RANK NAME FILE.npy`, got {raw.strip()!r}")
        rank, name, file = int(parts[0]), parts[1], parts[2]
        target = Path(file).expanduser()
        if not target.is_absolute():
            target = p.parent / target
        if name in out.setdefault(rank, {}):
            raise NprofError(f"{p}:{n}: input {name!r} of rank {rank} is given twice")
        out[rank][name] = str(target)
    return out


def parse_rank_delays(items: list[str], world: int) -> dict[int, float]:
    """rank -> start delay in ns from `--collectives-rank-delay RANK:US` values; NprofError naming a bad one."""
    out: dict[int, float] = {}
    for item in items:
        rank, _, us = item.partition(":")
        try:
            r, delay = int(rank), float(us)
        except ValueError:
            r, delay = -1, -1.0
        if not (0 <= r < world and 0 <= delay < 1e12):
            raise NprofError(
                f"--collectives-rank-delay {item!r}: expected RANK:US with RANK in 0..{world - 1} and US >= 0 "
                "(microseconds), e.g. 17:250"
            )
        out[r] = delay * 1000.0
    return out


def _check_names(program: Program, names: list[str], where: str) -> None:
    known = [t.name for t in program.inputs]
    for name in names:
        if name not in known:
            raise NprofError(
                f"{where}: program {program.name!r} has no input {name!r}; its inputs are: {', '.join(known) or '-'}"
            )


def scaling_note(program: Program, world: int, workers_per_node: int, preset: str | None = None) -> str | None:
    """One line on how a graph traced for another job size scales to `world` workers (None when its collectives
    were traced for `world`, or carry no traced size). A collective whose output shape was fixed by the traced
    group (all-gather, reduce-scatter traced on G ranks) cannot run on more: NprofError saying what to do."""
    from nprof.arch.isa import COLLECTIVES
    from nprof.arch.presets import get_preset
    from nprof.device.collectives import KIND, Topology, ring_time_ns

    cc = [(i, ins) for i, ins in enumerate(program.instructions) if ins.opcode in COLLECTIVES]
    traced = {int(ins.attr("traced_world")) for _, ins in cc if ins.attr("traced_world") is not None}
    if not traced or traced == {world}:
        return None
    for i, ins in cc:
        group = ins.attr("group") or ()
        if group and len(group) != world:
            raise NprofError(
                f"instruction {i} ({KIND[ins.opcode]}) of {program.name} was traced for a group of {len(group)} "
                f"workers, which fixes its output shape; capture it with -r {len(group)}, or trace the script "
                f"with {world} processes (nprof compile -- torchrun --nproc_per_node={world} ...)"
            )
    pre = get_preset(preset or program.preset)
    was = max(traced)

    def total_us(n: int) -> float:
        topo = Topology(n, min(workers_per_node, n))
        ranks = tuple(range(n))
        return sum(ring_time_ns(ins.opcode, ins.ins[0].nbytes, ranks, topo, pre) for _, ins in cc) / 1000

    kinds = sorted({KIND[ins.opcode] for _, ins in cc})
    return (
        f"{program.name} was traced for {was} worker{'s' if was > 1 else ''} and runs here on {world}: its "
        f"{len(cc)} collectives ({', '.join(kinds)}) span all {world} ranks; their ring time, summed before any "
        f"overlap and waits, goes from {total_us(was):.3f} us on {was} to {total_us(world):.3f} us on {world} "
        "(model: nprof.device.collectives); values the script computed from the world size while tracing "
        "(such as a gradient scale) stay as traced"
    )


def _local_ranks(workers_per_node: int, worker_count: int | None, start_id: int) -> tuple[int, list[int]]:
    """(world size, this node's ranks); NprofError naming the flag when the node's block does not fit."""
    if workers_per_node < 1:
        raise NprofError(f"--collectives-workers-per-node must be >= 1, got {workers_per_node}")
    world = worker_count if worker_count is not None else start_id + workers_per_node
    local = list(range(start_id, start_id + workers_per_node))
    if local[-1] >= world:
        raise NprofError(
            f"this node's ranks {local[0]}..{local[-1]} do not fit a {world}-worker job; check "
            "--collectives-worker-start-id, --collectives-workers-per-node and --collectives-worker-count"
        )
    if start_id % workers_per_node:
        raise NprofError(
            f"--collectives-worker-start-id {start_id} is not a multiple of --collectives-workers-per-node "
            f"{workers_per_node}; nodes hold consecutive blocks of ranks"
        )
    return world, local


def _profiled_ranks(profile_id: str | int, local: list[int]) -> list[int]:
    """The ranks of `local` to write profiles for: all, or the one `--collectives-profile-id` names."""
    if str(profile_id) == "all":
        return local
    try:
        pid = int(profile_id)
    except ValueError:
        raise NprofError(f"--collectives-profile-id must be `all` or a rank, got {profile_id!r}") from None
    if pid not in local:
        raise NprofError(f"--collectives-profile-id {pid} is not on this node (ranks {local[0]}..{local[-1]})")
    return [pid]


def _rank_arrays(
    program: Program, world: int, inputs: Mapping[str, str] | None, rank_inputs: Mapping[int, Mapping[str, str]] | None
) -> dict[int, dict[str, object]] | None:
    """Each rank's input arrays (common `-i` files, overridden per rank by `-m`; each file read once), or None
    when no input was given; NprofError for unknown names or ranks."""
    common = dict(inputs or {})
    _check_names(program, list(common), "inputs")
    per_rank = {r: dict(v) for r, v in (rank_inputs or {}).items()}
    for r, names in per_rank.items():
        if not 0 <= r < world:
            raise NprofError(f"-m: rank {r} is outside the job's ranks 0..{world - 1}")
        _check_names(program, list(names), f"-m rank {r}")
    if not (common or per_rank):
        return None
    cache: dict[str, object] = {}

    def arrays(r: int) -> dict[str, object]:
        out = {}
        for name, path in {**common, **per_rank.get(r, {})}.items():
            if path not in cache:
                cache[path] = load_npy(name, path)
            out[name] = cache[path]
        return out

    return {r: arrays(r) for r in range(world)}


def _write_rank_profiles(job: JobResult, wanted: list[int], out_dir: str | os.PathLike[str], program_path: str
                         | os.PathLike[str], note: str | None) -> list[Path]:  # fmt: skip
    """Save the profiles of `wanted` ranks as `rank_file`s in `out_dir` (program path, scaling note and warnings
    in their manifests); `job.results` is updated to the profiles as written."""
    target = Path(out_dir).expanduser()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NprofError(f"cannot create the output directory {target} ({exc.strerror}); choose another -s") from exc
    resolved = str(Path(program_path).resolve())
    paths = []
    with progress(len(wanted), f"Writing {len(wanted)} worker profiles") as bar:
        for r in wanted:
            res = job.results[r]
            meta = dict(res.profile.info.meta)
            if note:
                meta["scaling"] = note
            if res.warnings:
                meta["warnings"] = "\n".join(res.warnings)
            profile = replace(res.profile, info=replace(res.profile.info, program=resolved, meta=meta))
            paths.append(profile.save(rank_file(target, r)))
            job.results[r] = replace(res, profile=profile)  # the job as written
            bar.advance(1)
    return paths


def capture_workers(
    program_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    workers_per_node: int,
    worker_count: int | None = None,
    start_id: int = 0,
    profile_id: str | int = "all",
    inputs: Mapping[str, str] | None = None,
    rank_inputs: Mapping[int, Mapping[str, str]] | None = None,
    preset: str | None = None,
    profile_nth: int = 1,
    ignore_exec_errors: bool = False,
    timing_only: bool = False,
    rank_delays: list[str] | None = None,
) -> tuple[list[Path], JobResult]:
    """Simulate the job and write this node's rank profiles (see module doc); returns (paths, job)."""
    world, local = _local_ranks(workers_per_node, worker_count, start_id)
    wanted = _profiled_ranks(profile_id, local)
    program = load_program(program_path)
    check_preset_runs(program, preset)
    note = scaling_note(program, world, workers_per_node, preset)
    job = simulate_workers(
        program,
        _rank_arrays(program, world, inputs, rank_inputs),
        world_size=world,
        workers_per_node=workers_per_node,
        preset=preset,
        numerics=not timing_only,
        profile_ranks=wanted,
        executions=profile_nth,
        ignore_exec_errors=ignore_exec_errors,
        start_delay_ns=parse_rank_delays(list(rank_delays or []), world),
    )
    return _write_rank_profiles(job, wanted, out_dir, program_path, note), job


def _out_dir(arg: str | None) -> Path:
    if not arg:
        return Path(".")
    p = Path(arg)
    return p.parent if p.suffix == ".ntff" else p


def _ranks_text(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}..{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _merged_warnings(per_rank: Mapping[int, tuple[str, ...]]) -> list[str]:
    """One line per distinct warning, naming the ranks it applies to ("ranks 0..31: ...")."""
    merged: dict[str, list[int]] = {}
    for rank, texts in sorted(per_rank.items()):
        for text in texts:
            prefix = f"rank {rank}: "
            merged.setdefault(text.removeprefix(prefix), []).append(rank)
    return [f"{_ranks_text(ranks)}: {text}" for text, ranks in merged.items()]


def capture_multi_worker_from_args(args: argparse.Namespace) -> Outcome:
    """`nprof capture -n PROGRAM -r N ...` (see module doc): the summary (`job_report`) and warnings."""
    from nprof.capture.sim import parse_pairs

    per_node = args.collectives_workers_per_node
    if per_node is None:
        raise NprofError("multi-worker capture needs -r/--collectives-workers-per-node N (workers on this node)")
    pairs = parse_pairs(list(args.inputs or []))
    rank_inputs = parse_multi_input(args.multi_input) if args.multi_input else None
    out_dir = _out_dir(args.profile)
    paths, job = capture_workers(
        args.program,
        out_dir,
        workers_per_node=per_node,
        worker_count=args.collectives_worker_count,
        start_id=args.collectives_worker_start_id,
        profile_id=args.collectives_profile_id,
        inputs=pairs,
        rank_inputs=rank_inputs,
        preset=args.device_preset,
        profile_nth=args.profile_nth_exec,
        ignore_exec_errors=args.ignore_exec_errors,
        timing_only=args.timing_only,
        rank_delays=args.collectives_rank_delay,
    )
    lines = _merged_warnings({r: res.warnings for r, res in job.results.items()})
    notes = [f"nprof capture: warning: {text}" for text in lines[:8]]
    if len(lines) > 8:
        notes.append(f"nprof capture: {len(lines) - 8} more warnings (kept in each profile's meta)")
    return Outcome(job_report(job, per_node, paths, out_dir), tuple(notes))


def job_report(job: JobResult, per_node: int, paths: list[Path], out_dir: Path) -> str:
    """The summary of a multi-worker capture: the slowest rank's device time, the collectives and their
    longest wait, the scaling note (when the graph was traced for another size) and the files written."""
    scaling = next(iter(job.results.values())).profile.info.meta.get("scaling")
    world = job.topology.world_size
    totals = {r: res.profile.total_time_ns for r, res in job.results.items()}
    slow = max(totals, key=lambda r: (totals[r], -r))
    waits = [max(op.start - a for a in op.arrival.values()) for op in job.ops]
    nodes = -(-world // per_node)
    return (
        f"ran {job.results[slow].profile.info.name} on {world} virtual "
        f"{job.results[slow].profile.info.preset} NeuronCores ({nodes} node{'s' if nodes > 1 else ''} x "
        f"{per_node} workers): device time {totals[slow] / 1000:.3f} us (slowest rank {slow}); "
        f"{len(job.ops)} collective operations, longest wait {max(waits, default=0) / 1000:.3f} us\n"
        + (f"{scaling}\n" if scaling else "")
        + f"wrote {len(paths)} profile{'s' if len(paths) != 1 else ''} to {out_dir}/ "
        f"({paths[0].name}{' .. ' + paths[-1].name if len(paths) > 1 else ''}); view them with: "
        f"nprof view -d {out_dir}\n"
    )
