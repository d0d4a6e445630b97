"""The Profile: the one central model between capture and analysis.

A `Profile` is a manifest (`ProfileInfo`) plus four pyarrow Tables with the
schemas of `schema.py`. It is immutable; producers build one with
`Profile.build(info, instructions={...}, dma={...})`, which fills omitted
columns with their defaults (0, False, null, empty list) and checks the rest.
`save`/`load` use the single-file container (see `nprof.container`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from nprof import __version__
from nprof.container import Container, open_container, write_container
from nprof.errors import FormatError, NprofError
from nprof.profile.codes import as_plain_schema, read_strings, remember
from nprof.profile.schema import FORMAT, SCHEMA_VERSION, TABLES
from nprof.profile.validate import ValueChecks, check_manifest, check_tables


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the profiled program (for the Summary tab's program info)."""

    name: str  # tensor name in the program
    shape: tuple[int, ...]  # logical shape
    dtype: str  # numpy-style dtype name, e.g. float32, bfloat16
    kind: str  # input, output, weight or internal


@dataclass(frozen=True)
class ProfileInfo:
    """The manifest of a profile: where it came from and how to interpret it."""

    device: str  # "virtual-neuroncore", "cpu", "cuda" or "chrome-trace"
    name: str = ""  # display name: program, script or trace file name
    producer: str = f"nprof {__version__}"  # the tool (and backend) that wrote it
    preset: str | None = None  # virtual device preset (trn1, trn2); None for real hardware
    device_name: str | None = None  # e.g. "Intel Xeon ..." or "NVIDIA A100-SXM4-40GB"
    rank: int = 0  # worker rank of this profile
    world_size: int = 1  # number of workers in the job
    nc_idx: int = 0  # NeuronCore index on its device
    nd_idx: int = 0  # Neuron device index
    created: str = ""  # ISO-8601 UTC time of capture
    total_time_ns: int | None = None  # execution window; None = end of the last event
    peak_flops: float | None = None  # FLOP/s peak of the device used for MFU/HFU
    hbm_bandwidth: float | None = None  # bytes/s peak memory bandwidth used for MBU
    peaks_source: str | None = None  # where the peaks come from (preset, device table, calibration)
    program: str | None = None  # path of the program file that produced it, if any
    tensors: tuple[TensorInfo, ...] = ()  # program inputs/outputs/weights
    meta: Mapping[str, str] = field(default_factory=dict)  # free-form extra facts (command line...)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["meta"] = dict(self.meta)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProfileInfo:
        """The manifest from JSON; ValueError naming the first field of the wrong type or range."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in check_manifest(data).items() if k in known}
        kwargs["tensors"] = tuple(
            TensorInfo(t["name"], tuple(t["shape"]), t["dtype"], t["kind"]) for t in kwargs.get("tensors", ())
        )
        kwargs["meta"] = {str(k): str(v) for k, v in dict(kwargs.get("meta") or {}).items()}
        return cls(**kwargs)


ENCODED_TABLES = ("instructions", "dma")  # the per-event tables `Profile.load(encoded=True)` keeps encoded
_DEFAULT_FILL = {"pc": -1}  # column defaults other than 0/False/null/empty


def _default_column(name: str, type_: pa.DataType, n: int) -> pa.Array:
    """A column of `n` default values (`_DEFAULT_FILL`, else 0/False; null strings; empty lists), wrapping numpy
    buffers: `pa.array` of a numpy array imports numpy.ma on its first call (1.1 MB, 7-11 ms CPU on a quiet
    machine: a real part of importing a small Chrome trace), and `pa.repeat` touches ~250 kB more of libarrow."""
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return pa.nulls(n, type_)
    if pa.types.is_list(type_):
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(np.zeros(n + 1, np.int32))])
        return pa.ListArray.from_arrays(offsets, pa.array([], type_.value_type))
    if pa.types.is_boolean(type_):  # a bitmap of n zero bits
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.zeros((n + 7) // 8, np.uint8))])
    values = np.full(n, _DEFAULT_FILL.get(name, 0), dtype=type_.to_pandas_dtype())
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(values)])


def make_table(name: str, columns: Mapping[str, Any] | pa.Table | None) -> pa.Table:
    """Build table `name` from `columns` (arrays/lists by column name, or a Table).

    Missing columns get defaults; present ones are cast to the schema type.
    Unknown column names are an error (they would be silently lost).
    """
    schema = TABLES[name]
    if columns is None:
        return schema.empty_table()
    if isinstance(columns, pa.Table):
        columns = {c: columns.column(c) for c in columns.column_names}
    unknown = set(columns) - set(schema.names)
    if unknown:
        raise ValueError(f"unknown {name} columns: {sorted(unknown)}")
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"{name} columns have different lengths: {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    arrays = []
    for f in schema:
        if f.name in columns:
            value = columns[f.name]
            arr = value if isinstance(value, pa.Array | pa.ChunkedArray) else pa.array(value, f.type)
            if arr.type != f.type:
                arr = arr.cast(f.type)
            arrays.append(arr)
        else:
            arrays.append(_default_column(f.name, f.type, n))
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class Profile:
    """A captured profile: manifest plus the instructions, dma, collectives and counters tables."""

    info: ProfileInfo
    instructions: pa.Table
    dma: pa.Table
    collectives: pa.Table
    counters: pa.Table

    @classmethod
    def build(
        cls,
        info: ProfileInfo,
        instructions: Mapping[str, Any] | pa.Table | None = None,
        dma: Mapping[str, Any] | pa.Table | None = None,
        collectives: Mapping[str, Any] | pa.Table | None = None,
        counters: Mapping[str, Any] | pa.Table | None = None,
    ) -> Profile:
        if not info.created:
            info = replace(info, created=datetime.now(UTC).isoformat(timespec="seconds"))
        return cls(
            info,
            make_table("instructions", instructions),
            make_table("dma", dma),
            make_table("collectives", collectives),
            make_table("counters", counters),
        )

    @property
    def event_count(self) -> int:
        """Instructions plus DMA transfers."""
        return self.instructions.num_rows + self.dma.num_rows

    @property
    def total_time_ns(self) -> int:
        """The execution window: manifest value, else the end of the last event."""
        if self.info.total_time_ns is not None:
            return int(self.info.total_time_ns)
        import pyarrow.compute as pc  # here, not at module level: importing a trace needs no Arrow compute

        end = 0
        for t in (self.instructions, self.dma, self.collectives):
            if t.num_rows:
                end = max(end, int(pc.max(pc.add(t["ts"], t["duration"])).as_py()))
        return end

    def table(self, name: str) -> pa.Table:
        if name not in TABLES:
            raise NprofError(f"unknown profile table '{name}'; tables are {', '.join(TABLES)}")
        return getattr(self, name)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the profile atomically to `path`."""
        return write_container(
            path,
            FORMAT,
            SCHEMA_VERSION,
            self.info.to_json(),
            {name: self.table(name) for name in TABLES},
        )

    @staticmethod
    def read_info(path: str | os.PathLike[str]) -> ProfileInfo:
        """The manifest of a profile file, its tables unread; FormatError like `load` for a file that
        is not a profile of a supported version or has an invalid manifest."""
        box = open_container(path, FORMAT, SCHEMA_VERSION, "profile", _describe_other_format)
        try:
            return _info_of(box)
        finally:
            box.close()

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, encoded: bool = False) -> Profile:
        """Read and validate a profile file; FormatError with a one-line reason otherwise.
        `encoded`: the string columns of instructions and dma stay Arrow dictionary arrays where the file
        has them so (`nprof.profile.codes`: the same values, another type, no plain strings built) -- for
        a reader that takes them through `nprof.analysis.facts` codes, such as the store's ingest."""
        box = open_container(path, FORMAT, SCHEMA_VERSION, "profile", _describe_other_format)
        try:
            info = _info_of(box)
            tables, codes = {}, {}
            for name in TABLES:
                tables[name], codes[name] = _read_table(box, name, encoded and name in ENCODED_TABLES)
            checked(box.path, tables, info.world_size)
            for name, table in tables.items():
                remember(table, codes[name])
            pa.default_memory_pool().release_unused()  # the decode's freed chunks: ~10% of the tables' size
            return cls(info, **tables)
        finally:
            box.close()


