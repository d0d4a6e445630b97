"""Kineto import on a small real-shaped fixture: sync records, two streams, MTIA events, host vs device."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from nprof.capture import open_profile
from nprof.errors import NprofError
from nprof.profile import Profile

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kineto_sync_mtia.json"


@pytest.fixture(scope="module")
def prof() -> Profile:
    return open_profile(FIXTURE)


def _rows(p: Profile) -> list[dict]:
    return p.instructions.select(["track", "engine", "opcode", "duration"]).to_pylist()


def test_sync_records_are_not_rows_nor_threads(prof: Profile) -> None:
    rows = _rows(prof)
    assert not [r for r in rows if r["opcode"] in ("Stream Sync", "Stream Wait Event", "Context Sync")]
    assert sorted({r["track"] for r in rows}) == ["cpu:100", "cpu:101", "cuda:0:13", "cuda:0:7", "mtia:1:3"]


def test_stream_busy_is_the_sum_of_its_kernels(prof: Profile) -> None:
    busy: dict[str, int] = {}
    for r in _rows(prof):
        busy[r["track"]] = busy.get(r["track"], 0) + r["duration"]
    source = json.loads(FIXTURE.read_text())["traceEvents"]
    for stream in (7, 13):
        kernels = [e["dur"] for e in source if e.get("cat") == "kernel" and e["args"]["stream"] == stream]
        assert busy[f"cuda:0:{stream}"] == round(sum(kernels) * 1000)


def test_host_and_device_are_separate_engines(prof: Profile) -> None:
    rows = _rows(prof)
    assert {r["engine"] for r in rows if r["track"].startswith("cpu:")} == {"host"}
    device = {r["opcode"]: r["engine"] for r in rows if not r["track"].startswith("cpu:")}
    assert device == {"ampere_sgemm_64x32_nn": "tensor", "vectorized_elementwise_kernel<add>": "vector",
                      "mtia_matmul_job": "tensor"}  # fmt: skip
    vector_total = pc.sum(pc.filter(prof.instructions["duration"], pc.equal(prof.instructions["engine"], "vector")))
    assert vector_total.as_py() == 3000  # the GPU add kernel only, not the CPU aten::add


def test_mtia_device_work_on_a_device_track(prof: Profile) -> None:
    (row,) = [r for r in _rows(prof) if r["opcode"] == "mtia_matmul_job"]
    assert row["track"] == "mtia:1:3"


def test_list_of_event_lists_is_flattened(tmp_path: Path, prof: Profile) -> None:
    events = json.loads(FIXTURE.read_text())["traceEvents"]
    path = tmp_path / "lol.json"
    path.write_text(json.dumps([events[:5], events[5:]]))
    assert _rows(open_profile(path)) == _rows(prof)
    path.write_text(json.dumps([events[:5], 3]))
    with pytest.raises(NprofError, match="event 0 is a JSON list, not an object"):
        open_profile(path)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"pid": [1]}, "pid is a list"),
        ({"args": {"device": [0], "stream": 7}}, "args 'device' is a list"),
        ({"args": {"Input Dims": 5}}, "'Input Dims' is not a list"),
        ({"args": {"Input Dims": [[-4, 2]]}}, "size outside"),
        ({"args": {"Input type": 3, "Input Dims": []}}, "'Input type' is not a list"),
        ({"dur": -5.0}, "negative duration"),
        ({"ts": 1e20}, "spans more than"),
        ({"args": {"bytes": -1}}, "'bytes' is negative"),
    ],
)
def test_wrong_types_and_ranges_are_one_line_refusals(tmp_path: Path, event: dict, message: str) -> None:
    base = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {}}
    other = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.0, "args": {}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([other, {**base, **event}]))
    with pytest.raises(NprofError, match=message) as err:
        open_profile(path)
    assert "\n" not in str(err.value)


def test_gzip_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    from nprof.capture import chrome

    monkeypatch.setattr(chrome, "GZIP_SLACK", 0)
    raw = b"[" + b" " * (1 << 20) + b"]"  # compresses ~1000x
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(raw, 9))
    with pytest.raises(NprofError, match="gzip bomb"):
        open_profile(path)


def test_list_timestamps_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps([
        {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.0},
        {"ph": "C", "name": "mem", "pid": 1, "ts": [[[[1]]]], "args": {"v": 1}},
    ]))  # fmt: skip
    with pytest.raises(NprofError, match="a list as its 'ts'"):
        open_profile(path)
