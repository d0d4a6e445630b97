"""Capture backend for the virtual NeuronCore: run a program file, write a profile file.

Contract:
* `capture_program(program_path, profile_path, inputs, *, preset=None,
  profile_nth=1, ignore_exec_errors=False, timing_only=False) -> Profile`
  loads the program (`program.file.load_program`; `device.cores.check_preset_runs`: an MX program on a pre-v4 preset is
  refused), loads each input `.npy`
  (name -> path), runs `device.simulate` for `profile_nth` executions, profiling
  the last, and saves the profile atomically. Simulator warnings (missing inputs,
  NaN outputs, skipped instructions) are issued with `warnings.warn(...,
  SimWarning)` and kept in the profile's `meta["warnings"]`. Output tensors are
  not written anywhere: they are for `simulate`'s Python callers; the capture
  reports the device time.
* `capture_from_args(args) -> Outcome` is the `nprof capture -n PROGRAM -s PROFILE
  [NAME FILE.npy ...]` front end: it checks the name/file pairs (odd count,
  unknown name listing the program's inputs, missing file), handles
  `--list-inputs`, and returns the warnings (stderr lines) and a short report (stdout)
  for the CLI to print. Multi-worker flags go to `_capture_multi_worker`, a separate branch.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from nprof.device import simulate
from nprof.device.cores import check_preset_runs
from nprof.errors import NprofError
from nprof.outcome import Outcome
from nprof.profile import Profile
from nprof.profile.sources import embed_sources
from nprof.program.file import load_program
from nprof.program.model import Program
from nprof.program.npy import read_npy


class SimWarning(UserWarning):
    """A warning from a virtual-device run (the CLI prints it on stderr)."""


def load_npy(name: str, path: str | os.PathLike[str]) -> np.ndarray:
    """Read one input array; NprofError naming the input and file if it cannot."""
    p = Path(path)
    if not p.is_file():
        raise NprofError(f"input {name!r}: file {p} does not exist; check the path")
    return read_npy(p, f"input {name!r}: {p}")


def _check_target(path: Path) -> None:
    """Fail before a long simulation if the profile cannot be written there."""
    if path.is_dir():
        raise NprofError(f"{path} is a directory; give the profile file to write, e.g. -s {path / 'profile.ntff'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise NprofError(f"{path}: directory {parent} does not exist; create it or pick another path")


def _check_names(program: Program, names: list[str]) -> None:
    known = [t.name for t in program.inputs]
    for name in names:
        if name not in known:
            listing = ", ".join(known) or "(none)"
            raise NprofError(f"program {program.name!r} has no input {name!r}; its inputs are: {listing}")


def capture_program(
    program_path: str | os.PathLike[str],
    profile_path: str | os.PathLike[str],
    inputs: Mapping[str, str | os.PathLike[str]] | None = None,
    *,
    preset: str | None = None,
    profile_nth: int = 1,
    ignore_exec_errors: bool = False,
    timing_only: bool = False,
) -> Profile:
    """Run the program file on the virtual device and write the profile of execution `profile_nth`."""
    _check_target(Path(profile_path))
    program = load_program(program_path)
    check_preset_runs(program, preset)
    given = dict(inputs or {})
    _check_names(program, list(given))
    arrays = {name: load_npy(name, path) for name, path in given.items()}
    result = simulate(
        program,
        arrays,
        preset=preset,
        numerics=not timing_only,
        executions=profile_nth,
        profile_nth=profile_nth,
        ignore_exec_errors=ignore_exec_errors,
    )
    for text in result.warnings:
        warnings.warn(text, SimWarning, stacklevel=2)
    info = result.profile.info
    meta = dict(info.meta)
    if result.warnings:
        meta["warnings"] = "\n".join(result.warnings)
    profile = replace(result.profile, info=replace(info, program=str(Path(program_path).resolve()), meta=meta))
    # the kernel sources the profile points at travel with it (looked up beside the program and in the cwd)
    profile = embed_sources(profile, [Path(program_path).resolve().parent, Path.cwd()])
    profile.save(profile_path)
    return profile


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def parse_pairs(values: list[str]) -> dict[str, str]:
    if len(values) % 2:
        raise NprofError(
            f"inputs come in NAME FILE.npy pairs; got {len(values)} arguments ({' '.join(values)}); "
            "add the missing name or file"
        )
    pairs: dict[str, str] = {}
    for name, path in zip(values[::2], values[1::2], strict=True):
        if name in pairs:
            raise NprofError(f"input {name!r} is given twice; give each input once")
        pairs[name] = path
    return pairs


def nth_exec_path(profile: str | os.PathLike[str], nth: int) -> Path:
    """Where `-s PROFILE` lands for `--profile-nth-exec N`: PROFILE itself for N = 1, else
    `<stem>_exec_<N><suffix>` beside it (profile.ntff -> profile_exec_2.ntff), as neuron-profile names it."""
    p = Path(profile)
    return p if nth == 1 else p.with_name(f"{p.stem}_exec_{nth}{p.suffix or '.ntff'}")


def _multi_worker_requested(args: argparse.Namespace) -> bool:
    return bool(
        getattr(args, "collectives_workers_per_node", None)
        or getattr(args, "collectives_worker_count", None)
        or getattr(args, "multi_input", None)
        or getattr(args, "collectives_profile_id", "all") not in (None, "all")
        or getattr(args, "collectives_worker_start_id", 0)
        or getattr(args, "collectives_rank_delay", None)
    )


def _capture_multi_worker(args: argparse.Namespace) -> Outcome:
    """Multi-worker capture (-r, --collectives-*, -m): `nprof.capture.multiworker`."""
    from nprof.capture.multiworker import capture_multi_worker_from_args

    return capture_multi_worker_from_args(args)


def _input_list(program_path: str) -> str:
    """`--list-inputs`: one `NAME<TAB>(shape)<TAB>dtype` line per program input."""
    program = load_program(program_path)
    if not program.inputs:
        return f"program {program.name!r} has no inputs\n"
    return "".join(f"{t.name}\t{tuple(t.shape)}\t{t.dtype}\n" for t in program.inputs)


def capture_from_args(args: argparse.Namespace) -> Outcome:
    """`nprof capture -n PROGRAM -s PROFILE [NAME FILE.npy ...]`: the report, warnings and exit code."""
    if _multi_worker_requested(args):
        return _capture_multi_worker(args)
    if getattr(args, "list_inputs", False):
        return Outcome(_input_list(args.program))
    pairs = parse_pairs(list(args.inputs or []))
    if not args.profile:
        raise NprofError("missing -s PROFILE: where to write the profile")
    target = nth_exec_path(args.profile, args.profile_nth_exec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SimWarning)
        profile = capture_program(
            args.program,
            target,
            pairs,
            preset=args.device_preset,
            profile_nth=args.profile_nth_exec,
            ignore_exec_errors=args.ignore_exec_errors,
            timing_only=args.timing_only,
        )
    notes = []
    for w in caught:
        if issubclass(w.category, SimWarning):
            notes.append(f"nprof capture: warning: {w.message}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    info = profile.info
    total = profile.total_time_ns
    if info.meta.get("preset_assumptions"):  # trn3: the time printed rests partly on unpublished figures
        notes.append(f"nprof capture: note: {info.preset} times rest partly on assumed hardware figures; "
                     f"`nprof view -s {target} --output-format summary-text` lists them")  # fmt: skip
    report = (
        f"ran {info.name} on the virtual {info.preset} NeuronCore: device time {total / 1000:.3f} us "
        f"({_count(profile.instructions.num_rows, 'instruction')}, {_count(profile.dma.num_rows, 'DMA transfer')}; "
        f"execution {args.profile_nth_exec} profiled)\n"
        f"profile written to {target}\n"
    )
    return Outcome(report, tuple(notes))
