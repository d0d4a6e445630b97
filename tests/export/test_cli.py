"""`nprof view --output-format` through nprof.cli.main, for every format and the error paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nprof.cli import main
from tests.conftest import tiny_profile


@pytest.fixture
def ntff(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.ntff"
    tiny_profile().save(path)
    return path


def test_summary_text_to_stdout(ntff: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-s", str(ntff), "--output-format", "summary-text"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines() if line and not line.startswith("#")}
    assert lines["nc_idx"] == "0" and lines["nd_idx"] == "0" and lines["total_time"] == "4.5e-07"


def test_summary_json_to_stdout(ntff: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-s", str(ntff), "--output-format", "summary-json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dma_transfer_total_bytes"] == 5120 and data["bound"] == "compute"


@pytest.mark.parametrize(
    "fmt,name", [("json", "ntff.json"), ("perfetto", "ntff.pftrace"), ("parquet", "ntff_parquet"), ("csv", "ntff_csv")]
)
def test_default_output_names(ntff: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, name: str,
                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["view", "-s", str(ntff), "--output-format", fmt]) == 0
    assert (work / name).exists()
    assert sorted(os.listdir(work)) == [name]  # no temporary left behind
    assert name in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["summary-text", "summary-json", "json", "perfetto", "parquet", "csv"])
def test_output_file(ntff: Path, tmp_path: Path, fmt: str) -> None:
    target = tmp_path / f"out-{fmt}"
    assert main(["view", "-s", str(ntff), "--output-format", fmt, "--output-file", str(target)]) == 0
    assert target.exists()


def test_show_flows_flag(ntff: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    assert main(["view", "-s", str(ntff), "--output-format", "perfetto", "--output-file", str(a)]) == 0
    assert main(["view", "-s", str(ntff), "--output-format", "perfetto", "--output-file", str(b),
                 "--show-perfetto-flows"]) == 0  # fmt: skip
    assert b.stat().st_size > a.stat().st_size


def test_unknown_format(ntff: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-s", str(ntff), "--output-format", "xml"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "xml" in err and "summary-text" in err and "perfetto" in err and "csv" in err


@pytest.mark.parametrize("fmt", ["json", "perfetto", "parquet"])
def test_unwritable_path(ntff: Path, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing-dir" / "out"
    assert main(["view", "-s", str(ntff), "--output-format", fmt, "--output-file", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing-dir" in err
    assert not target.parent.exists()


def test_read_only_directory_leaves_nothing(ntff: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user that can write anywhere")
        code = main(["view", "-s", str(ntff), "--output-format", "json", "--output-file", str(ro / "x.json")])
        assert code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o700)


def test_failure_midway_leaves_nothing(ntff: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nprof.export import perfetto_export

    def boom(*_args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(perfetto_export._Writer, "counters", boom)
    target = tmp_path / "t.pftrace"
    with pytest.raises(RuntimeError):
        main(["view", "-s", str(ntff), "--output-format", "perfetto", "--output-file", str(target)])
    assert os.listdir(tmp_path) == ["tiny.ntff"]


def test_missing_profile_and_program(ntff: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "--output-format", "json"]) == 2
    assert "-s" in capsys.readouterr().err
    assert main(["view", "-s", str(tmp_path / "nope.ntff"), "--output-format", "json"]) == 2
    assert "nope.ntff" in capsys.readouterr().err
    assert main(["view", "-n", str(tmp_path / "p.neff"), "-s", str(ntff), "--output-format", "summary-json"]) == 2
    assert "p.neff" in capsys.readouterr().err
    program = tmp_path / "p.neff"
    program.write_bytes(b"x")  # validated like -s: a 1-byte file is no program
    assert main(["view", "-n", str(program), "-s", str(ntff), "--output-format", "summary-json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nprof view: ") and "p.neff: not an nprof program" in err and err.count("\n") == 1


def test_terminology(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "--terminology"]) == 0
    out = capsys.readouterr().out
    for term in ("total_time", "mfu_estimated_percent", "psum_write_bytes", "tensor.moving", "pending_dma",
                 "cc_op_count", "gpsimd_engine_active_time_percent"):  # fmt: skip
        assert term in out


def test_threshold_tunes_findings_where_they_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(Path(__file__).parents[1] / "fixtures" / "kineto_cuda_small.json")
    assert main(["view", "-s", trace, "--output-format", "summary-text"]) == 0
    assert "Idle gap" in capsys.readouterr().out
    assert main(["view", "-s", trace, "--output-format", "summary-text", "--threshold", "gap_share=0.9"]) == 0
    assert "Idle gap" not in capsys.readouterr().out
    out = tmp_path / "t.json"
    argv = ["view", "-s", trace, "--output-format", "json", "--output-file", str(out), "--threshold", "gap_share=0.9"]
    assert main(argv) == 0
    assert "idle_gap" not in [f["kind"] for f in json.loads(out.read_text())["finding"]]


def test_summary_json_takes_the_latency_share_of_its_bound(ntff: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", "-s", str(ntff), "--output-format", "summary-json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["bound"] != "latency" and default["dma_latency_path_percent"] >= 0
    assert main(["view", "-s", str(ntff), "--output-format", "summary-json", "--threshold", "latency_share=0"]) == 0
    assert json.loads(capsys.readouterr().out)["bound"] == "latency"  # any latency share reaches 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--threshold", "gap_size=1"], "unknown threshold 'gap_size'; valid thresholds: min_engine_share, "),
        (["--threshold", "gap_share=0.2", "--output-format", "perfetto"], "perfetto has none; use summary-text, "),
        (
            ["--threshold", "gap_share=0.2", "--output-format", "summary-json"],
            "gap_share sets when findings are reported, and --output-format summary-json has none",
        ),
        (["--threshold", "latency_share=0.2", "--output-format", "perfetto"], "perfetto has none"),
    ],
)
def test_threshold_refusals_are_one_line(ntff: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                         message: str) -> None:  # fmt: skip
    assert main(["view", "-s", str(ntff), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nprof view: ") and message in err and err.count("\n") == 1
