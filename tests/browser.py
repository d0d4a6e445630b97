"""Shared helpers for the browser tests and the viewer benchmark (no pytest imports).

Contract:
* `CHROMIUM` is Debian's chromium (found on PATH, else /usr/bin/chromium); never a
  downloaded browser. `launch_chromium(playwright)` starts it headless with the
  flags every caller uses (`LAUNCH_ARGS`).
* `start_view(args)` starts `nprof view ARGS` as a user would (progress bars off),
  waits for its first stdout line and returns the process and that line; if the
  line lacks `marker` the process is killed and RuntimeError says why.
  `stop(proc)` terminates it (kills it after `timeout` seconds).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def launch_chromium(playwright: Any) -> Any:
    """Launch headless Debian chromium through a playwright (sync API) instance; returns the Browser."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nprof_command(*args: str) -> list[str]:
    """The command line running `nprof ARGS` with this interpreter's nprof."""
    exe = shutil.which("nprof", path=str(Path(sys.executable).parent))
    return [exe, *args] if exe else [sys.executable, "-m", "nprof", *args]


def start_view(
    args: list[str], *, marker: str = "View profile at", capture_stderr: bool = True
) -> tuple[subprocess.Popen[str], str]:
    """Start `nprof view ARGS` and wait for its first stdout line (which must contain `marker`)."""
    proc = subprocess.Popen(
        nprof_command("view", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if capture_stderr else None,
        text=True,
        env={**os.environ, "NPROF_NO_PROGRESS": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if marker not in line:
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"nprof view did not start: {line!r} {err}")
    return proc, line


def stop(proc: subprocess.Popen[str], timeout: float = 10) -> None:
    """Terminate `proc`, killing it if it does not exit within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