def load_table(path: str | os.PathLike[str], name: str) -> pa.Table:
    """Table `name` of the profile file `path` as `Profile.load(path)` reads it (plain strings). Not validated:
    for a reader that loaded and validated the same file before (the store's ingest writing a table back)."""
    box = open_container(path, FORMAT, SCHEMA_VERSION, "profile", _describe_other_format)
    try:
        return _read_table(box, name, False)[0]
    finally:
        box.close()


def _read_table(
    box: Container, name: str, encoded: bool, drop: Collection[str] = ()
) -> tuple[pa.Table, dict[str, Any]]:
    """One table of an open profile container in the profile schema (without the columns `drop`), and its
    string codes ({} when cast)."""
    schema = pa.schema([f for f in TABLES[name] if f.name not in drop]) if drop else TABLES[name]
    raw, codes = read_strings(box, name, schema, encoded, schema.names if drop else None)
    if not as_plain_schema(raw.schema).equals(schema, check_metadata=False):
        codes = {}  # columns cast or reordered: the analysis encodes them itself
        try:
            raw = raw.select(schema.names).cast(schema)
        except (KeyError, pa.ArrowException, ValueError) as exc:
            raise FormatError(f"{box.path}: table '{name}' does not match the profile schema; re-create it") from exc
    return raw, codes


