"""The .npy validation layer: the header is checked before any data is read."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from nprof.errors import NprofError
from nprof.program.npy import read_npy


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _with_header(header: str, data: bytes = b"") -> bytes:
    text = header.ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + data


def test_round_trip_matches_numpy(tmp_path: Path) -> None:
    for arr in (np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.ones((2, 5))), np.array(True)):
        np.testing.assert_array_equal(read_npy(_npy(arr), "x"), arr)
        (tmp_path / "a.npy").write_bytes(_npy(arr))
        np.testing.assert_array_equal(read_npy(tmp_path / "a.npy", "x"), arr)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"hello, not numpy\n", "not a .npy file \\(it is a text file\\)"),
        (bytes(range(200, 256)), "not a .npy file \\(it is binary data\\)"),
        (_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2**62, 2**62), }"), "corrupt .npy header"),
        (_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1500000000000000000,), }"), "claims"),
        (_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"), "no pickles"),
        (_with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"), "unsupported"),
        (_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"), "shape|header"),
        (_npy(np.arange(4.0))[:-3], "claims 32 bytes of data but the file holds 29"),
    ],
)
def test_refusals(data: bytes, message: str) -> None:
    with pytest.raises(NprofError, match=message) as err:
        read_npy(data, "input 'x'")
    assert str(err.value).startswith("input 'x'") and "\n" not in str(err.value)
