"""Mutation fuzzing of nprof's readers: seeds, mutators and one `run_case` that classifies the outcome.

Used by the hypothesis tests (tests/test_fuzz_readers.py, bounded) and by bench/fuzz.py (long run).
An outcome is "ok" (accepted), "refused" (an NprofError: the one allowed failure) or "crash:<site>"
where site is the innermost nprof frame (`module.py:line ExceptionType`).
"""

from __future__ import annotations

import copy
import functools
import io
import random
import re
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from nprof.errors import NprofError

FIXTURES = Path(__file__).parent / "fixtures"

EXTREMES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**64),
    1e20, -1e20, 1e308, -0.5, 0.5, "", "x", "1", "-1", "ph", [], [1], [[1, 2]], {}, {"a": 1}, {"name": [1]},
]  # fmt: skip


def _paths(obj: Any, limit: int = 4000, depth: int = 64) -> list[tuple]:
    """Container paths in `obj` (dict keys / list indices), breadth first, at most `limit`, `depth` deep."""
    out: list[tuple] = []
    todo: list[tuple[tuple, Any]] = [((), obj)]
    while todo and len(out) < limit:
        prefix, node = todo.pop(0)
        if len(prefix) >= depth:
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((*prefix, k))
            todo.append(((*prefix, k), v))
    return out


