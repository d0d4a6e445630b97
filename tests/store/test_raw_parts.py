"""Raw tables read in place: Parquet parts beside the database, copied from the Profile file when possible."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nprof.container import open_container
from nprof.profile import TABLES
from nprof.profile.schema import FORMAT, SCHEMA_VERSION
from nprof.store import Store, event_details
from nprof.store.synthetic import synthetic_profile


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "store")
    yield s
    s.close()


def _parts(store: Store, pid: str) -> Path:
    return store.dir / "profiles" / store.entry(pid)["parts"]


def test_profile_file_members_are_copied_byte_for_byte(store: Store, tmp_path: Path) -> None:
    p = synthetic_profile(3000, seed=2)
    path = tmp_path / "run.ntff"
    p.save(path)
    entry, _ = store.ingest_file(path, profile_id="run")
    parts = _parts(store, "run")
    box = open_container(path, FORMAT, SCHEMA_VERSION, "profile")
    raw = path.read_bytes()
    for name in ("instructions", "dma", "collectives"):
        offset, size = box.member(name)
        assert (parts / f"{name}.parquet").read_bytes() == raw[offset : offset + size]
    box.close()
    with store.cursor("run") as cur:
        for name in TABLES:
            assert cur.execute(f"SELECT count(*) FROM {name}").fetchone() == (p.table(name).num_rows,)
        first = p.dma.slice(0, 1).to_pylist()[0]
        d = event_details(cur, first["id"])
        assert d["kind"] == "dma" and d["ts"] == first["ts"]
    assert entry["event_count"] == p.event_count


def test_in_memory_profiles_get_written_parts_sorted_by_id(store: Store) -> None:
    p = synthetic_profile(2000, seed=4)
    shuffled = p.instructions.take(list(range(p.instructions.num_rows))[::-1])
    store.ingest(type(p)(p.info, shuffled, p.dma, p.collectives, p.counters), "mem")
    with store.cursor("mem") as cur:
        ids = [i for (i,) in cur.execute("SELECT id FROM instructions").fetchall()]
    assert ids == sorted(ids) and len(ids) == p.instructions.num_rows


def test_a_file_whose_members_cannot_be_copied_gets_plain_string_parts(store: Store, tmp_path: Path) -> None:
    """ingest_file keeps the strings encoded in memory; a member it must rewrite (ids out of order) is written
    with the profile schema's plain strings, sorted by id, holding the same values."""
    p = synthetic_profile(2000, seed=5)
    shuffled = p.instructions.take(list(range(p.instructions.num_rows))[::-1])
    path = type(p)(p.info, shuffled, p.dma, p.collectives, p.counters).save(tmp_path / "shuffled.ntff")
    store.ingest_file(path, profile_id="shuf")
    written = pq.read_table(_parts(store, "shuf") / "instructions.parquet")
    assert written.schema.equals(TABLES["instructions"], check_metadata=False)
    assert written.equals(p.instructions)  # the synthetic table is in id order: sorting restores it


def test_parts_are_replaced_and_deleted_with_the_profile(store: Store) -> None:
    store.ingest(synthetic_profile(500, seed=1), "a")
    old = _parts(store, "a")
    assert old.is_dir()
    store.ingest(synthetic_profile(600, seed=1), "a", force=True)
    new = _parts(store, "a")
    assert new.is_dir() and not old.exists()
    with store.cursor("a") as cur:
        assert cur.execute("SELECT count(*) FROM events").fetchone() == (600,)
        assert cur.execute("SELECT count(*) FROM instructions").fetchone()[0] > 0
    store.delete("a")
    assert list((store.dir / "profiles").iterdir()) == []


def test_parts_of_dead_builds_are_swept(store: Store) -> None:
    dead = 2**22 + 12345  # above pid_max defaults: no such process
    stale = store.dir / "tmp" / f"{dead}-abcdef.parts"
    stale.mkdir()
    (stale / "dma.parquet").write_bytes(b"partial")
    store.ingest(synthetic_profile(200, seed=1), "t")
    assert not stale.exists()
    assert list((store.dir / "tmp").iterdir()) == []


def test_the_stored_profile_does_not_need_the_profile_file(store: Store, tmp_path: Path) -> None:
    """The parts are copies, not references: moving, overwriting or deleting the .ntff changes nothing."""
    p = synthetic_profile(2000, seed=3)
    path = tmp_path / "run.ntff"
    p.save(path)
    store.ingest_file(path, profile_id="run")
    path.rename(tmp_path / "moved.ntff")
    synthetic_profile(10, seed=4).save(path)  # another profile under the old name
    (tmp_path / "moved.ntff").unlink()
    store.close()
    reopened = Store(store.dir)
    try:
        with reopened.cursor("run") as cur:
            assert cur.execute("SELECT count(*) FROM instructions").fetchone() == (p.instructions.num_rows,)
            assert cur.execute("SELECT sum(bytes) FROM dma").fetchone() == (sum(p.dma["bytes"].to_pylist()),)
    finally:
        reopened.close()
