"""The profile validation layer: each hand-made bad file of issue 13 is a one-line FormatError at load."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nprof import container
from nprof.container import write_container
from nprof.errors import FormatError
from nprof.profile import Profile
from nprof.profile.schema import FORMAT, SCHEMA_VERSION, TABLES
from tests.conftest import tiny_profile


def _write(path: Path, manifest: dict[str, Any] | None = None, **columns: tuple[str, list[Any]]) -> Path:
    p = tiny_profile()
    info = {**p.info.to_json(), **(manifest or {})}
    tables = {n: p.table(n) for n in TABLES}
    for table, (column, values) in columns.items():
        t = tables[table]
        tables[table] = t.set_column(
            t.schema.get_field_index(column), column, pa.array(values, t.schema.field(column).type)
        )
    return write_container(path, FORMAT, SCHEMA_VERSION, info, tables)


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"world_size": 0}, "world_size 0 is out of range"),
        ({"rank": "1"}, "rank must be a whole number"),
        ({"rank": 3, "world_size": 2}, "rank 3 is out of range"),
        ({"total_time_ns": -5}, "total_time_ns -5 is out of range"),
        ({"total_time_ns": 2**63}, "total_time_ns"),
        ({"peak_flops": -1.0}, "peak_flops must be a positive"),
        ({"world_size": True}, "world_size must be a whole number"),
        ({"tensors": [{"name": "x", "shape": [-1], "dtype": "f", "kind": "input"}]}, "invalid shape"),
        ({"device": None}, "no device"),
    ],
)
def test_bad_manifests(tmp_path: Path, manifest: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError, match=message) as err:
        Profile.load(_write(tmp_path / "p.ntff", manifest))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"instructions": ("duration", [-5, 100])}, "duration has values outside"),
        ({"instructions": ("ts", [-(2**63), 300])}, "ts has values outside"),
        ({"instructions": ("ts", [2**62, 300])}, "ts has values outside"),
        ({"dma": ("bytes", [-1, 1024])}, "bytes has values outside"),
        ({"instructions": ("flops", [-(10**9), 0])}, "flops has values outside"),
        ({"instructions": ("id", [1, 3])}, "event ids are not unique"),
        ({"instructions": ("engine", ["tensor", "warp"])}, "unknown engine 'warp'"),
        ({"instructions": ("flops", [2**62, 2**62])}, "sums to"),
    ],
)
def test_bad_tables(tmp_path: Path, columns: dict[str, tuple[str, list[Any]]], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        Profile.load(_write(tmp_path / "p.ntff", **columns))


def test_schema_version_true_is_refused(tmp_path: Path) -> None:
    p = tiny_profile()
    path = write_container(tmp_path / "p.ntff", FORMAT, True, p.info.to_json(), {n: p.table(n) for n in TABLES})  # type: ignore[arg-type]
    with pytest.raises(FormatError, match="no valid schema_version"):
        Profile.load(path)


def test_manifest_zip_bomb_is_refused_before_inflating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "MAX_MANIFEST_BYTES", 1 << 20)
    path = tmp_path / "bomb.ntff"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", b'{"format": "nprof-profile", "pad": "' + b" " * (8 << 20) + b'"}')
    assert path.stat().st_size < 100_000
    with pytest.raises(FormatError, match="larger than 1 MiB decompressed"):
        Profile.load(path)


def test_table_row_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "MIN_ROWS", 10)
    monkeypatch.setattr(container, "ROWS_PER_BYTE", 1)
    p = tiny_profile()
    counters = pa.table({"ts": pa.array([0] * 50_000, pa.int64()), "name": ["c"] * 50_000, "value": [1.0] * 50_000})
    tables = {**{n: p.table(n) for n in TABLES}, "counters": counters}
    path = write_container(tmp_path / "p.ntff", FORMAT, SCHEMA_VERSION, p.info.to_json(), tables)
    with pytest.raises(FormatError, match="decompression bomb"):
        Profile.load(path)


def test_a_valid_profile_still_loads(tmp_path: Path) -> None:
    assert Profile.load(_write(tmp_path / "ok.ntff")).event_count == 4


def test_ids_unique_matches_a_set_on_random_ids() -> None:
    """The sort-free uniqueness check agrees with the plain reference (a Python set) on random id layouts."""
    import numpy as np

    from nprof.profile.validate import ids_unique

    rng = np.random.default_rng(7)
    for trial in range(400):
        na, nb = rng.integers(0, 30, 2)
        pool = int(rng.integers(1, 80))
        a, b = rng.integers(0, pool, na), rng.integers(0, pool, nb)
        if trial % 3 == 0:  # increasing runs, the simulator's layout, sometimes disjoint, sometimes not
            a, b = np.cumsum(rng.integers(0, 3, na)), np.cumsum(rng.integers(0, 3, nb)) + rng.integers(0, 40)
        expected = len(set(a.tolist()) | set(b.tolist())) == int(na + nb)
        assert ids_unique(a.astype(np.int64), b.astype(np.int64)) is expected, (a, b)
    assert ids_unique(np.zeros(0, np.int64), np.zeros(0, np.int64))
