"""`nprof view` end to end: a real server subprocess, and the CLI's error cases."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import tiny_profile

NPROF = [sys.executable, "-m", "nprof"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NPROF_DB"] = str(tmp_path / "store")
    env["NPROF_NO_PROGRESS"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ntff(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.ntff"
    tiny_profile().save(path)
    return path


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NPROF, *args], capture_output=True, text=True, env=_env(tmp_path), timeout=120)


def test_view_serves_until_terminated(tmp_path: Path, ntff: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [*NPROF, "view", "-s", str(ntff), "--port", str(port), "--db-bucket", "served"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == f"View profile at http://localhost:{port}/profile/served"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/profiles/served/rows", timeout=5) as r:
                    rows = json.loads(r.read())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert [r["key"] for r in rows["rows"]][:2] == ["q0", "q1"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/profile/served", timeout=5) as r:
            assert r.status == 200 and b"<html" in r.read().lower()
        busy = _run(["view", "--port", str(port)], tmp_path)
        assert busy.returncode == 2
        assert busy.stderr.strip() == f"nprof view: port {port} is already in use; choose another with --port N"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_ingest_only_and_duplicate_id(tmp_path: Path, ntff: Path) -> None:
    first = _run(["view", "-s", str(ntff), "--ingest-only", "--db-bucket", "dup"], tmp_path)
    assert (first.returncode, first.stdout) == (0, 'Profile "dup" is ready to view\n')
    again = _run(["view", "-s", str(ntff), "--ingest-only", "--db-bucket", "dup"], tmp_path)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "already in the store; use --force" in again.stderr
    forced = _run(["view", "-s", str(ntff), "--ingest-only", "--db-bucket", "dup", "--force"], tmp_path)
    assert forced.returncode == 0
    derived = _run(["view", "-s", str(ntff), "--ingest-only", "--display-name", "Tiny"], tmp_path)
    assert derived.returncode == 0 and derived.stdout.startswith('Profile "tiny-')
    catalog = json.loads((tmp_path / "store" / "catalog.json").read_text())
    assert sorted(catalog["profiles"]) == sorted(["dup", derived.stdout.split('"')[1]])


def test_cli_errors_are_one_line(tmp_path: Path, ntff: Path) -> None:
    cases = [
        (["view", "-s", str(ntff), "--ingest-only", "--db-bucket", "../evil"], "invalid profile id"),
        (["view", "-s", str(tmp_path / "missing.ntff"), "--ingest-only"], "no such file"),
        (["view", "--ingest-only"], "--ingest-only needs -s PROFILE"),
        (["view", "-d", str(tmp_path), "--ingest-only"], "no profile_rank_<i>.ntff"),
    ]
    for args, message in cases:
        res = _run(args, tmp_path)
        assert res.returncode == 2, args
        assert message in res.stderr and res.stderr.count("\n") == 1, res.stderr
        assert "Traceback" not in res.stderr


def test_multi_worker_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for rank in range(2):
        tiny_profile().save(run / f"profile_rank_{rank}.ntff")
    res = _run(["view", "-d", str(run), "--ingest-only", "--db-bucket", "job"], tmp_path)
    assert (res.returncode, res.stdout) == (0, 'Profile "job" is ready to view\n')
    catalog = json.loads((tmp_path / "store" / "catalog.json").read_text())
    assert catalog["groups"]["job"]["ranks"] == [
        {"rank": 0, "profile_id": "job.rank0"},
        {"rank": 1, "profile_id": "job.rank1"},
    ]
    assert catalog["profiles"]["job.rank1"]["group"] == "job"


def test_host_and_port_checks(tmp_path: Path, ntff: Path) -> None:
    empty = _run(["view", "-s", str(ntff), "--host", ""], tmp_path)
    assert empty.returncode == 2 and "--host '' is ambiguous" in empty.stderr
    big = _run(["view", "--port", "70000"], tmp_path)
    assert big.returncode == 2 and "<= 65535" in big.stderr and "Traceback" not in big.stderr


def test_busy_port_ingests_nothing(tmp_path: Path, ntff: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = _run(["view", "-s", str(ntff), "--port", str(port), "--db-bucket", "p"], tmp_path)
    assert res.returncode == 2 and "already in use" in res.stderr
    catalog = tmp_path / "store" / "catalog.json"
    assert not catalog.exists() or json.loads(catalog.read_text())["profiles"] == {}


def test_wildcard_host_warns(tmp_path: Path) -> None:
    from nprof.web.serve import check_host

    assert check_host("127.0.0.1") is None and check_host("localhost") is None and check_host("::1") is None
    assert "no authentication" in (check_host("0.0.0.0") or "")
    assert "no authentication" in (check_host("192.168.1.5") or "")


def test_group_ingest_is_all_or_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    tiny_profile().save(run / "profile_rank_0.ntff")
    (run / "profile_rank_1.ntff").write_bytes(b"PK\x03\x04 corrupt")
    res = _run(["view", "-d", str(run), "--ingest-only", "--db-bucket", "job"], tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    path = tmp_path / "store" / "catalog.json"  # (none when the corrupt file stopped it before any write)
    catalog = json.loads(path.read_text()) if path.exists() else {"profiles": {}, "groups": {}}
    assert catalog["profiles"] == {} and catalog["groups"] == {}
    assert not list((tmp_path / "store").glob("groups/*"))  # nor a group index


def test_second_ingest_of_an_id_in_progress_is_refused_at_once(tmp_path: Path, ntff: Path) -> None:
    from nprof.errors import NprofError
    from nprof.store import Store

    holder, other = Store(tmp_path / "s"), Store(tmp_path / "s")
    with holder.claim("same"):
        t0 = time.monotonic()
        with pytest.raises(NprofError, match="being ingested by another nprof process"):
            other.ingest_file(ntff, profile_id="same")
        assert time.monotonic() - t0 < 2
    entry, _ = other.ingest_file(ntff, profile_id="same")
    assert entry["id"] == "same"


def test_ctrl_c_during_ingest_is_130_and_leaves_no_profile(tmp_path: Path) -> None:
    import signal

    from nprof.store.synthetic import synthetic_profile

    big = synthetic_profile(150_000, seed=1).save(tmp_path / "big.ntff")
    proc = subprocess.Popen(
        [*NPROF, "view", "-s", str(big), "--ingest-only", "--db-bucket", "big"],
        stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
    )  # fmt: skip
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    catalog = tmp_path / "store" / "catalog.json"
    profiles = json.loads(catalog.read_text())["profiles"] if catalog.exists() else {}
    if proc.returncode == 0:  # finished before the signal: a whole profile
        assert profiles["big"]["event_count"] == 150_000
    else:
        assert proc.returncode == 130 and err.strip().endswith("interrupted"), err
        # the signal may land after the catalog committed the profile: then it is whole, never half-written
        assert "big" not in profiles or profiles["big"]["event_count"] == 150_000
