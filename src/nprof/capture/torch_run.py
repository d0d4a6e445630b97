"""`nprof capture --device cpu|cuda -s profile.ntff -- python script.py [args]`.

Contract of `capture_command(command, profile_path, device)`:
* `device` is "cpu", "cuda" or None (cuda when torch sees a GPU, else cpu);
* `command` is ``python script.py ARGS``, ``python -m module ARGS`` (any
  ``python``, ``python3``, ``python3.X`` or path to one) or ``script.py ARGS``;
  the script runs in a child process of nprof's own interpreter
  (``sys.executable``, which has torch and nprof) through the bootstrap
  `nprof.capture.torch_boot`, with the caller's stdin/stdout/stderr, environment
  and working directory, under torch.profiler for its whole run;
* the trace is converted into a Profile (`torch_session.build_torch_profile`:
  device, device name, peaks, command line and exit status in the manifest),
  joined with what the nprof backend did (`nprof.capture.system`: a system
  profile when a graph compiled with ``backend="nprof"`` ran; `device_profile`
  picks which executions keep a device profile, in ``<profile>.devices/``) and
  written atomically to `profile_path`;
* exit status: a script exiting 0 -> the line to print (`written_note`: the profile written, where its
  device profiles are, the command that views it). A script exiting non-zero (or killed)
  -> `NprofError` with one line and ``exit_code`` = the script's status
  (128 + signal when killed); the profile of what ran before the failure is
  still written when at least one op was recorded (the message says so), else
  no file is written. A command that is not a Python script, a missing script
  or output directory, a profile or program given as the script, `-s` naming the script itself, or an
  unavailable device -> `NprofError` (exit 2) before or instead of running.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from nprof.capture.system import attach_system, devices_dir, save_system
from nprof.capture.system_recorder import DevicePolicy
from nprof.commandline import is_python
from nprof.container import is_zip, read_head
from nprof.errors import NprofError
from nprof.progress import progress


def _target(command: list[str]) -> tuple[list[str], str]:
    """(bootstrap target args, display name) from the user's command."""
    if not command:
        raise NprofError("nothing to run: give the command after `--`, e.g. nprof capture -s p.ntff -- python train.py")
    args = list(command)
    if is_python(args[0]):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] not in ("-m",):
            if args[0] in ("-u", "-B", "-O", "-OO", "-E", "-s", "-S"):
                args = args[1:]
                continue
            raise NprofError(f"python option {args[0]} is not supported by nprof capture; give `python script.py`")
        if not args:
            raise NprofError("nothing to run: `python` needs a script, e.g. nprof capture -s p.ntff -- python train.py")
    if args[0] == "-m":
        if len(args) < 2:
            raise NprofError("`python -m` needs a module name")
        return args, args[1]
    script = Path(args[0])
    if script.suffix != ".py" and not script.is_file():
        raise NprofError(
            f"{args[0]}: nprof capture runs Python scripts; give `-- python script.py [args]` or `-- python -m module`"
        )
    if not script.is_file():
        raise NprofError(f"{args[0]}: no such script; check the path")
    if is_zip(read_head(script, 4, "script")):
        raise NprofError(
            f"{args[0]}: an nprof profile or program, not a Python script; view a profile with "
            "nprof view -s FILE, run a program with nprof capture -n FILE -s profile.ntff"
        )
    return args, script.name


def capture_command(
    command: list[str], profile_path: str, device: str | None = None, device_profile: str = "default"
) -> str:
    """Run `command` under torch.profiler and write the (system) profile (see module doc)."""
    target, name = _target(command)
    DevicePolicy.parse(device_profile)  # a bad --device-profile fails before the script runs
    out = Path(profile_path)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise NprofError(f"{out}: directory {parent} does not exist; create it or pick another path")
    if out.is_dir():
        raise NprofError(f"{out}: is a directory; give a file name such as {out / 'profile.ntff'}")
    if target[0] != "-m" and Path(target[0]).resolve() == out.resolve():
        raise NprofError(f"-s {out} is the script being run; write the profile elsewhere")
    if device not in ("cpu", "cuda", None):
        raise NprofError(f"--device {device}: nprof capture -- COMMAND profiles cpu or cuda")
    with tempfile.TemporaryDirectory(prefix="nprof-capture-") as tmp:
        trace, status_path = Path(tmp) / "trace.json", Path(tmp) / "status.json"
        boot = [str(trace), str(status_path), device or "auto", device_profile]
        cmd = [sys.executable, "-m", "nprof.capture.torch_boot", *boot]
        cmd += target
        proc = subprocess.Popen(cmd)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            rc = proc.wait()  # the child got the same SIGINT; let it write what it recorded
        rc = 128 - rc if rc < 0 else rc
        status = read_status(status_path)
        if status.get("error") and not trace.is_file():
            raise NprofError(str(status["error"]), exit_code=rc or 2)
        if not trace.is_file():
            raise NprofError(
                f"{name} exited with status {rc} before anything was recorded; no profile written", exit_code=rc or 1
            )
        meta = {"command": shlex.join(command), "exit_code": str(rc), **incomplete_note(rc)}
        from nprof.capture.torch_session import build_torch_profile

        used = str(status.get("device") or device or "cpu")
        with progress(None, f"converting the trace of {name}") as bar:
            profile = build_torch_profile(trace, used, name, meta)
            bar.advance()
        if profile.instructions.num_rows == 0 and profile.dma.num_rows == 0:
            if rc:
                raise NprofError(
                    f"{name} exited with status {rc}; no PyTorch op was recorded, no profile written", exit_code=rc
                )
            raise NprofError(f"{name}: no PyTorch op ran, nothing to profile; no profile written")
        save_system(attach_system(profile, Path(tmp), out), out)
    if rc:
        raise NprofError(
            f"{name} exited with status {rc}; the profile of what ran before the failure is in {out}", exit_code=rc
        )
    return written_note(out)


def written_note(out: Path) -> str:
    """`profile written to OUT` (+ where its device profiles are) and the command viewing it, one line."""
    devices = devices_dir(out)
    count = len(list(devices.glob("*.ntff"))) if devices.is_dir() else 0
    more = f" (and {count} device profile{'s' * (count != 1)} in {devices}/)" if count else ""
    return f"profile written to {out}{more}; view it with: nprof view -s {out}\n"


def incomplete_note(rc: object) -> dict[str, str]:
    """The manifest's `incomplete` note for a script that exited with status `rc` ({} when it succeeded)."""
    if str(rc) in ("0", "", "None"):
        return {}
    return {"incomplete": f"the script exited with status {rc}: this profile holds what ran before it stopped"}


def read_status(path: Path) -> dict[str, object]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}
