"""`nprof capture -s DIR -- torchrun [OPTIONS] train.py [ARGS]`: one system profile per rank.

Contract:
* `torchrun_split(command) -> (launcher, target) | None`: for a command that starts a torchrun job
  (`torchrun ...` or `python -m torch.distributed.run ...`), the launcher words (torchrun, found beside
  nprof's interpreter when not on PATH, and its options without `-m/--module`) and the bootstrap target
  (`SCRIPT ARGS`, or `-m MODULE ARGS`); None for any other command. `--no-python` is refused (NprofError).
* `capture_torchrun(command, out, device, device_profile) -> list[Path]`: runs `launcher -m
  nprof.capture.torch_boot TRACE STATUS DEVICE POLICY target`, so torchrun starts every rank inside the
  bootstrap; each writes its trace, status and backend log into `<tmp>/rank<RANK>/`. Each rank's trace then
  becomes a system profile `DIR/profile_rank_<r>.ntff` (`system.attach_system`; its device profiles in
  `profile_rank_<r>.ntff.devices/`) with rank and world size in the manifest, gloo's host collectives added
  as CC work (`host_collectives`), and its rows moved onto the job's clock by `rendezvous.align_ranks`: ts = 0
  is the earliest trace start of all ranks (Unix ns, manifest `system.job_origin_unix_ns`; ranks on several
  hosts: each host's clock offset estimated from the collectives' rendezvous and removed), so the ranks line
  up in `nprof view -d DIR`; the host rendezvous waits are measured across all ranks. `out` is the directory
  (`DIR/name.ntff` means DIR; created when missing).
* Exit: a job that fails (torchrun's status non-zero) still writes the ranks that recorded something (each
  manifest has torchrun's `exit_code` and its own script's `rank.exit_code`; ranks torchrun stopped exit
  143), then raises NprofError with torchrun's status; no rank recorded anything -> NprofError, nothing written.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

import pyarrow as pa

from nprof.capture.host_collectives import host_collective_tables, match_ranks, read_host_collectives
from nprof.capture.rendezvous import align_ranks
from nprof.capture.system import (
    SystemProfile,
    append_rows,
    attach_system,
    max_id,
    origin_unix_ns,
    read_log,
    save_system,
)
from nprof.capture.system_recorder import DevicePolicy
from nprof.capture.torch_run import incomplete_note, read_status
from nprof.commandline import is_python, with_own_python
from nprof.errors import NprofError
from nprof.profile.model import make_table
from nprof.progress import progress

_RUN_MODULE = "torch.distributed.run"


def torchrun_split(command: list[str]) -> tuple[list[str], list[str]] | None:
    """(launcher words, bootstrap target) of a torchrun command, else None (see module doc)."""
    if not command:
        return None
    if Path(command[0]).name == "torchrun":
        head, rest = [command[0]], command[1:]
    elif is_python(command[0]) and command[1:3] == ["-m", _RUN_MODULE]:
        head, rest = command[:3], command[3:]
    else:
        return None
    from torch.distributed.run import get_args_parser

    try:
        parsed = get_args_parser().parse_args(rest)
    except SystemExit:
        raise NprofError(f"cannot read the torchrun command {shlex.join(command)}; check its options") from None
    if parsed.no_python:
        raise NprofError("torchrun --no-python is not supported by nprof capture: give a Python script or -m module")
    options = rest[: len(rest) - 1 - len(parsed.training_script_args)]
    options = [o for o in options if o not in ("-m", "--module")]
    target = [parsed.training_script, *parsed.training_script_args]
    if parsed.module:
        target = ["-m", *target]
    elif not Path(parsed.training_script).is_file():
        raise NprofError(f"{parsed.training_script}: no such script; check the path")
    return with_own_python(head) + options, target


def _out_dir(out: str) -> Path:
    p = Path(out).expanduser()
    d = p.parent if p.suffix == ".ntff" else p
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NprofError(f"cannot create the output directory {d} ({exc.strerror}); choose another -s") from exc
    return d


def _rank_dirs(tmp: Path) -> dict[int, Path]:
    found = {}
    for d in tmp.glob("rank*"):
        if d.name[4:].isdigit() and (d / "trace.json").is_file():
            found[int(d.name[4:])] = d
    return dict(sorted(found.items()))


def _with_host_collectives(result: SystemProfile, rows: list, rank: int) -> SystemProfile:
    """`result` plus its rank's matched gloo collectives (instruction rows and the collectives table)."""
    if not rows:
        return result
    profile = result.profile
    first_op = profile.collectives.num_rows  # after the simulated collectives (the same count on every rank)
    instructions, collectives = host_collective_tables(rows, rank, origin_unix_ns(profile), first_op)
    first = max(max_id(profile.instructions), max_id(profile.dma)) + 1
    table = append_rows(profile.instructions, "instructions", instructions, first)
    cc = pa.concat_tables([profile.collectives, make_table("collectives", collectives)])
    return replace(result, profile=replace(profile, instructions=table, collectives=cc))


