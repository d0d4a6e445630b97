"""The single-file container shared by the Program and Profile formats.

A container is a ZIP archive whose members are *stored* (not compressed):
`manifest.json` first, then one Parquet file (zstd inside) per table, named
`<table>.parquet`. Any Parquet tool can read the tables after unzipping.

Contract:
* `write_container` writes through `nprof.atomic.atomic_file`: a temporary file
  beside the target renamed into place, so a crash never leaves a half-written
  file under the real name.
* `open_container` checks the file is a container of the expected format and a
  schema version it understands *before* reading any table, and raises
  `FormatError` with a one-line reason (naming the file) otherwise: truncated,
  not a ZIP, another format, a newer schema, or a real AWS NEFF/NTFF. Sizes are
  bounded before decompression: the manifest at MAX_MANIFEST_BYTES, a table at
  ROWS_PER_BYTE rows per stored byte (MIN_ROWS at least): bombs are refused.
* `read_head`/`is_zip` are the one way to sniff a file's first bytes (also used
  by `nprof.capture.sniff_kind`).
* Tables are read lazily and zero-copy from a memory map of the stored members; `Container.read_groups`
  reads some columns of a table one Parquet row group at a time (a reader that only reduces them).
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from nprof.atomic import atomic_file
from nprof.errors import FormatError, NprofError

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20  # decompressed: a manifest is a few KB (tensor lists: a few MB)
ROWS_PER_BYTE = 64  # a stored table may hold at most 64 rows per byte of its Parquet (real ones: < 1)
MIN_ROWS = 1 << 20  # ... or this many rows, for tiny files
_ZIP_MAGIC = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_AWS_HINT = {
    "NEFF": "not an nprof program (not a ZIP container); if it is a real AWS NEFF (Neuron executable): "
    "nprof runs its own programs; compile with nprof (nki or torch.compile backend='nprof')",
    "NTFF": "not an nprof profile (not a ZIP container); if it is a real AWS NTFF (Neuron trace), convert it "
    "on the Neuron machine with "
    "`neuron-profile view -n file.neff -s file.ntff --output-format json "
    "--output-file profile.json`, then `nprof view -s profile.json`",
}


def write_container(
    path: str | os.PathLike[str],
    fmt: str,
    schema_version: int,
    manifest: Mapping[str, Any],
    tables: Mapping[str, pa.Table],
) -> Path:
    """Atomically write `manifest` (plus format/schema_version) and `tables` to `path`."""
    target = Path(path)
    head = {"format": fmt, "schema_version": schema_version, **manifest}
    with atomic_file(target, what_flag="path") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(MANIFEST, orjson.dumps(head, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
        for name, table in tables.items():
            with zf.open(f"{name}.parquet", "w", force_zip64=True) as member:
                pq.write_table(table, member, compression="zstd", row_group_size=1 << 20)
    return target


def read_head(path: Path, size: int, what: str, directory_hint: str = "") -> bytes:
    """Return the first `size` bytes of `path` (a `what` file, e.g. "profile").

    Raises NprofError with one line if it does not exist, is a directory
    (`directory_hint` is appended to that message) or cannot be read.
    """
    if not path.exists():
        raise NprofError(f"{path}: no such file; check the path")
    if path.is_dir():
        raise NprofError(f"{path}: is a directory, not a {what} file{directory_hint}")
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError as exc:
        raise NprofError(f"{path}: cannot read ({exc.strerror})") from exc


def is_zip(head: bytes) -> bool:
    """True if `head` (the first bytes of a file) starts a ZIP archive, i.e. possibly a container."""
    return head.startswith(_ZIP_MAGIC)


def sniff_foreign(path: Path, head: bytes) -> str | None:
    """Return a hint if `head` (the first bytes of `path`) looks like a real AWS NEFF/NTFF."""
    suffix = path.suffix.lower().lstrip(".").upper()
    if is_zip(head):
        return None
    if suffix in _AWS_HINT:
        return _AWS_HINT[suffix]
    return None


class Container:
    """An opened container: its manifest and lazy access to its tables."""

    def __init__(self, path: Path, manifest: dict[str, Any], members: dict[str, tuple[int, int]]):
        self.path = path
        self.manifest = manifest
        self._members = members  # table name -> (data offset, size)
        self._map: pa.MemoryMappedFile | None = None

    @property
    def table_names(self) -> list[str]:
        return sorted(self._members)

    def member(self, name: str) -> tuple[int, int]:
        """(byte offset, size) of table `name`'s Parquet bytes in the file (stored uncompressed)."""
        if name not in self._members:
            raise FormatError(f"{self.path}: table '{name}' is missing; the file is incomplete")
        return self._members[name]

    def read_table(self, name: str, columns: list[str] | None = None, dictionary: list[str] | None = None) -> pa.Table:
        """Read one table (the columns named in `dictionary` as Arrow dictionary arrays, decoded from
        their Parquet dictionary pages); raises FormatError if it is missing or corrupt."""
        try:
            return self._reader(name, dictionary).read(columns=columns)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise self._corrupt(name, exc) from exc

    def read_groups(self, name: str, columns: list[str]) -> Iterator[pa.Table]:
        """The `columns` of table `name`, one Parquet row group at a time (in order: together, the rows of
        `read_table(name, columns)`); FormatError as `read_table`, also for a column the table lacks."""
        reader = self._reader(name, None)
        missing = [c for c in columns if c not in reader.schema_arrow.names]
        if missing:
            raise FormatError(f"{self.path}: table '{name}' lacks column {missing[0]}; re-create the file")
        for i in range(reader.metadata.num_row_groups):
            try:
                group = reader.read_row_group(i, columns=columns)
            except (OSError, pa.ArrowException, ValueError) as exc:
                raise self._corrupt(name, exc) from exc
            yield group

    def _corrupt(self, name: str, exc: BaseException) -> FormatError:
        return FormatError(f"{self.path}: table '{name}' is corrupt ({_short(exc)}); re-create the file")

    def _reader(self, name: str, dictionary: list[str] | None) -> pq.ParquetFile:
        """The Parquet reader of member `name` (the `dictionary` columns it has read as dictionaries); FormatError
        for a missing, corrupt or implausibly large table (a decompression bomb)."""
        if name not in self._members:
            raise FormatError(f"{self.path}: table '{name}' is missing; the file is incomplete")
        offset, size = self._members[name]
        if self._map is None:
            self._map = pa.memory_map(str(self.path), "r")
        try:
            buf = self._map.read_at(size, offset)
            if len(buf) != size:
                raise OSError("short read")
            reader = pq.ParquetFile(pa.BufferReader(buf))
            found = reader.schema_arrow
            wanted = [c for c in dictionary or () if c in found.names and pa.types.is_string(found.field(c).type)]
            if wanted:  # only string columns the file has
                reader = pq.ParquetFile(pa.BufferReader(buf), read_dictionary=wanted, metadata=reader.metadata)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise self._corrupt(name, exc) from exc
        limit = max(MIN_ROWS, ROWS_PER_BYTE * size)
        if reader.metadata.num_rows > limit:
            raise FormatError(
                f"{self.path}: table '{name}' claims {reader.metadata.num_rows} rows in {size} bytes "
                "(more than a real file holds: a decompression bomb?); refusing to read it"
            )
        return reader

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__


