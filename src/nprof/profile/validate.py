"""The validation layer of the Profile format: types, ranges and sizes, checked before anything computes.

Contract:
* `check_manifest(data) -> dict` returns the manifest fields `ProfileInfo` takes, or
  raises `ValueError` with a short reason (the reader adds the file name): every field
  has its documented type (`bool` is not an int), `rank` in [0, world_size),
  `world_size` in [1, MAX_WORLD], times in [0, MAX_TS] ns, peaks finite and > 0,
  tensors with a name, non-negative int shape, dtype and kind.
* `check_tables(tables, world_size) -> None` raises `ValueError` for: nulls in
  non-nullable columns; `ts`, `duration` and `ts + duration` outside [0, MAX_TS]; negative
  or huge (> MAX_VALUE) bytes, FLOPs and waits; column totals past MAX_VALUE (sums
  stay exact in int64); event ids repeated across `instructions` and `dma`; engines not
  in `ENGINES`; `pc` < -1; collective ranks outside [0, world_size), waits longer than
  their duration; counter values NaN or infinite.
MAX_TS = 2^53 ns (104 days) keeps every time exact as a float64 (the viewer, DuckDB doubles).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from nprof.errors import show_value as show
from nprof.profile import validate_np as quick
from nprof.profile.schema import ENGINES

MAX_TS = 2**53
MAX_VALUE = 2**62
MAX_WORLD = 65536
MAX_TENSORS = 1_000_000

_STR_FIELDS = ("name", "producer", "created")
_OPT_STR_FIELDS = ("preset", "device_name", "peaks_source", "program")
_VALUE_COLUMNS = {
    "instructions": (
        "flops",
        "hw_flops",
        "hbm_read_bytes",
        "hbm_write_bytes",
        "sbuf_read_bytes",
        "sbuf_write_bytes",
        "psum_read_bytes",
        "psum_write_bytes",
        "wait_ns",
    ),
    "dma": ("bytes", "partitions"),
    "collectives": ("bytes", "wait_ns"),
}


def _int(data: Mapping[str, Any], key: str, lo: int, hi: int, default: int | None) -> int | None:
    value = data.get(key, default)
    if value is None and default is None:
        return None
    if type(value) is not int:
        raise ValueError(f"{key} must be a whole number, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{key} {value} is out of range [{lo}, {hi}]")
    return value


def _peak(data: Mapping[str, Any], key: str) -> None:
    value = data.get(key)
    if value is None:
        return
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{key} must be a positive finite number or null, not {show(value)}")


def _tensors(value: Any) -> None:
    if not isinstance(value, list | tuple) or len(value) > MAX_TENSORS:
        raise ValueError("tensors must be a list of objects")
    for t in value:
        if not isinstance(t, dict) or not all(isinstance(t.get(k), str) for k in ("name", "dtype", "kind")):
            raise ValueError("every tensor needs string name, dtype and kind")
        shape = t.get("shape")
        if not isinstance(shape, list | tuple) or len(shape) > 64 or any(type(d) is not int or d < 0 for d in shape):
            raise ValueError(f"tensor {t['name'][:40]!r} has an invalid shape")


def check_manifest(data: Mapping[str, Any]) -> dict[str, Any]:
    """The validated manifest fields (see module doc); ValueError naming the first bad field."""
    if not isinstance(data.get("device"), str):
        raise ValueError("manifest has no device")
    for key in _STR_FIELDS:
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{key} must be a string")
    for key in _OPT_STR_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"{key} must be a string or null")
    world = _int(data, "world_size", 1, MAX_WORLD, 1)
    _int(data, "rank", 0, (world or 1) - 1, 0)
    _int(data, "nc_idx", 0, 1 << 16, 0)
    _int(data, "nd_idx", 0, 1 << 16, 0)
    _int(data, "total_time_ns", 0, MAX_TS, None)
    _peak(data, "peak_flops")
    _peak(data, "hbm_bandwidth")
    if "tensors" in data:
        _tensors(data["tensors"])
    if data.get("meta") is not None and not isinstance(data["meta"], dict):
        raise ValueError("meta must be an object")
    return dict(data)


def _range(t: pa.Table, table: str, column: str, lo: int, hi: int, fast: bool = True) -> None:
    if not t.num_rows or (fast and quick.within(t[column], lo, hi)):
        return
    import pyarrow.compute as pc  # here: only a column numpy cannot clear takes Arrow compute

    mm = pc.min_max(t[column]).as_py()
    if mm["min"] < lo or mm["max"] > hi:
        raise ValueError(
            f"table '{table}' column {column} has values outside [{lo}, {hi}] (min {mm['min']}, max {mm['max']})"
        )


def _total(t: pa.Table, table: str, column: str, fast: bool = True) -> None:
    if fast and quick.sum_below(t[column], MAX_VALUE):
        return
    import pyarrow.compute as pc

    total = pc.sum(pc.cast(t[column], pa.float64(), safe=False)).as_py() or 0.0
    if total > MAX_VALUE:
        raise ValueError(f"table '{table}' column {column} sums to {total:.3g}, past {MAX_VALUE:.3g}")


def _events(t: pa.Table, name: str, fast: bool, reduced: Collection[str] = ()) -> None:
    _range(t, name, "ts", 0, MAX_TS, fast)
    _range(t, name, "duration", 0, MAX_TS, fast)
    if t.num_rows and not (fast and quick.end_within(t["ts"], t["duration"], MAX_TS)):
        import pyarrow.compute as pc

        if pc.max(pc.add(t["ts"], t["duration"])).as_py() > MAX_TS:
            raise ValueError(f"table '{name}' has events ending after {MAX_TS} ns")
    for column in _VALUE_COLUMNS.get(name, ()):
        if column in reduced and column not in t.column_names:
            continue  # checked by its reader, chunk by chunk (`ValueChecks`)
        _range(t, name, column, 0, MAX_VALUE, fast)
        _total(t, name, column, fast)


class ValueChecks:
    """What `check_tables` checks of a value column (no nulls, values in [0, MAX_VALUE], a total of at most
    MAX_VALUE), made one chunk of its rows at a time (`add`, ValueError as `check_tables`): for a reader that
    never holds the whole column (`nprof.profile.model.load_reduced`)."""

    def __init__(self, table: str, column: str) -> None:
        self.table, self.column, self.total = table, column, 0.0

    def add(self, values: pa.ChunkedArray | pa.Array) -> None:
        """Check the next chunk of the column's rows."""
        if values.null_count:
            raise ValueError(f"table '{self.table}' column {self.column} has nulls")
        import pyarrow.compute as pc  # the ingest reader's path, not a Chrome import's

        chunk = pa.table({self.column: values})
        _range(chunk, self.table, self.column, 0, MAX_VALUE)
        self.total += pc.sum(pc.cast(chunk[self.column], pa.float64(), safe=False)).as_py() or 0.0
        if self.total > MAX_VALUE:
            raise ValueError(
                f"table '{self.table}' column {self.column} sums to {self.total:.3g}, past {MAX_VALUE:.3g}"
            )


