"""The validation layer of the Program format: types and ranges of the stored rows, before anything runs.

Contract: each function raises `ValueError` with a short reason (`load_program` adds the file name):
* `check_manifest(m)`: `name`/`preset` strings, preset known, `sbuf_bytes`/`psum_bytes` whole
  numbers in [0, the preset's per-partition capacity], `meta` an object or null.
* `check_tensor(t)`: string name, dtype, kind; a shape of at most 8 whole numbers >= 0 whose
  product is below MAX_ELEMENTS.
* `check_access(d, partitions)`: every field present and typed; `partitions` in [1, the preset's
  partitions]; SBUF/PSUM `partition_start + partitions` within them; `offset` >= 0; |partition_stride|
  < MAX_ELEMENTS (negative: a copy read in reverse, e.g. `flip`); every free dim a (stride, size) pair with
  size >= 1 and |stride| < MAX_ELEMENTS. (That every HBM address lies in its tensor is `Program`'s check.)
* `check_row(rows, i, queues)`: an instruction's engine/opcode strings, queue a whole number in
  [-1 (none), queues), deps a list of whole numbers, attrs JSON text or null.
`bool` is never accepted as a whole number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nprof.arch.presets import PRESETS
from nprof.errors import show_value as show

MAX_ELEMENTS = 1 << 48
MAX_DIMS = 8


def _whole(value: Any, what: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        raise ValueError(f"{what} must be a whole number, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} {value} is outside [{lo}, {hi}]")
    return value


def check_manifest(m: Mapping[str, Any]) -> None:
    """Manifest fields (see module doc)."""
    for key in ("name", "preset"):
        if key in m and not isinstance(m[key], str):
            raise ValueError(f"{key} must be a string")
    preset = PRESETS.get(m.get("preset", "trn1"))
    if preset is None:
        raise ValueError(f"unknown preset {show(m.get('preset'))}; presets: {', '.join(PRESETS)}")
    _whole(m.get("sbuf_bytes", 0), "sbuf_bytes", 0, preset.sbuf_partition_bytes)
    _whole(m.get("psum_bytes", 0), "psum_bytes", 0, preset.psum_partition_bytes)
    if m.get("meta") is not None and not isinstance(m["meta"], dict):
        raise ValueError("meta must be an object")


def check_tensor(t: Mapping[str, Any]) -> None:
    """One row of the tensors table (see module doc)."""
    for key in ("name", "dtype", "kind"):
        if not isinstance(t.get(key), str):
            raise ValueError(f"a tensor's {key} must be a string")
    shape = t.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise ValueError(f"tensor {t['name'][:40]!r}: shape must be a list of at most {MAX_DIMS} sizes")
    n = 1
    for d in shape:
        n *= _whole(d, f"tensor {t['name'][:40]!r} size", 0, MAX_ELEMENTS)
    if n >= MAX_ELEMENTS:
        raise ValueError(f"tensor {t['name'][:40]!r} has {n} elements, more than {MAX_ELEMENTS}")


def check_access(d: Mapping[str, Any] | None, partitions: int) -> None:
    """One stored Access (see module doc)."""
    if not isinstance(d, Mapping):
        raise ValueError("an instruction operand is null")
    for key in ("space", "tensor", "dtype"):
        if not isinstance(d.get(key), str):
            raise ValueError(f"an operand's {key} must be a string")
    what = f"operand {d['tensor'][:40]!r}"
    _whole(d.get("offset"), f"{what} offset", 0, MAX_ELEMENTS)
    parts = _whole(d.get("partitions"), f"{what} partitions", 1, partitions if d["space"] != "hbm" else MAX_ELEMENTS)
    start = _whole(d.get("partition_start"), f"{what} partition_start", 0, partitions - 1)
    _whole(d.get("partition_stride"), f"{what} partition_stride", -MAX_ELEMENTS, MAX_ELEMENTS)
    if d["space"] != "hbm" and start + parts > partitions:
        raise ValueError(f"{what} partitions {start}..{start + parts - 1} are past the {partitions} partitions")
    free = d.get("free")
    if not isinstance(free, list) or len(free) > MAX_DIMS:
        raise ValueError(f"{what} free dims must be a list of at most {MAX_DIMS} (stride, size) pairs")
    for f in free:
        if not isinstance(f, Mapping):
            raise ValueError(f"{what} has a null free dim")
        _whole(f.get("stride"), f"{what} stride", -MAX_ELEMENTS, MAX_ELEMENTS)
        _whole(f.get("size"), f"{what} size", 1, MAX_ELEMENTS)


def check_row(rows: Mapping[str, list[Any]], i: int, queues: int) -> None:
    """Instruction `i` of the instructions table, as `to_pydict` columns (see module doc)."""
    for key in ("engine", "opcode"):
        if not isinstance(rows[key][i], str):
            raise ValueError(f"instruction {i}: {key} must be a string")
    _whole(rows["queue"][i], f"instruction {i} queue", -1, queues - 1)
    deps = rows["deps"][i]
    if not isinstance(deps, list) or any(type(x) is not int for x in deps):
        raise ValueError(f"instruction {i}: deps must be a list of instruction indices")
    if rows["attrs"][i] is not None and not isinstance(rows["attrs"][i], str):
        raise ValueError(f"instruction {i}: attrs must be JSON text")
    for key in ("ins", "outs"):
        if not isinstance(rows[key][i], list):
            raise ValueError(f"instruction {i}: {key} must be a list of operands")
