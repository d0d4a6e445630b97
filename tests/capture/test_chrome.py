"""Chrome-trace / Kineto import: the hand-written CUDA fixture, generic variants, malformed inputs."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from nprof.capture import open_profile
from nprof.capture.chrome import import_chrome_trace
from nprof.errors import NprofError
from nprof.profile import Profile

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "kineto_cuda_small.json"


def rows(table: Any) -> list[dict[str, Any]]:
    return table.to_pylist()


@pytest.fixture(scope="module")
def kineto() -> Profile:
    return open_profile(FIXTURE)


def test_kineto_tracks_per_thread_and_stream(kineto: Profile) -> None:
    ins = rows(kineto.instructions)
    assert {r["track"] for r in ins} == {"cpu:4321", "cuda:0:7", "cuda:0:13"}
    assert all(r["ts"] >= 0 for r in ins)
    assert "PyTorch Profiler (0)" not in {r["opcode"] for r in ins}  # the Trace span is not work
    assert kineto.info.device == "chrome-trace"
    assert kineto.info.device_name == "NVIDIA A100-SXM4-40GB"
    # float32 matmuls -> the FP32 peak of the A100 from the device table
    assert kineto.info.peak_flops == pytest.approx(19.5e12)
    assert kineto.info.hbm_bandwidth == pytest.approx(1.555e12)
    assert "A100" in (kineto.info.peaks_source or "")


def test_kineto_kernels_engines_flops_and_links(kineto: Profile) -> None:
    ins = rows(kineto.instructions)
    by_id = {r["id"]: r for r in ins}
    kernels = [r for r in ins if r["track"].startswith("cuda:")]
    assert [(r["track"], r["engine"]) for r in kernels] == [
        ("cuda:0:7", "tensor"),
        ("cuda:0:7", "scalar"),
        ("cuda:0:13", "vector"),
    ]
    sgemm = kernels[0]
    assert sgemm["opcode"] == "ampere_sgemm_64x32_sliced1x4_tn"
    assert sgemm["flops"] == 2 * 64 * 256 * 512  # addmm [64,256] x [256,512], counted once, on the kernel
    assert sum(r["flops"] for r in ins) == sgemm["flops"]
    # estimated device-memory reads: the addmm's inputs (bias, x, W^T), on its kernel; host rows read none
    assert sgemm["hbm_read_bytes"] == 4 * (512 + 64 * 256 + 256 * 512)
    assert all(r["hbm_read_bytes"] == 0 for r in ins if r["track"] == "cpu:4321")
    assert "grid [4, 16, 1] block [128, 1, 1]" in sgemm["operands"]
    assert sgemm["duration"] == 40_000
    # the op that launched it: aten::addmm is one CPU row (its cudaLaunchKernel absorbed), 70 us earlier
    launch = by_id[sgemm["deps"][0]]
    assert launch["opcode"] == "aten::addmm" and launch["track"] == "cpu:4321"
    assert launch["flops"] == 0 and sgemm["ts"] - launch["ts"] == 70_000
    gelu_launch = by_id[kernels[1]["deps"][0]]
    assert gelu_launch["opcode"] == "cudaLaunchKernel"  # aten::gelu's own time is under half: its launch is the row
    assert sgemm["hlo_name"] == "aten::linear > aten::addmm"
    assert sgemm["layer"] == "Net_0.Linear_0"
    assert sgemm["nki_source_location"] == "train.py:21"  # torch's own frames are skipped
    assert sgemm["iteration"] == 3  # ProfilerStep#3
    assert kernels[1]["layer"] == "Net_0.GELU_0"


def test_kineto_host_rows_do_not_overlap(kineto: Profile) -> None:
    host = sorted((r["ts"], r["ts"] + r["duration"]) for r in rows(kineto.instructions) if r["track"] == "cpu:4321")
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(host))


def test_kineto_memcpy_memset_become_dma(kineto: Profile) -> None:
    ins = {r["id"]: r for r in rows(kineto.instructions)}
    dma = rows(kineto.dma)
    assert [(r["queue"], r["direction"], r["bytes"]) for r in dma] == [
        ("memcpy:0:7", "host->device", 65536),
        ("memset:0:13", "memset", 2048),
        ("memcpy:0:13", "device->host", 4),
    ]
    assert [ins[r["deps"][0]]["opcode"] for r in dma] == ["cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpyAsync"]
    assert dma[0]["hlo_name"] == "aten::to > aten::_to_copy > aten::copy_"
    ids = [r["id"] for r in dma] + list(ins)
    assert len(set(ids)) == len(ids)


def test_kineto_memory_events_become_counters(kineto: Profile) -> None:
    got = {(r["name"], r["value"]) for r in rows(kineto.counters)}
    assert got == {("cuda0_allocated_bytes", 65536.0), ("cuda0_reserved_bytes", 2097152.0)}


def _x(name: str, ts: float, dur: float, tid: int = 1, **kw: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, **kw}


GENERIC = [
    _x("outer", 0, 100),  # self time 20 of 100: not the work level
    _x("inner", 10, 80),
    _x("work", 200, 100),  # self time 90 of 100: one row, its child absorbed
    _x("bookkeeping", 210, 10),
    _x("other_thread", 5, 5.5, tid=2),
    {"ph": "C", "name": "load", "pid": 7, "ts": 50, "args": {"cpu": 10, "gpu": 20}},
    {"ph": "C", "name": "temp", "pid": 7, "ts": 60, "args": {"value": 41.5}},
]


def _check_generic(p: Profile) -> None:
    ins = rows(p.instructions)
    assert [(r["opcode"], r["ts"], r["duration"], r["track"]) for r in ins] == [
        ("other_thread", 5000, 5500, "cpu:2"),
        ("inner", 10000, 80000, "cpu:1"),
        ("work", 200000, 100000, "cpu:1"),
    ]
    assert ins[1]["hlo_name"] == "outer"
    assert {(r["name"], r["ts"], r["value"]) for r in rows(p.counters)} == {
        ("load.cpu", 50000, 10.0),
        ("load.gpu", 50000, 20.0),
        ("temp", 60000, 41.5),
    }


def test_generic_complete_events_object_and_bare_list(tmp_path: Path) -> None:
    obj = tmp_path / "obj.json"
    obj.write_bytes(orjson.dumps({"traceEvents": GENERIC, "displayTimeUnit": "ns"}))
    bare = tmp_path / "bare.json"
    bare.write_bytes(orjson.dumps(GENERIC))
    _check_generic(open_profile(obj))
    _check_generic(open_profile(bare))


def test_begin_end_pairs_equal_complete_events(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    for e in GENERIC:
        if e["ph"] != "X":
            events.append(e)
            continue
        events.append({"ph": "B", "name": e["name"], "pid": 7, "tid": e["tid"], "ts": e["ts"]})
        events.append({"ph": "E", "pid": 7, "tid": e["tid"], "ts": e["ts"] + e["dur"]})
    events.sort(key=lambda e: (e["ts"], e["ph"] == "B"))
    path = tmp_path / "be.json"
    path.write_bytes(orjson.dumps(events))
    _check_generic(open_profile(path))


def test_gzip_and_unterminated_array_detected_by_content(tmp_path: Path) -> None:
    gz = tmp_path / "trace.bin"  # no telling extension: detected by the gzip magic
    gz.write_bytes(gzip.compress(orjson.dumps({"traceEvents": GENERIC})))
    _check_generic(open_profile(gz))
    chrome_array = tmp_path / "trace.txt"  # Chrome's array format without the closing bracket
    chrome_array.write_bytes(orjson.dumps(GENERIC)[:-1] + b",\n")
    _check_generic(open_profile(chrome_array))


def test_flow_events_add_dependencies(tmp_path: Path) -> None:
    events = [
        _x("fwd", 0, 10),
        _x("bwd", 50, 10, tid=2),
        {"ph": "s", "id": 9, "cat": "fwdbwd", "name": "fwdbwd", "pid": 7, "tid": 1, "ts": 5},
        {"ph": "f", "id": 9, "cat": "fwdbwd", "name": "fwdbwd", "pid": 7, "tid": 2, "ts": 50, "bp": "e"},
    ]
    path = tmp_path / "flows.json"
    path.write_bytes(orjson.dumps(events))
    ins = {r["opcode"]: r for r in rows(open_profile(path).instructions)}
    assert ins["bwd"]["deps"] == [ins["fwd"]["id"]]


def test_info_override_keeps_trace_meta(tmp_path: Path) -> None:
    from nprof.profile import ProfileInfo

    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": GENERIC, "host_name": "box"}))
    p = import_chrome_trace(path, info=ProfileInfo(device="cpu", name="run", meta={"command": "python x.py"}))
    assert (p.info.device, p.info.name) == ("cpu", "run")
    assert p.info.meta["command"] == "python x.py"
    assert p.info.meta["trace.host_name"] == "box"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"traceEvents": [', "not valid JSON"),
        (b"42", "not a Chrome trace"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": {"a": 1}}', "not a list"),
        (b'{"traceEvents": [1, 2]}', "event 0 is a JSON int, not an object"),
        (b'{"traceEvents": [{"name": "x"}]}', "no events with a 'ph'"),
        (b'{"traceEvents": [{"ph": "X", "name": "x", "dur": 1}]}', "missing 'ts'"),
        (b'{"traceEvents": [{"ph": "X", "name": "x", "ts": "soon", "dur": 1}]}', "non-numeric"),
        (b'{"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1}, {"ph": "s", "id": 1}]}', "flow event"),
        (b'{"summary": [{}], "instruction": []}', "no instruction or dma records"),
        (b'{"summary": [{}], "instruction": [{"opcode": "MATMUL"}]}', "no 'timestamp'"),
        (b'{"instruction": [{"timestamp": 1, "duration": -5}]}', "negative duration"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"   ", "not valid JSON"),
    ],
)
def test_malformed_inputs_are_one_line_errors(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(NprofError) as err:
        open_profile(path)
    message = str(err.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_cli_view_reports_bad_trace_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nprof.cli import main

    path = tmp_path / "broken.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X"')
    assert main(["view", "-s", str(path), "--output-format", "summary-json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "broken.json" in err and "not valid JSON" in err


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(NprofError, match="no such file"):
        open_profile(tmp_path / "nope.json")
    with pytest.raises(NprofError, match="directory"):
        open_profile(tmp_path)


def test_ntff_roundtrip_through_open_profile(tmp_path: Path, kineto: Profile) -> None:
    path = kineto.save(tmp_path / "k.ntff")
    again = open_profile(path)
    assert again.instructions.equals(kineto.instructions)
    assert again.info.device_name == kineto.info.device_name


def test_unended_begin_runs_to_trace_end_and_metadata_only_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "open.json"
    path.write_bytes(
        orjson.dumps([_x("done", 0, 10), {"ph": "B", "name": "open", "pid": 7, "tid": 2, "ts": 4}, _x("late", 20, 5)])
    )
    p = open_profile(path)
    ins = {r["opcode"]: r for r in rows(p.instructions)}
    assert (ins["open"]["ts"], ins["open"]["duration"]) == (4000, 21000)
    assert p.info.meta["unended_begin_events"] == "1"
    meta_only = tmp_path / "meta.json"
    meta_only.write_bytes(orjson.dumps([{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]))
    with pytest.raises(NprofError, match="no timed events"):
        open_profile(meta_only)


def test_neuron_profile_json_output_imports(tmp_path: Path) -> None:
    doc = {
        "summary": [{"total_time": 0.000002, "event_count": 3}],
        "instruction": [
            {"timestamp": 10261883214, "duration": 148, "label": "TensorMatrix", "opcode": "MATMUL",
             "hlo_name": "%add.1 = add(%dot, %custom-call.44)", "operands": "S[5] (Tensor) 3*128"},
            {"timestamp": 10261883400, "duration": 60, "label": "Vector", "opcode": "TENSOR_TENSOR",
             "nki_source_location": "kernel.py:12"},
        ],
    }  # fmt: skip
    path = tmp_path / "profile.json"
    path.write_bytes(orjson.dumps(doc))
    p = open_profile(path)
    ins = rows(p.instructions)
    assert [(r["ts"], r["duration"], r["track"], r["engine"], r["opcode"]) for r in ins] == [
        (0, 148, "tensor.moving", "tensor", "MATMUL"),
        (186, 60, "vector", "vector", "TENSOR_TENSOR"),
    ]
    assert ins[0]["hlo_name"].startswith("%add.1") and ins[1]["nki_source_location"] == "kernel.py:12"
    assert p.total_time_ns == 2000  # the summary's window is longer than the events


def test_nprof_json_export_round_trips(tmp_path: Path, kineto: Profile) -> None:
    from nprof.cli import main

    src = kineto.save(tmp_path / "k.ntff")
    out = tmp_path / "k.json"
    assert main(["view", "-s", str(src), "--output-format", "json", "--output-file", str(out)]) == 0
    back = open_profile(out)
    for table in ("instructions", "dma"):
        a, b = kineto.table(table), back.table(table)
        for col in ("id", "ts", "duration", "opcode", "layer", "flops", "deps"):
            if col in a.column_names:
                assert a[col].to_pylist() == b[col].to_pylist(), (table, col)
    assert back.instructions["track"].to_pylist() == kineto.instructions["track"].to_pylist()
    assert back.dma["queue"].to_pylist() == kineto.dma["queue"].to_pylist()


def test_cli_view_summarises_a_gzipped_kineto_trace(tmp_path: Path) -> None:
    from nprof.cli import main

    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    out = tmp_path / "summary.json"
    assert main(["view", "-s", str(gz), "--output-format", "summary-json", "--output-file", str(out)]) == 0
    summary = orjson.loads(out.read_bytes())
    assert summary["model_flops"] == 2 * 64 * 256 * 512
    assert summary["event_count"] == 14  # 11 instruction rows + 3 DMA transfers
    assert summary["dma_transfer_total_bytes"] == 65536 + 2048 + 4


def test_odd_but_harmless_fields_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_bytes(b'[{"ph": "X", "name": 7, "ts": "1.5", "dur": null, "args": 5, "cat": ["a"], "pid": 1, "tid": 1}]')
    ins = rows(open_profile(path).instructions)
    assert [(r["opcode"], r["ts"], r["duration"], r["engine"]) for r in ins] == [("7", 0, 0, "other")]


def test_a_step_annotation_opened_inside_a_short_python_frame_still_holds_its_ops(tmp_path: Path) -> None:
    """torch.profiler with with_stack: ProfilerStep#N starts inside the `_record_function_enter_new` frame and
    outlives it; it is not that frame's child (clamped to it), so the ops of the step take its iteration."""
    frame = {"ph": "X", "cat": "python_function", "pid": 1, "tid": 1}
    mm = {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}
    events = [
        {**frame, "name": "train.py(10): <module>", "ts": 0, "dur": 1000},
        {**frame, "name": "<built-in method _record_function_enter_new>", "ts": 100, "dur": 10},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 105, "dur": 795},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 200, "dur": 100, "args": mm},
    ]
    path = tmp_path / "step.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    rows = import_chrome_trace(path).instructions
    assert rows.column("opcode").to_pylist() == ["aten::mm"]
    assert rows.column("iteration").to_pylist() == [3]
    assert rows.column("nki_source_location").to_pylist() == ["train.py:10"]
