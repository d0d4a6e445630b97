"""The ingest orders (overlapped writer, writer first, analysis first) build the same database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nprof.analysis.facts import facts, release
from nprof.progress import progress
from nprof.store.ingest import ORDERS, build_profile_db, search_path_config
from nprof.store.store import run_analysis
from nprof.store.synthetic import synthetic_profile


def _contents(path: Path) -> dict[str, list[tuple]]:
    """Every table and view of a built database, rows in a fixed order (meta without its build-specific parts)."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True, config=search_path_config(path.parent))
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        out = {}
        for name in sorted(names):
            rows = con.execute(f'SELECT * FROM "{name}"').fetchall()
            if name == "meta":
                rows = [r for r in rows if r[0] != "parts"]
            out[name] = sorted(rows, key=repr)
        return out
    finally:
        con.close()


def test_every_order_builds_the_same_database(tmp_path: Path) -> None:
    built = {}
    p = synthetic_profile(3000, seed=4)
    for order in ORDERS:
        path = tmp_path / f"{order}.duckdb"
        with progress(5, "test") as bar:
            result = build_profile_db(p, path, run_analysis, bar, f"{order}.parts", order=order)
        assert result.event_count == 3000
        built[order] = _contents(path)
    first = built[ORDERS[0]]
    assert "events" in first and "analysis_counters" in first and "instructions" in first
    for order in ORDERS[1:]:
        assert built[order] == first, order


def test_unknown_order_is_refused(tmp_path: Path) -> None:
    with progress(5, "test") as bar, pytest.raises(ValueError, match="unknown ingest order 'sideways'"):
        build_profile_db(synthetic_profile(10), tmp_path / "x.duckdb", run_analysis, bar, order="sideways")


def test_a_failed_raw_write_fails_the_sequential_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nprof.store.ingest as ingest_mod

    def boom(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ingest_mod, "_write_raw", boom)
    for order in ORDERS:
        with progress(5, "test") as bar, pytest.raises(OSError, match="disk full"):
            build_profile_db(synthetic_profile(100), tmp_path / f"{order}.duckdb", run_analysis, bar, order=order)


def test_release_keeping_strings_keeps_only_the_codes() -> None:
    p = synthetic_profile(500, seed=2)
    f = facts(p)
    codes = f.column("instructions", "track")
    ends = f.i_end
    release(p, keep_strings=True)
    g = facts(p)
    assert g is not f
    assert g.column("instructions", "track") is codes  # reused, not re-encoded
    assert "i_end" not in g.__dict__ and (g.i_end == ends).all()  # recomputed on demand
    release(p)
    assert "_col_instructions_track" not in facts(p).__dict__


def test_a_handoff_frees_the_profile_during_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import weakref

    import nprof.store.ingest as ingest_mod
    from nprof.store.ingest import Handoff

    p = synthetic_profile(2000, seed=5)
    with progress(5, "test") as bar:
        build_profile_db(p, tmp_path / "held.duckdb", run_analysis, bar, "held.parts")
    alive = weakref.ref(p)
    own = Handoff(p)
    del p
    gone_by_then: list[bool] = []
    timeline = ingest_mod.timeline_tables

    def spy(*args: Any) -> Any:  # the pyramids are built after the profile is gone
        gone_by_then.append(alive() is None)
        return timeline(*args)

    monkeypatch.setattr(ingest_mod, "timeline_tables", spy)
    with progress(5, "test") as bar:
        result = build_profile_db(own, tmp_path / "handed.duckdb", run_analysis, bar, "handed.parts")
    assert gone_by_then == [True] and result.event_count == 2000
    with pytest.raises(RuntimeError, match="already released"):
        own.get()
    assert _contents(tmp_path / "handed.duckdb") == _contents(tmp_path / "held.duckdb")


def test_a_late_raw_tables_job_still_has_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load the background writer may start only after the build dropped the handed-off profile (the
    flaky "profile already released"): the job must hold the profile itself. Its thread here waits until the
    drop before running."""
    import threading

    import nprof.store.ingest as ingest_mod
    from nprof.store.ingest import Handoff

    p = synthetic_profile(2000, seed=6)
    with progress(5, "test") as bar:
        build_profile_db(p, tmp_path / "held.duckdb", run_analysis, bar, "held.parts")
    own = Handoff(p)
    del p
    dropped = threading.Event()
    drop, on_cursor = Handoff.drop, ingest_mod._on_cursor

    def drop_and_tell(self: Handoff) -> None:
        drop(self)
        dropped.set()

    def late(con: Any, fn: Any, *args: Any) -> None:
        if fn is ingest_mod._write_raw:
            assert dropped.wait(60), "the build never dropped the profile"
        on_cursor(con, fn, *args)

    monkeypatch.setattr(Handoff, "drop", drop_and_tell)
    monkeypatch.setattr(ingest_mod, "_on_cursor", late)
    with progress(5, "test") as bar:
        build_profile_db(own, tmp_path / "late.duckdb", run_analysis, bar, "late.parts")
    assert dropped.is_set()
    assert _contents(tmp_path / "late.duckdb") == _contents(tmp_path / "held.duckdb")


def test_the_analysis_emitted_pass_by_pass_is_the_returned_one() -> None:
    from nprof.analysis import STREAMED
    from nprof.analysis.counters import COMPUTED_SERIES

    want, want_summary = run_analysis(synthetic_profile(3000, seed=5))
    p = synthetic_profile(3000, seed=5)
    got: dict[str, Any] = {}
    tables, summary = run_analysis(p, emit=got.__setitem__)
    assert tables == {} and summary == want_summary
    assert list(got) == list(want)
    assert {n for n, t in got.items() if isinstance(t, pa.RecordBatchReader)} == set(STREAMED)  # the counters
    for name, table in want.items():
        out = got[name].read_all() if name in STREAMED else got[name]
        assert out.equals(table), name
    assert f"_memo_{COMPUTED_SERIES}" not in vars(facts(p))  # the counter series are streamed, not memoised
    release(p)
