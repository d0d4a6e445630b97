"""The rank-partitioned dataset and `nprof analyze`: layout, the reference answer, both engines, the CLI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from nprof.analysis.collectives import RankFacts, analyze_group
from nprof.cli import main
from nprof.dataset import analyze, write_dataset
from nprof.profile import Profile
from tests.dataset import reference
from tests.multiworker.kit import straggler_run

TABLES = ("ranks", "instructions", "dma", "collectives", "counters")


def _same_rows(got, want) -> bool:
    """Rows equal, floats to 1e-9 relative (engines may sum floats in another order)."""
    got, want = list(got), list(want)
    if len(got) != len(want) or any(len(g) != len(w) for g, w in zip(got, want, strict=True)):
        return False
    return all(
        g == pytest.approx(w, rel=1e-9) if isinstance(w, float) else g == w
        for gr, wr in zip(got, want, strict=True)
        for g, w in zip(gr, wr, strict=True)
    )


def _capture(directory: Path, n: int, late: int, extra: int) -> dict[int, Profile]:
    straggler_run(directory, n=n, late=late, extra=extra)
    return {r: Profile.load(directory / f"profile_rank_{r}.ntff") for r in range(n)}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, Profile]]:
    d = tmp_path_factory.mktemp("job")
    return d, _capture(d, n=4, late=2, extra=30)


def test_layout_is_hive_partitioned_and_complete(job, tmp_path: Path) -> None:
    capture, profiles = job
    assert write_dataset(capture, tmp_path / "ds") == [0, 1, 2, 3]
    for table in TABLES:
        assert sorted(p.name for p in (tmp_path / "ds" / table).iterdir()) == [f"rank={r}" for r in range(4)]
    inst = ds.dataset(tmp_path / "ds" / "instructions", partitioning="hive").to_table()
    assert inst.num_rows == sum(p.instructions.num_rows for p in profiles.values())
    cc = ds.dataset(tmp_path / "ds" / "collectives", partitioning="hive").to_table()
    assert sorted(cc["rank"].to_pylist()) == [0, 1, 2, 3]  # each rank's own row only, rank from the path


@pytest.mark.parametrize(("n", "late", "extra"), [(2, 1, 5), (3, 0, 25), (5, 3, 60)])
def test_duckdb_matches_the_reference(tmp_path: Path, n: int, late: int, extra: int) -> None:
    profiles = _capture(tmp_path / "cap", n, late, extra)
    got = {name: result.rows for name, (_, result) in analyze(tmp_path / "cap", top=5).items()}
    assert got["rank_totals"] == tuple(reference.rank_totals(profiles))
    assert got["collective_ops"] == tuple(reference.collective_ops(profiles))
    assert got["stragglers"] == tuple(reference.stragglers(profiles))
    assert _same_rows(got["engine_utilisation"], reference.engine_utilisation(profiles))
    assert _same_rows(got["top_ops"], reference.top_ops(profiles, 5))
    assert got["wait_histogram"] == tuple(reference.wait_histogram(profiles))


def test_straggler_agrees_with_the_group_analysis(job) -> None:
    capture, profiles = job
    facts = {r: RankFacts(p.collectives, p.total_time_ns) for r, p in profiles.items()}
    group = analyze_group(facts)
    rows = analyze(capture)["stragglers"][1].rows
    assert group.straggler == rows[0][0] == 2


def test_no_straggler_when_no_rank_waits(tmp_path: Path) -> None:
    """Ranks that arrive together: no op names a straggler (rank 0 is not blamed for a tie at zero wait)."""
    _capture(tmp_path / "cap", n=2, late=0, extra=0)
    ops = analyze(tmp_path / "cap")["collective_ops"][1].rows
    assert ops and all(row[-2] == 0 and row[-1] is None for row in ops)


def _spark_missing() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'nprof[spark]')"
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "no Java runtime (apt-get install default-jre-headless)"
    return None


@pytest.mark.skipif(_spark_missing() is not None, reason=str(_spark_missing()))
def test_spark_and_duckdb_agree_to_the_row(job, tmp_path: Path) -> None:
    capture, _ = job
    write_dataset(capture, tmp_path / "ds")
    duck = analyze(tmp_path / "ds")
    spark = analyze(tmp_path / "ds", engine="spark", master="local[1]")
    for name, (title, result) in duck.items():
        assert spark[name][0] == title
        assert spark[name][1].columns == result.columns, name
        assert _same_rows(spark[name][1].rows, result.rows), name


def test_cli_prints_every_table_and_json(job, capsys: pytest.CaptureFixture[str]) -> None:
    capture, _ = job
    assert main(["analyze", str(capture), "--top", "2"]) == 0
    out = capsys.readouterr().out
    for title in ("# Per-rank totals", "# Collective operations", "# Stragglers", "# Top 2 ops"):
        assert title in out
    assert main(["analyze", str(capture), "--output-format", "json"]) == 0
    assert '"stragglers"' in capsys.readouterr().out


def test_cli_writes_a_dataset_through_view(job, tmp_path: Path) -> None:
    capture, _ = job
    assert main(["view", "-d", str(capture), "--output-format", "dataset", "--output-file", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "_nprof_dataset.json").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "/nonexistent-dir"], "not a directory"),
        (["analyze", "."], "no profile_rank_<i>.ntff files"),
        (["analyze", "DIR", "--master", "local[2]"], "--master applies to --engine spark only"),
    ],
)
def test_mistakes_are_one_line(job, argv, message, capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch) -> None:
    capture, _ = job
    monkeypatch.chdir(tmp_path)
    argv = [str(capture) if a == "DIR" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_dataset_never_replaces_its_capture(job, capsys: pytest.CaptureFixture[str]) -> None:
    capture, _ = job
    assert main(["view", "-d", str(capture), "--output-format", "dataset", "--output-file", str(capture)]) == 2
    assert "cannot replace its own capture" in capsys.readouterr().err
    assert (capture / "profile_rank_0.ntff").is_file()
