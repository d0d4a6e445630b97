"""Where in the user's code an operation comes from, and errors that say so.

`user_frame()` walks the Python stack to the first frame whose file is not in
the `nprof.nki` package: that is the kernel line an instruction is attributed
to (`nki_source_location`) and the line a `KernelError` starts with.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

from nprof.errors import KernelError

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_frame() -> FrameType | None:
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_PKG_DIR) or filename.startswith("<frozen")):
            return frame
        frame = frame.f_back
    return None


def user_location(full_path: bool = False) -> str | None:
    """`file.py:LINE` of the user's current kernel line (full path if asked), or None."""
    frame = user_frame()
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    if not full_path:
        filename = os.path.basename(filename)
    return f"{filename}:{frame.f_lineno}"


def kernel_error(message: str) -> KernelError:
    """A KernelError whose message starts with the user's `file:line`."""
    where = user_location(full_path=True) or "<unknown>:0"
    return KernelError(f"{where}: {message}")