def _launch(cmd: list[str]) -> int:
    """Run torchrun with the caller's stdio; its exit status (128 + signal when killed)."""
    try:
        proc = subprocess.Popen(cmd)
    except OSError as exc:
        raise NprofError(f"cannot run {cmd[0]} ({exc.strerror}); is torch installed beside nprof?") from exc
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        rc = proc.wait()  # torchrun forwards the signal; let the ranks write what they recorded
    return 128 - rc if rc < 0 else rc


def _rank_profiles(ranks: dict[int, Path], out_dir: Path, name: str, meta: dict[str, str],
                   device: str | None) -> dict[int, SystemProfile]:  # fmt: skip
    """Every rank's system profile (host collectives matched across ranks), on the job's common clock."""
    from nprof.capture.torch_session import build_torch_profile

    statuses = {r: read_status(d / "status.json") for r, d in ranks.items()}
    world = max([int(str(s.get("world_size") or 0)) for s in statuses.values()] + [max(ranks) + 1])
    results: dict[int, SystemProfile] = {}
    host = {}
    with progress(len(ranks), f"converting the traces of {len(ranks)} ranks") as bar:
        for r, d in ranks.items():
            used = str(statuses[r].get("device") or device or "cpu")
            own = statuses[r].get("exit_code", "unknown")
            mine = {**meta, "rank.exit_code": str(own), **incomplete_note(own)}  # its script's own status
            profile = build_torch_profile(d / "trace.json", used, f"{name} rank {r}", mine)
            profile = replace(profile, info=replace(profile.info, rank=r, world_size=world))
            results[r] = attach_system(profile, d, out_dir / rank_file_name(r))
            launches = [(int(e["start_ns"]), int(e["end_ns"])) for e in read_log(d) if e["kind"] == "launch"]
            host[r] = read_host_collectives(d / "trace.json", launches)
            bar.advance(1)
    matched = match_ranks(host)
    results = {r: _with_host_collectives(res, matched[r], r) for r, res in results.items()}
    aligned = align_ranks({r: res.profile for r, res in results.items()})
    return {r: replace(res, profile=aligned[r]) for r, res in results.items()}


def rank_file_name(rank: int) -> str:
    return f"profile_rank_{rank}.ntff"


def capture_torchrun(
    command: list[str], out: str, device: str | None = None, device_profile: str = "default"
) -> list[Path]:
    """Run a torchrun job under torch.profiler and write one system profile per rank (see module doc)."""
    split = torchrun_split(command)
    if split is None:
        raise NprofError(f"{shlex.join(command)}: not a torchrun command")
    launcher, target = split
    DevicePolicy.parse(device_profile)  # a bad --device-profile fails before the job starts
    if device not in ("cpu", "cuda", None):
        raise NprofError(f"--device {device}: nprof capture -- torchrun ... profiles cpu or cuda")
    out_dir = _out_dir(out)
    name = Path(target[1] if target[0] == "-m" else target[0]).name
    with tempfile.TemporaryDirectory(prefix="nprof-torchrun-") as tmp:
        files = [str(Path(tmp) / "rank{rank}" / f) for f in ("trace.json", "status.json")]
        rc = _launch([*launcher, "-m", "nprof.capture.torch_boot", *files, device or "auto", device_profile, *target])
        ranks = _rank_dirs(Path(tmp))
        if not ranks:
            raise NprofError(f"torchrun exited with status {rc} before any rank recorded anything; no profile written",
                             exit_code=rc or 1)  # fmt: skip
        meta = {"command": shlex.join(command), "exit_code": str(rc)}
        paths = []
        for r, result in _rank_profiles(ranks, out_dir, name, meta, device).items():
            path = out_dir / rank_file_name(r)
            save_system(result, path)
            paths.append(path)
    if rc:
        raise NprofError(f"torchrun exited with status {rc}; the profiles of what ran are in {out_dir}/",
                         exit_code=rc)  # fmt: skip
    return paths