def _get(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def mutate_json(rng: random.Random, obj: Any, n: int) -> Any:
    """A deep copy of `obj` with `n` random mutations: a value replaced by an extreme or by
    another node, a key deleted, a list duplicated/truncated, or deep nesting inserted."""
    obj = copy.deepcopy(obj)
    for _ in range(n):
        paths = _paths(obj)
        if not paths:
            return copy.deepcopy(rng.choice(EXTREMES))
        path = rng.choice(paths)
        parent = _get(obj, path[:-1])
        key = path[-1]
        op = rng.random()
        if op < 0.6:
            parent[key] = copy.deepcopy(rng.choice(EXTREMES))  # a copy: EXTREMES must never change
        elif op < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif op < 0.8:
            try:
                parent[key] = copy.deepcopy(_get(obj, rng.choice(paths)))
            except RecursionError:
                parent[key] = None
        elif op < 0.9 and isinstance(parent[key], list):
            parent[key] = parent[key] * 2 if rng.random() < 0.5 else parent[key][: len(parent[key]) // 2]
        else:
            parent[key] = f"__DEEP_{rng.choice((3, 50, 300, 3000))}__"  # nested lists, spliced in by `dumps`
    return obj


def dumps(obj: Any) -> bytes:
    """JSON bytes of `obj`; ints past 64 bits kept (stdlib), `"__DEEP_<n>__"` spliced as n nested lists."""
    try:
        text = orjson.dumps(obj)
    except (orjson.JSONEncodeError, TypeError):
        import json

        text = json.dumps(obj).encode()
    return re.sub(rb'"__DEEP_(\d+)__"', lambda m: b"[" * int(m[1]) + b"1" + b"]" * int(m[1]), text)


@functools.cache
def chrome_seeds() -> list[Any]:
    """Parsed Chrome traces: the Kineto fixtures, a generic trace with B/E, counters and flows."""
    seeds = [orjson.loads(p.read_bytes()) for p in sorted(FIXTURES.glob("kineto*.json"))]
    seeds.append(
        [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
            {"ph": "B", "name": "step", "pid": 1, "tid": 1, "ts": 0},
            {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 5,
             "args": {"Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"]}},
            {"ph": "E", "pid": 1, "tid": 1, "ts": 10},
            {"ph": "C", "name": "mem", "pid": 1, "ts": 2, "args": {"v": 3}},
            {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "f"},
            {"ph": "f", "id": 1, "pid": 1, "tid": 2, "ts": 6, "cat": "ac2g", "name": "f", "bp": "e"},
            {"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": 6, "dur": 3,
             "args": {"device": 0, "stream": 7, "correlation": 1}},
        ]
    )  # fmt: skip
    seeds.append(profile_json_seed())
    return seeds


def profile_json_seed() -> dict[str, Any]:
    """A profile JSON document (neuron-profile / nprof `json` export shape) of the tiny profile."""
    import tempfile

    from nprof.export import export_profile
    from tests.conftest import tiny_profile

    with tempfile.TemporaryDirectory() as d:
        out = export_profile(tiny_profile(), "json", Path(d) / "t.json")
        return orjson.loads(out.read_bytes())  # type: ignore[union-attr]


def classify(exc: BaseException) -> str:
    """`refused` for NprofError, else `crash:<innermost nprof frame> <type>`."""
    if isinstance(exc, NprofError):
        return "refused"
    site = "?"
    for frame in traceback.extract_tb(exc.__traceback__):
        if "/nprof/" in frame.filename:
            site = f"{Path(frame.filename).name}:{frame.lineno}"
    return f"crash:{site} {type(exc).__name__}"


def run_case(reader: Callable[[Path], Any], path: Path) -> str:
    """Run `reader(path)`; "ok", "refused" or "crash:<site>"."""
    try:
        reader(path)
    except RecursionError as exc:
        return classify(exc)
    except Exception as exc:
        return classify(exc)
    return "ok"


# ---- readers -------------------------------------------------------------------------------
def read_trace_and_analyse(path: Path) -> None:
    """`nprof view -s trace.json`'s reading half: import, then every analysis pass."""
    from nprof.capture import open_profile
    from nprof.store.store import run_analysis

    run_analysis(open_profile(path))


def read_profile_and_analyse(path: Path) -> None:
    from nprof.profile import Profile
    from nprof.store.store import run_analysis

    run_analysis(Profile.load(path))


def read_program(path: Path) -> None:
    from nprof.program.file import load_program

    load_program(path)


def read_npy(path: Path) -> None:
    from nprof.capture.sim import load_npy

    load_npy("x", path)


# ---- container mutation --------------------------------------------------------------------
def _mutate_column(rng: random.Random, table: pa.Table) -> pa.Table:
    if not table.num_columns or not table.num_rows:
        return table
    op = rng.random()
    if op >= 0.85:
        return pa.concat_tables([table] * rng.choice((2, 3)))  # duplicated rows (ids, ...)
    i = rng.randrange(table.num_columns)
    values = table.column(i).to_pylist()
    if op < 0.7:
        values[rng.randrange(len(values))] = copy.deepcopy(rng.choice([v for v in EXTREMES if not isinstance(v, dict)]))
    else:
        values = [values[0]] * len(values)
    try:
        arr = pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        arr = pa.array([None if v is None else str(v) for v in values])
    return table.set_column(i, table.schema.field(i).name, arr)


def mutate_container(
    rng: random.Random, fmt: str, version: int, manifest: dict[str, Any], tables: dict[str, pa.Table], out: Path
) -> None:
    """Write a container of `fmt` with a mutated manifest and/or mutated table values."""
    m = dict(manifest)
    if rng.random() < 0.5:
        m = mutate_json(rng, m, rng.randint(1, 3))
        if not isinstance(m, dict):
            m = {"value": m}
    t = dict(tables)
    for _ in range(rng.randint(0 if m != manifest else 1, 3)):
        name = rng.choice(sorted(t))
        t[name] = _mutate_column(rng, t[name])
    version_value = rng.choice((version, version, version, True, "1", 0, 2**70))
    head = {**m, "format": fmt, "schema_version": version_value}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("manifest.json", dumps(head))
        for name, table in t.items():
            with zf.open(f"{name}.parquet", "w", force_zip64=True) as member:
                pq.write_table(table, member, compression="zstd")


def mutate_npy(rng: random.Random, arr: np.ndarray) -> bytes:
    """`.npy` bytes of `arr` with a mutated header (shape, dtype, order) or random bytes."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    data = bytearray(buf.getvalue())
    op = rng.random()
    header_end = data.index(b"\n") + 1
    if op < 0.5:
        shape = rng.choice(("(10**18,)", "(2**62, 2**62)", "(-1,)", "(1, -5)", "()", "(3,)", "('a',)", "(1.5,)"))
        header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
        header = header.ljust(header_end - 10 - 1) + "\n"
        data[10:header_end] = header.encode()
        data[8:10] = len(header).to_bytes(2, "little")
    elif op < 0.7:
        descr = rng.choice(("'|O'", "'<U1000000000'", "'V0'", "[('a', '<f4')]", "'<c16'", "'?'", "'xyz'"))
        header = f"{{'descr': {descr}, 'fortran_order': False, 'shape': (4,), }}".ljust(header_end - 11) + "\n"
        data[10:header_end] = header.encode()
        data[8:10] = len(header).to_bytes(2, "little")
    elif op < 0.85:
        data = data[: rng.randrange(len(data))]
    else:
        data = bytearray(rng.randbytes(rng.randrange(1, 200)))
    return bytes(data)
