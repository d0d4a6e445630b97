"""`-n PROGRAM` beside `-s PROFILE` (`nprof view`): the program file must be valid and be the one that
made the profile, where the profile records it.

Contract: `check_program(program_path, profile_path) -> Program` loads the program (format, schema
version and content are validated as for `nprof capture -n`). When `profile_path` is an nprof profile
file (its manifest read, its tables not) captured on the virtual device, the profile records the
program that made it, by name and tensors (inputs, outputs, weights: name, shape, dtype): a program
with another name or other tensors raises NprofError with one line. Chrome traces, profile JSON and
real-hardware profiles record no program, so any valid program file is accepted with them.
"""

from __future__ import annotations

import os
from pathlib import Path

from nprof.capture import sniff_kind
from nprof.errors import NprofError
from nprof.profile import Profile, ProfileInfo, TensorInfo
from nprof.program.file import load_program
from nprof.program.model import Program


def _tensors(program: Program) -> tuple[TensorInfo, ...]:
    """The program's tensors as a virtual-device profile records them (all but internal ones)."""
    return tuple(TensorInfo(t.name, tuple(t.shape), t.dtype, t.kind) for t in program.tensors if t.kind != "internal")


def _describe(t: TensorInfo) -> str:
    return f"{t.kind} {t.name} {list(t.shape)} {t.dtype}"


def _mismatch(program: Program, info: ProfileInfo) -> str | None:
    """Why `program` did not make the profile of `info`, or None when it matches what `info` records."""
    if program.name != info.name:
        return f"the profile was captured from program {info.name!r}, this is {program.name!r}"
    mine, theirs = _tensors(program), tuple(info.tensors)
    for a, b in zip(mine, theirs, strict=False):
        if a != b:
            return f"its tensors differ from the profile's ({_describe(a)} here, {_describe(b)} recorded)"
    if len(mine) != len(theirs):
        return f"it has {len(mine)} input/output/weight tensors, the profile records {len(theirs)}"
    return None


def check_program(program_path: str | os.PathLike[str], profile_path: str | os.PathLike[str] | None) -> Program:
    """The program at `program_path`, checked against the profile at `profile_path` (see module doc)."""
    program = load_program(program_path)
    if profile_path is None or not Path(profile_path).is_file() or sniff_kind(profile_path) != "ntff":
        return program
    info = Profile.read_info(profile_path)
    if info.device != "virtual-neuroncore":
        return program
    why = _mismatch(program, info)
    if why is not None:
        made = f" (from {info.program})" if info.program else ""
        raise NprofError(
            f"-n {program_path}: not the program that made {profile_path}{made}: {why}; "
            "give that program or leave -n out"
        )
    return program