def _increasing(ids: np.ndarray) -> np.ndarray:
    """`ids` sorted; checked without a sort when they already increase (the usual layout)."""
    return ids if ids.size < 2 or bool(np.all(ids[1:] > ids[:-1])) else np.sort(ids)


def ids_unique(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the values of `a` and `b` together are all distinct. Linear when each increases (sorted
    output of the simulator and importers); a sort otherwise. Never a hash of every id."""
    a, b = _increasing(a), _increasing(b)
    for s in (a, b):
        if s.size > 1 and not bool(np.all(s[1:] != s[:-1])):
            return False
    if not a.size or not b.size or a[-1] < b[0] or b[-1] < a[0]:
        return True  # disjoint ranges (instructions then DMA): no lookup at all
    small, big = (a, b) if a.size <= b.size else (b, a)
    at = np.searchsorted(big, small)
    hit = at < big.size
    return not bool(np.any(big[at[hit]] == small[hit]))


def _engines(ins: pa.Table, fast: bool) -> None:
    if not ins.num_rows or (fast and quick.all_in(ins["engine"], ENGINES)):
        return
    import pyarrow.compute as pc

    if not pc.all(pc.is_in(ins["engine"], value_set=pa.array(ENGINES))).as_py():
        bad = pc.filter(ins["engine"], pc.invert(pc.is_in(ins["engine"], value_set=pa.array(ENGINES))))[0]
        raise ValueError(f"unknown engine {str(bad)[:40]!r}; engines are {', '.join(ENGINES)}")


def _waits(coll: pa.Table, fast: bool) -> None:
    if fast and quick.none_greater(coll["wait_ns"], coll["duration"]):
        return
    import pyarrow.compute as pc

    if pc.any(pc.greater(coll["wait_ns"], coll["duration"])).as_py():
        raise ValueError("table 'collectives' has a wait_ns longer than its duration")


def _finite(counters: pa.Table, fast: bool) -> None:
    if not counters.num_rows or (fast and quick.all_finite(counters["value"])):
        return
    import pyarrow.compute as pc

    if not pc.all(pc.is_finite(counters["value"])).as_py():
        raise ValueError("table 'counters' has NaN or infinite values")


def check_tables(
    tables: Mapping[str, pa.Table], world_size: int = 1, reduced: Collection[str] = (), fast: bool = True
) -> None:
    """Check the four profile tables (see module doc); ValueError with the first problem found.
    `fast=False` runs every check with pyarrow.compute alone (the reference the tests hold the numpy
    passes of `validate_np` to); the default clears with numpy what it can, the same outcome. `reduced`:
    instructions value columns the table may lack, their reader checking them itself (`ValueChecks`)."""
    for name, t in tables.items():
        for f in t.schema:
            if not f.nullable and t[f.name].null_count:
                raise ValueError(f"table '{name}' column {f.name} has nulls")
    for name in ("instructions", "dma", "collectives"):
        _events(tables[name], name, fast, reduced if name == "instructions" else ())
    for name in ("instructions", "dma"):
        _range(tables[name], name, "pc", -1, 2**31 - 1, fast)
    ins, dma, coll = tables["instructions"], tables["dma"], tables["collectives"]
    if not ids_unique(ins["id"].to_numpy(), dma["id"].to_numpy()):
        raise ValueError("event ids are not unique across instructions and dma")
    _engines(ins, fast)
    if coll.num_rows:
        _range(coll, "collectives", "rank", 0, world_size - 1, fast)
        _waits(coll, fast)
    counters = tables["counters"]
    _range(counters, "counters", "ts", 0, MAX_TS, fast)
    _finite(counters, fast)
