"""What a command's library handler hands back to `nprof.cli` to print: library code never prints.

Contract: `Outcome(stdout, notes, code)`: `stdout` (text or bytes) is written to standard output as
is, each of `notes` is one line for standard error (`nprof COMMAND: ...`, written with its newline),
and `code` is the command's exit code (tests/test_no_printing.py holds library code to this).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    """The result of one command, for the CLI to print."""

    stdout: str | bytes = ""
    notes: tuple[str, ...] = ()
    code: int = 0
