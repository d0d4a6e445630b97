"""The Arrow columns of Chrome import built without `pa.array` over numpy arrays (which imports numpy.ma on its
first call): `chrome_rows.numpy_array` and `profile.model._default_column` held to `pa.array` on random inputs,
and a trace import that leaves numpy.ma unimported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from nprof.capture.chrome_rows import numpy_array
from nprof.profile import model
from nprof.profile.schema import TABLES

_TYPES = [pa.int64(), pa.int32(), pa.float64(), pa.int8(), pa.bool_()]


@pytest.mark.parametrize("seed", range(40))
def test_numpy_array_matches_pa_array(seed: int) -> None:
    rng = np.random.default_rng(seed)
    typ = _TYPES[seed % len(_TYPES)]
    n = int(rng.integers(0, 50))
    values = rng.integers(-(10**6), 10**6, 2 * n).astype(typ.to_pandas_dtype())
    if seed % 3 == 0:
        values = values[::2]  # not contiguous
    elif seed % 3 == 1:
        values = values[n:]  # an offset view
    dtypes = [np.int64, np.int32, np.float64]
    if seed % 4 == 0 and typ != pa.bool_():  # a dtype other than the type's: pa.array's conversion
        values = values.astype(dtypes[seed % 3])
    got = numpy_array(values, typ)
    got.validate(full=True)
    assert got.equals(pa.array(values, typ)) and got.type == typ


def _reference_default(name: str, type_: pa.DataType, n: int) -> pa.Array:
    """The defaults as pa.array made them (before numpy buffers were wrapped)."""
    if name == "pc":
        return pa.array(np.full(n, -1, dtype=type_.to_pandas_dtype()), type_)
    if pa.types.is_string(type_):
        return pa.nulls(n, type_)
    if pa.types.is_list(type_):
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], type_.value_type))
    if pa.types.is_boolean(type_):
        return pa.array(np.zeros(n, dtype=bool))
    return pa.array(np.zeros(n, dtype=type_.to_pandas_dtype()), type_)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 63, 64, 65, 1000])
def test_default_columns_match_pa_array(n: int) -> None:
    for schema in TABLES.values():
        for f in schema:
            got = model._default_column(f.name, f.type, n)
            got.validate(full=True)
            assert got.type == f.type and got.equals(_reference_default(f.name, f.type, n)), (f.name, n)


def test_import_leaves_numpy_ma_unimported(tmp_path: Path) -> None:
    """(Unless pandas is loaded: pyarrow imports it, and it imports numpy.ma.)"""
    trace = tmp_path / "t.json"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0 + i, "dur": 0.5,
         "args": {"Input Dims": [[4, 8], [8, 4]], "Input type": ["float", "float"]}}
        for i in range(20)
    ]  # fmt: skip
    trace.write_text(__import__("json").dumps({"traceEvents": events}))
    code = (
        "import sys; from nprof.capture import open_profile; p = open_profile(sys.argv[1]);"
        "assert p.instructions.num_rows == 20; print('numpy.ma' in sys.modules and 'pandas' not in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
