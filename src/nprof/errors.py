"""The one exception type of nprof.

Library code raises `NprofError` (or a subclass) for every problem a user can
cause or fix: bad input files, bad arguments, invalid kernels. The message is
one line saying what is wrong and what to do. `cli.py` prints it on stderr and
exits with `exit_code`; nothing else in the library prints or exits.
"""

from __future__ import annotations


def show_value(value: object) -> str:
    """A bad value, short, for a one-line message: scalars as their repr (40 chars at most),
    containers by type only (the repr of a deeply nested list would overflow the stack)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return repr(value)[:40]
    return f"a {type(value).__name__}"


class NprofError(Exception):
    """A user-facing error: `str(err)` is the one-line message shown to the user."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class FormatError(NprofError):
    """A file is not a valid nprof Program/Profile (truncated, corrupt, foreign, too new)."""


class KernelError(NprofError):
    """A kernel is invalid; the message starts with the user's `file:line`."""


class DeviceIndexError(NprofError, IndexError):
    """An index read at run time (indirect DMA, gather) is out of bounds; also an IndexError, as NKI's simulator
    raises one. `nki_message` is the line NKI's simulator prints for it (HBM accesses), or None; `nprof.nki`
    re-raises it to kernels as a plain `IndexError` with that line (what AWS's tests assert)."""

    nki_message: str | None = None


class UnsupportedOpError(NprofError):
    """The compiler met an operation it cannot lower."""