def _info_of(box: Container) -> ProfileInfo:
    """The ProfileInfo of an opened profile container; FormatError for an invalid manifest."""
    manifest = {k: v for k, v in box.manifest.items() if k not in ("format", "schema_version")}
    try:
        return ProfileInfo.from_json(manifest)
    except (TypeError, ValueError, KeyError) as exc:
        raise FormatError(f"{box.path}: invalid profile manifest ({exc}); re-create it") from exc


def _describe_other_format(found: str) -> str | None:
    if found == "nprof-program":
        return "this is an nprof program, not a profile; capture it first: nprof capture -n FILE -s profile.ntff"
    return None


def validated(profile: Profile, path: Path) -> Profile:
    """`profile` if its manifest and tables pass the validation layer, else a one-line FormatError."""
    try:
        check_manifest(profile.info.to_json())
    except ValueError as exc:
        raise FormatError(f"{path}: invalid profile: {exc}; re-create it") from None
    checked(path, {name: profile.table(name) for name in TABLES}, profile.info.world_size)
    return profile


def checked(path: Path, tables: Mapping[str, pa.Table], world_size: int, reduced: Collection[str] = ()) -> None:
    """`validate.check_tables` with its reason as a one-line FormatError naming `path`."""
    try:
        check_tables(tables, world_size, reduced)
    except ValueError as exc:
        raise _invalid(path, exc) from None


def _invalid(path: Path, exc: ValueError) -> FormatError:
    return FormatError(f"{path}: invalid profile: {exc}; re-create it")


def load_reduced(path: str | os.PathLike[str], reduced: Sequence[str]) -> tuple[Profile, dict[str, int], np.ndarray]:
    """`Profile.load(path, encoded=True)` without the int64 instructions columns `reduced`, which are never held
    whole: read one Parquet row group at a time, checked as `load` checks them (`validate.ValueChecks`; the
    same FormatError), and given back as their sums (column -> int) and, all of them together, as their
    per-instruction total (int64 array). For a reader that needs no more of them (the store's ingest)."""
    box = open_container(path, FORMAT, SCHEMA_VERSION, "profile", _describe_other_format)
    try:
        info = _info_of(box)
        tables, codes = {}, {}
        for name in TABLES:
            drop = reduced if name == "instructions" else ()
            tables[name], codes[name] = _read_table(box, name, name in ENCODED_TABLES, drop)
        checked(box.path, tables, info.world_size, reduced)
        sums, total = _reduce(box, reduced, tables["instructions"].num_rows)
        for name, table in tables.items():
            remember(table, codes[name])
        pa.default_memory_pool().release_unused()
        return Profile(info, **tables), sums, total
    finally:
        box.close()


def _reduce(box: Container, columns: Sequence[str], n: int) -> tuple[dict[str, int], np.ndarray]:
    """Sums and per-row total of the int64 instructions `columns`, one row group at a time (see `load_reduced`)."""
    checks = {c: ValueChecks("instructions", c) for c in columns}
    sums = dict.fromkeys(columns, 0)
    total = np.zeros(n, np.int64)
    at = 0
    for group in box.read_groups("instructions", list(columns)):
        rows = group.num_rows
        if at + rows > n:
            raise _uneven(box.path, at + rows)
        for c in columns:
            col = group[c]
            if col.type != pa.int64():
                raise FormatError(f"{box.path}: table 'instructions' does not match the profile schema; re-create it")
            try:
                checks[c].add(col)
            except ValueError as exc:
                raise _invalid(box.path, exc) from None
            values = col.to_numpy()
            sums[c] += int(values.sum())
            if values.any():  # as `analysis.opcodes.instruction_bytes`: many columns are all zero
                total[at : at + rows] += values
        at += rows
    if at != n:
        raise _uneven(box.path, at)
    return sums, total


def _uneven(path: Path, rows: int) -> FormatError:
    return FormatError(f"{path}: table 'instructions' is corrupt (its row groups hold {rows} rows); re-create the file")
