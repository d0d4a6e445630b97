"""The validation layer of `.npy` input files and stored constants: the header is checked before any read.

Contract: `read_npy(data, what) -> np.ndarray` takes a path or the bytes of a `.npy` file and
raises `NprofError` (one line starting with `what`) unless: the file starts with the NumPy magic
(else "not a .npy file", naming text files as such), the header parses, the dtype is a plain
numeric/bool type (no objects: pickles are never loaded; no structured or zero-size types), every
dimension is >= 0, and the bytes the header claims are exactly the bytes present after it (so a
header claiming EiB is refused before allocating anything).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from numpy.lib import format as npformat

from nprof.errors import NprofError

_KINDS = frozenset("biufc")  # bool, int, uint, float, complex


def _header(fh: io.BufferedIOBase | io.BytesIO, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    head = fh.read(6)
    if head != b"\x93NUMPY":
        kind = "a text file" if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head) else "binary data"
        raise NprofError(f"{what}: not a .npy file (it is {kind}); save arrays with numpy.save")
    try:
        version = npformat.read_magic(_Rewound(head, fh))
        reader = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
        shape, fortran, dtype = reader(fh, max_header_size=1 << 16)
    except (ValueError, SyntaxError, TypeError, OverflowError) as exc:
        raise NprofError(f"{what}: corrupt .npy header ({str(exc).splitlines()[0][:100]}); re-save it") from None
    if dtype.kind not in _KINDS or dtype.itemsize == 0 or dtype.hasobject or dtype.names:
        raise NprofError(f"{what}: unsupported .npy dtype {str(dtype)[:40]} (numbers or bools only; no pickles)")
    if any(type(d) is not int or d < 0 for d in shape):
        raise NprofError(f"{what}: .npy header has an invalid shape {str(shape)[:60]}")
    return shape, fortran, dtype


class _Rewound:
    """The 6 magic bytes already read, then the rest of `fh` (numpy's read_magic reads 8)."""

    def __init__(self, head: bytes, fh: io.BufferedIOBase | io.BytesIO) -> None:
        self.head, self.fh = head, fh

    def read(self, n: int = -1, /) -> bytes:
        """Up to `n` bytes (all that remain when n < 0): the kept head first, then the file's."""
        if n < 0:
            out, self.head = self.head, b""
            return out + self.fh.read()
        out, self.head = self.head[:n], self.head[n:]
        return out + self.fh.read(n - len(out))


def read_npy(source: str | os.PathLike[str] | bytes, what: str) -> np.ndarray:
    """The array in a `.npy` file or bytes, validated (see module doc)."""
    if isinstance(source, bytes):
        fh: io.BufferedIOBase | io.BytesIO = io.BytesIO(source)
        total = len(source)
    else:
        try:
            fh = open(Path(source), "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise NprofError(f"{what}: cannot read {source} ({exc.strerror})") from None
        total = os.fstat(fh.fileno()).st_size
    with fh:
        shape, fortran, dtype = _header(fh, what)
        count = 1
        for d in shape:
            count *= d
        claimed, present = count * dtype.itemsize, total - fh.tell()
        if claimed != present:
            raise NprofError(
                f"{what}: .npy header claims {claimed} bytes of data but the file holds {present}; re-save it"
            )
        data = fh.read(present)
    arr = np.frombuffer(data, dtype=dtype, count=count)
    return arr.reshape(shape, order="F" if fortran else "C").copy()
