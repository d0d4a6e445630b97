"""Round-trip and refusal tests for the Profile file."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nprof.errors import FormatError, NprofError
from nprof.profile import SCHEMA_VERSION, Profile, ProfileInfo
from tests.conftest import tiny_profile


def test_round_trip_keeps_every_table_and_manifest(tmp_path: Path) -> None:
    p = tiny_profile()
    p.save(tmp_path / "p.ntff")
    q = Profile.load(tmp_path / "p.ntff")
    assert q.info == p.info
    for name in ("instructions", "dma", "collectives", "counters"):
        assert q.table(name).equals(p.table(name)), name
    assert q.total_time_ns == 450
    assert q.event_count == 4


def test_file_is_a_stored_zip_of_manifest_and_parquet(tmp_path: Path) -> None:
    tiny_profile().save(tmp_path / "p.ntff")
    with zipfile.ZipFile(tmp_path / "p.ntff") as zf:
        names = zf.namelist()
        assert names[0] == "manifest.json"
        assert {"instructions.parquet", "dma.parquet", "collectives.parquet", "counters.parquet"} <= set(names)
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
        zf.extract("instructions.parquet", tmp_path)
    assert pq.read_table(tmp_path / "instructions.parquet").num_rows == 2


def test_missing_columns_get_defaults() -> None:
    p = Profile.build(
        ProfileInfo(device="cpu"),
        instructions={
            "id": [5],
            "ts": [0],
            "duration": [1],
            "engine": ["other"],
            "track": ["cpu:1"],
            "opcode": ["aten::add"],
        },
    )
    row = p.instructions.to_pylist()[0]
    assert row["pc"] == -1 and row["flops"] == 0 and row["deps"] == [] and row["layer"] is None


def test_unknown_column_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown instructions columns"):
        Profile.build(ProfileInfo(device="cpu"), instructions={"nope": [1]})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"hello world", "not an nprof profile"),
        (b"PK\x03\x04garbage", "corrupt"),
    ],
)
def test_garbage_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "bad.bin"
    f.write_bytes(content)
    with pytest.raises(NprofError, match=message):
        Profile.load(f)


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    tiny_profile().save(tmp_path / "p.ntff")
    data = (tmp_path / "p.ntff").read_bytes()
    (tmp_path / "t.ntff").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=r"t\.ntff"):
        Profile.load(tmp_path / "t.ntff")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    import orjson

    tiny_profile().save(tmp_path / "p.ntff")
    src = zipfile.ZipFile(tmp_path / "p.ntff")
    with zipfile.ZipFile(tmp_path / "new.ntff", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "manifest.json":
                m = orjson.loads(data)
                m["schema_version"] = SCHEMA_VERSION + 1
                data = orjson.dumps(m)
            dst.writestr(info, data)
    with pytest.raises(FormatError, match="newer than this nprof understands"):
        Profile.load(tmp_path / "new.ntff")


def test_real_aws_ntff_is_recognised(tmp_path: Path) -> None:
    f = tmp_path / "profile.ntff"
    f.write_bytes(b"\x00\x01binary-ntff" * 10)
    with pytest.raises(FormatError, match="neuron-profile view"):
        Profile.load(f)


def test_save_is_atomic_on_failure(tmp_path: Path) -> None:
    with pytest.raises(NprofError, match="does not exist"):
        tiny_profile().save(tmp_path / "missing-dir" / "p.ntff")
    assert list(tmp_path.iterdir()) == []
