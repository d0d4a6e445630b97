"""Where in the user's code an operation comes from, and errors that say so.

`user_frame()` walks the Python stack to the first frame whose file is not in
the `nprof.nki` package: that is the kernel line an instruction is attributed
to (`nki_source_location`) and the line a `KernelError` starts with. Whether a
code object is nprof's and its file's base name are cached per code object
(the walk runs once per traced instruction), keyed by the code object's id: hashing a code object hashes its
contents, ~3x the cost of the lookup by id; the code objects met are kept alive, so an id is never reused).
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType

from nprof.errors import KernelError

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_NAMES: dict[int, str | None] = {}  # id of a code object -> base name of its file, None when it is nprof's
_KEPT: list[CodeType] = []  # the code objects of _NAMES (alive: their ids stay theirs)


def _name(code: CodeType) -> str | None:
    filename = code.co_filename
    name = None if filename.startswith(_PKG_DIR) or filename.startswith("<frozen") else os.path.basename(filename)
    _KEPT.append(code)
    _NAMES[id(code)] = name
    return name


def user_frame(skip: int = 0) -> FrameType | None:
    """The innermost frame whose code is not in the `nprof.nki` package (nor frozen), or None; `skip`: how many
    frames above the caller's are known to be nprof's (jumped over without making their frame objects)."""
    try:
        frame: FrameType | None = sys._getframe(1 + skip)
    except ValueError:  # (fewer frames than that)
        frame = sys._getframe(1)
    names = _NAMES
    while frame is not None:
        code = frame.f_code
        name = names.get(id(code), 0)
        if name == 0:
            name = _name(code)
        if name is not None:
            return frame
        frame = frame.f_back
    return None


def user_location(full_path: bool = False, skip: int = 0) -> str | None:
    """`file.py:LINE` of the user's current kernel line (full path if asked), or None; `skip`: frames above the
    caller's known to be nprof's (see `user_frame`)."""
    frame = user_frame(1 + skip)
    if frame is None:
        return None
    if full_path:
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return f"{_NAMES[id(frame.f_code)]}:{frame.f_lineno}"


def kernel_error(message: str, where: str | None = None) -> KernelError:
    """A KernelError whose message starts with the user's `file:line` (`where`: that of a request replayed from a
    log, `nprof.nki.replay`, which the running line is not)."""
    where = where or user_location(full_path=True) or "<unknown>:0"
    return KernelError(f"{where}: {message}")
