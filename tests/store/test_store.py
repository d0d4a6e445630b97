"""The store: ids, catalog, atomic ingest, --force, reuse, LRU connections, annotations durability."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import nprof.store.ingest as ingest_mod
from nprof.errors import NprofError
from nprof.store import Annotations, NotFound, Store, check_id, derive_id
from tests.conftest import tiny_profile


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "store")
    yield s
    s.close()


def test_ids_are_validated() -> None:
    for good in ("tiny", "a.b-c_d", "x" * 128, "run-1a2b3c4d.rank0"):
        assert check_id(good) == good
    for bad in ("", "../x", "a/b", ".hidden", "..", "x" * 129, "a b", "a\\b", "é"):
        with pytest.raises(NprofError):
            check_id(bad)


def test_derived_id_is_a_slug_plus_hash() -> None:
    a = derive_id("My Model (v2)", "fp1")
    assert a.startswith("my-model-v2-") and len(a) == len("my-model-v2-") + 8
    assert derive_id("My Model (v2)", "fp1") == a
    assert derive_id("My Model (v2)", "fp2") != a
    check_id(a)


def test_ingest_lists_and_queries(store: Store) -> None:
    entry = store.ingest(tiny_profile(), "tiny", display_name="Tiny run")
    assert entry["event_count"] == 4 and entry["total_time_ns"] == 450
    assert [e["id"] for e in store.list()] == ["tiny"]
    assert store.entry("tiny")["display_name"] == "Tiny run"
    with store.cursor("tiny") as cur:
        assert cur.execute("SELECT count(*) FROM events").fetchone() == (4,)
        assert cur.execute("SELECT count(*) FROM analysis_summary").fetchone()[0] > 0
    with pytest.raises(NotFound):
        store.entry("nope")


def test_duplicate_id_needs_force(store: Store) -> None:
    store.ingest(tiny_profile(), "dup")
    with pytest.raises(NprofError, match="already in the store; use --force"):
        store.ingest(tiny_profile(), "dup")
    again = store.ingest(tiny_profile(), "dup", force=True, display_name="second")
    assert again["display_name"] == "second" and len(store.list()) == 1


def test_failed_ingest_leaves_store_intact(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.ingest(tiny_profile(), "keep")
    Annotations(store).add("keep", 10, "m")

    def boom(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C in the middle of building the LOD tables

    monkeypatch.setattr(ingest_mod, "_lod_table", boom)
    with pytest.raises(KeyboardInterrupt):
        store.ingest(tiny_profile(), "half")
    with pytest.raises(KeyboardInterrupt):
        store.ingest(tiny_profile(), "keep", force=True)  # a failed replacement keeps the old one
    assert [e["id"] for e in store.list()] == ["keep"]
    assert list((store.dir / "tmp").iterdir()) == []
    assert not (store.dir / "profiles" / "half.duckdb").exists()
    with store.cursor("keep") as cur:
        assert cur.execute("SELECT count(*) FROM events").fetchone() == (4,)
    assert Annotations(store).markers("keep")[0]["label"] == "m"


def test_leftover_temp_files_of_dead_processes_are_swept(store: Store) -> None:
    dead = 2**22 + 12345  # above pid_max defaults: no such process
    stale = store.dir / "tmp" / f"x.{dead}.abcd.duckdb"
    stale.write_bytes(b"partial")
    store.ingest(tiny_profile(), "t")
    assert not stale.exists()


def test_ingest_file_reuses_unchanged_file(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "run.ntff"
    tiny_profile().save(path)
    first, reused = store.ingest_file(path)
    assert not reused and first["id"].startswith("run-")
    second, reused = store.ingest_file(path)
    assert reused and second["id"] == first["id"]
    os.utime(path, ns=(1, 1))  # a changed file gets a new id
    third, reused = store.ingest_file(path)
    assert not reused and third["id"] != first["id"]
    with pytest.raises(NprofError, match="already in the store"):
        store.ingest_file(path, profile_id=first["id"])
    with pytest.raises(NprofError, match="no such file"):
        store.ingest_file(tmp_path / "missing.ntff")


def test_rename_and_delete(store: Store) -> None:
    store.ingest(tiny_profile(), "a")
    Annotations(store).add("a", 1)
    assert store.rename("a", "  New name ")["display_name"] == "New name"
    with pytest.raises(NprofError):
        store.rename("a", "")
    store.delete("a")
    assert store.list() == []
    assert list((store.dir / "profiles").iterdir()) == []
    assert list((store.dir / "annotations").iterdir()) == []
    with pytest.raises(NotFound):
        store.delete("a")


def test_connections_stay_bounded(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", max_open=3)
    for i in range(10):
        store.ingest(tiny_profile(), f"p{i}")
    for i in range(10):
        with store.cursor(f"p{i}") as cur:
            assert cur.execute("SELECT count(*) FROM events").fetchone() == (4,)
        assert store.open_count() <= 3
    store.close()
    assert store.open_count() == 0


def test_replaced_profile_is_reopened(store: Store) -> None:
    store.ingest(tiny_profile(), "r")
    with store.session("r") as (_cur, meta):
        assert meta["stats"]["event_count"] == 4
    from nprof.store.synthetic import synthetic_profile

    store.ingest(synthetic_profile(1000), "r", force=True)
    with store.session("r") as (cur, meta):
        assert meta["stats"]["event_count"] == 1000
        assert cur.execute("SELECT count(*) FROM events").fetchone() == (1000,)


def test_annotations_survive_reopening(tmp_path: Path) -> None:
    first = Store(tmp_path / "s")
    first.ingest(tiny_profile(), "t")
    notes = Annotations(first)
    m1 = notes.add("t", 300, "vector starts")
    m2 = notes.add("t", 100, "matmul")
    notes.save_set("t", "run 1")
    notes.update("t", m1["id"], label="renamed")
    notes.remove("t", m2["id"])
    first.close()

    again = Annotations(Store(tmp_path / "s"))
    assert again.markers("t") == [{"id": m1["id"], "ts": 300, "label": "renamed"}]
    assert [s["name"] for s in again.sets("t")] == ["run 1"]
    loaded = again.load_set("t", "run 1")
    assert [(m["ts"], m["label"]) for m in loaded] == [(100, "matmul"), (300, "vector starts")]
    new = again.add("t", 5)
    assert new["id"] not in {m1["id"], m2["id"]}  # ids are never reused
    assert again.clear("t") == 3
    again.delete_set("t", "run 1")
    assert again.sets("t") == []
    with pytest.raises(NotFound):
        again.get_set("t", "run 1")
    with pytest.raises(NprofError):
        again.add("t", -1)
    with pytest.raises(NprofError):
        again.save_set("t", "../bad")


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    store = Store(tmp_path / "s", idle_seconds=0.0)
    store.ingest(tiny_profile(), "t")
    with store.cursor("t") as cur:
        cur.execute("SELECT 1").fetchall()
    assert store.close_idle() == 0
    with store.session("t") as (_cur, meta):
        assert meta["stats"]["event_count"] == 4  # reopened on demand


def test_files_of_another_store_format_are_refused(store: Store) -> None:
    import duckdb

    store.ingest(tiny_profile(), "old")
    con = duckdb.connect(str(store.db_path("old")))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'store_format'")
    con.close()
    with pytest.raises(NprofError, match="re-ingest it"), store.session("old"):
        pass


def test_concurrent_sessions_with_a_tiny_lru(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from nprof.store import viewport

    store = Store(tmp_path / "s", max_open=1)
    for i in range(3):
        store.ingest(tiny_profile(), f"p{i}")

    def query(k: int) -> int:
        with store.session(f"p{k % 3}") as (cur, meta):
            ans = viewport(cur, meta, 0, 450, 100)
            return sum(len(r["ts"]) for r in ans["rows"] if r["mode"] == "events")

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(query, range(60))) == {4}
    assert store.open_count() <= 1
    store.close()


def test_empty_profile_is_viewable(store: Store) -> None:
    from nprof.profile import Profile, ProfileInfo
    from nprof.store import box_select, rows_answer, search, viewport

    store.ingest(Profile.build(ProfileInfo(device="cpu", name="nothing")), "empty")
    with store.session("empty") as (cur, meta):
        assert rows_answer(meta)["rows"] == []
        assert viewport(cur, meta, 0, 1000, 100)["rows"] == []
        assert box_select(cur, meta, 0, 10, None)["count"] == 0
        assert search(cur, {"opcode": "/./"}, None, None, 10)["total"] == 0


def test_many_profiles_keep_file_descriptors_bounded(tmp_path: Path) -> None:
    import shutil

    store = Store(tmp_path / "s", max_open=4)
    first = store.ingest(tiny_profile(), "p0")
    ids = [f"p{i}" for i in range(1, 60)]
    for pid in ids:
        shutil.copyfile(store.db_path("p0"), store.db_path(pid))

    def register(data: dict) -> None:
        for pid in ids:
            data["profiles"][pid] = {**first, "id": pid}

    store.catalog.update(register)
    fds = len(os.listdir("/proc/self/fd"))
    for pid in ["p0", *ids]:
        with store.session(pid) as (_cur, meta):
            assert meta["stats"]["event_count"] == 4
    assert store.open_count() <= 4
    assert len(os.listdir("/proc/self/fd")) <= fds + 8
    assert len(store.list()) == 60
    store.close()


def test_thresholds_reach_the_stored_findings_and_the_id(store: Store) -> None:
    from nprof.analysis import Thresholds

    trace = Path(__file__).parents[1] / "fixtures" / "kineto_cuda_small.json"

    def kinds(pid: str) -> list[str]:
        with store.session(pid) as (cur, _meta):
            return [r[0] for r in cur.execute("SELECT kind FROM analysis_findings").fetchall()]

    default, _ = store.ingest_file(trace)
    tuned, reused = store.ingest_file(trace, thresholds=Thresholds(gap_share=0.9))
    assert not reused and tuned["id"] != default["id"]  # another analysis: another profile
    assert "idle_gap" in kinds(default["id"]) and "idle_gap" not in kinds(tuned["id"])
    again, reused = store.ingest_file(trace, thresholds=Thresholds(gap_share=0.9))
    assert reused and again["id"] == tuned["id"]
    assert store.ingest_file(trace, thresholds=Thresholds())[0]["id"] == default["id"]  # defaults: the old id