def _read_limited(zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """Member `name` decompressed, refusing more than `limit` bytes (whatever its header claims)."""
    with zf.open(name) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FormatError(f"{zf.filename}: {name} is larger than {limit >> 20} MiB decompressed; not an nprof file")
    return data


def open_container(
    path: str | os.PathLike[str],
    fmt: str,
    max_schema_version: int,
    what: str,
    describe_other: Callable[[str], str | None] | None = None,
) -> Container:
    """Open and validate a container of format `fmt`; `what` names it in messages ("profile")."""
    p = Path(path)
    head = read_head(p, 4096, what)
    if not head:
        raise FormatError(f"{p}: empty file; re-create it")
    hint = sniff_foreign(p, head)
    if hint:
        raise FormatError(f"{p}: {hint}")
    if not is_zip(head):
        raise FormatError(f"{p}: not an nprof {what} file (unrecognised content)")
    try:
        with zipfile.ZipFile(p) as zf:
            infos = zf.infolist()
            names = {i.filename for i in infos}
            if MANIFEST not in names:
                raise FormatError(f"{p}: not an nprof {what} file (no manifest)")
            manifest = orjson.loads(_read_limited(zf, MANIFEST, MAX_MANIFEST_BYTES))
            members: dict[str, tuple[int, int]] = {}
            with open(p, "rb") as fh:
                for info in infos:
                    if not info.filename.endswith(".parquet"):
                        continue
                    if info.compress_type != zipfile.ZIP_STORED:
                        raise FormatError(f"{p}: member {info.filename} is compressed; not written by nprof")
                    fh.seek(info.header_offset)
                    raw = fh.read(_LOCAL_HEADER.size)
                    if len(raw) < _LOCAL_HEADER.size:
                        raise FormatError(f"{p}: truncated file; re-create it")
                    fields = _LOCAL_HEADER.unpack(raw)
                    if fields[0] != _ZIP_MAGIC:
                        raise FormatError(f"{p}: corrupt archive; re-create the file")
                    name_len, extra_len = fields[-2], fields[-1]
                    start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
                    members[info.filename[: -len(".parquet")]] = (start, info.compress_size)
    except FormatError:
        raise
    except (
        zipfile.BadZipFile,
        orjson.JSONDecodeError,
        OSError,
        EOFError,
        ValueError,
        UnicodeDecodeError,
        struct.error,
        NotImplementedError,
        OverflowError,
    ) as exc:
        raise FormatError(f"{p}: truncated or corrupt {what} file ({_short(exc)}); re-create it") from exc
    size = p.stat().st_size
    if any(off + n > size for off, n in members.values()):
        raise FormatError(f"{p}: truncated {what} file; re-create it")
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        other = describe_other(str(found)) if (describe_other and found) else None
        raise FormatError(f"{p}: " + (other or f"not an nprof {what} file (format is {found!r})"))
    version = manifest.get("schema_version")
    if type(version) is not int or version < 1:
        raise FormatError(f"{p}: {what} manifest has no valid schema_version")
    if version > max_schema_version:
        raise FormatError(
            f"{p}: {what} schema version {version} is newer than this nprof understands "
            f"({max_schema_version}); upgrade nprof"
        )
    return Container(p, manifest, members)
