"""The chunked msgspec parse of Chrome traces (`chrome_fast`) against the reference orjson path.

The reference is the importer run with `fast_parse` disabled (full orjson dicts per event): on random
Kineto-shaped traces and on a real torch.profiler trace both must give the same Profile, and traces that
are not plain must fall back to it."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from nprof.capture import chrome
from nprof.capture.chrome_fast import FileSource, fast_parse
from nprof.profile import Profile


def _reference(path: Path, monkeypatch: pytest.MonkeyPatch) -> Profile:
    with monkeypatch.context() as m:
        m.setattr(chrome, "fast_parse", lambda raw: None)
        return chrome.import_chrome_trace(path)


def _assert_same(a: Profile, b: Profile) -> None:
    assert dataclasses.replace(a.info, created="") == dataclasses.replace(b.info, created="")
    for table in ("instructions", "dma", "counters"):
        assert getattr(a, table).equals(getattr(b, table)), table


def _op(rng: random.Random, ts: float, dur: float, tid: int, ext: int) -> dict[str, Any]:
    dims = rng.choice([[[8, 16], [16, 4]], [[4, 4], [4, 4], []], [[32]], [[2, 3], [3, 5], [5]]])
    args: dict[str, Any] = {"External id": ext, "Input Dims": dims, "Input type": ["float"] * len(dims)}
    args["Concrete Inputs"] = [""] * len(dims)
    if rng.random() < 0.5:
        args["Sequence number"] = rng.randrange(20)
    name = rng.choice(["aten::mm", "aten::addmm", "aten::relu", "aten::copy_", "aten::linear", "aten::bmm"])
    if rng.random() < 0.2:
        name = "autograd::engine::evaluate_function: " + name
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _memory_args(rng: random.Random) -> dict[str, Any]:
    """Args of a Kineto [memory] instant: CPU or GPU (types written several ways), totals present or not."""
    args: dict[str, Any] = {"Total Allocated": rng.choice([rng.randrange(1 << 30), 2.5, True, "n/a"])}
    args["Device Type"] = rng.choice([1, 0, None, 0.0, 1.0])
    if rng.random() < 0.2:
        del args["Device Type"]
    if rng.random() < 0.8:
        args["Device Id"] = rng.choice([0, 1])
    if rng.random() < 0.8:
        args["Total Reserved"] = 1 << 30
    return args


_FRAMES = ["model.py(12): forward", "modèle.py(3): étape", "torch/nn/modules/linear.py(125): forward", "nn.Module: L"]


def _events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """About `n` random events: nested host ops on two threads, python frames, steps, kernels and memcpys
    on two streams linked by correlation and ac2g flows, B/E pairs, [memory] instants, counters, names."""
    out: list[dict[str, Any]] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "main"}}]
    t, corr, pairs = 1000.0, 0, []
    while len(out) < n:
        tid = rng.choice([7, 8])
        out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{len(out)}", "pid": 1, "tid": tid,
                    "ts": t, "dur": 400.0, "args": {}})  # fmt: skip
        frame = rng.choice(_FRAMES)
        out.append({"ph": "X", "cat": "python_function", "name": frame, "pid": 1, "tid": tid, "ts": t + 1,
                    "dur": 390.0, "args": {"Python id": len(out)}})  # fmt: skip
        u = t + 2
        for _ in range(rng.randrange(1, 6)):
            d = rng.choice([20.0, 35.5, 50.25])
            out.append(_op(rng, u, d, tid, len(out)))
            if rng.random() < 0.5:
                out.append(_op(rng, u + 1, d / 3, tid, len(out)))
            corr += 1
            out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
                        "ts": u + d / 2, "dur": 2.0, "args": {"correlation": corr}})  # fmt: skip
            stream = rng.choice([7, 13])
            kind = rng.choice(["kernel", "kernel", "gpu_memcpy", "gpu_memset"])
            kname = {"kernel": "sgemm_128x64", "gpu_memcpy": "Memcpy HtoD (Pageable -> Device)"}.get(kind, "Memset")
            kargs = {"device": 0, "stream": stream, "correlation": corr, "grid": [4, 1, 1], "block": [128, 1, 1]}
            if kind != "kernel":
                kargs["bytes"] = rng.randrange(1, 1 << 20)
            out.append({"ph": "X", "cat": kind, "name": kname, "pid": 0, "tid": stream, "ts": u + d, "dur": 5.0,
                        "args": kargs})  # fmt: skip
            out.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 1, "tid": tid, "ts": u + d / 2})
            out.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": stream, "ts": u + d,
                        "bp": "e"})  # fmt: skip
            if rng.random() < 0.3:
                out.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": tid, "ts": u + 3, "s": "t",
                            "args": _memory_args(rng)})  # fmt: skip
            if rng.random() < 0.05:
                out.append({"ph": "i", "name": "marker", "pid": 1, "tid": tid, "ts": u + 3, "args": {"x": 1}})
            if rng.random() < 0.2:
                pairs.append({"ph": "B", "name": "user_region", "pid": 1, "tid": 9, "ts": u, "args": {"k": 1}})
                pairs.append({"ph": "E", "pid": 1, "tid": 9, "ts": u + 4.5})
            if rng.random() < 0.2:
                out.append({"ph": "C", "name": "queue", "pid": 1, "ts": u, "args": {"depth": rng.randrange(9)}})
            u += d + 3
        t += 420.0
    rng.shuffle(out)  # any file order (B/E pairs stay in order, else they are unended)
    return out + pairs


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_equal_the_reference(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    events = _events(rng, rng.choice([40, 300, 1500]))
    data: Any = {"traceEvents": events, "schemaVersion": 1} if seed % 2 else events
    path = tmp_path / "t.json"
    content = orjson.dumps(data, option=orjson.OPT_INDENT_2 if seed % 3 == 0 else 0)
    path.write_bytes(b" \n" * 3000 + content if seed == 4 else content)  # leading whitespace past 4 KB
    assert fast_parse(path.read_bytes()) is not None  # the fast path is the one exercised
    if seed % 2:  # small chunks: some hold only instants ([memory] counters decoded typed), some all phases
        monkeypatch.setattr("nprof.capture.chrome_fast.CHUNK", rng.choice([3, 17]))
    _assert_same(chrome.import_chrome_trace(path), _reference(path, monkeypatch))


def test_small_chunks_give_the_same_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(random.Random(9), 500)
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    whole = chrome.import_chrome_trace(path)
    monkeypatch.setattr("nprof.capture.chrome_fast.CHUNK", 7)
    _assert_same(chrome.import_chrome_trace(path), whole)


def test_a_real_torch_profiler_trace_equals_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True, profile_memory=True) as p:
        for step in range(2):
            with record_function(f"ProfilerStep#{step}"):
                opt.zero_grad()
                model(torch.randn(8, 16)).sum().backward()
                opt.step()
    path = tmp_path / "real.pt.trace.json"
    p.export_chrome_trace(str(path))
    assert fast_parse(path.read_bytes()) is not None
    fast = chrome.import_chrome_trace(path)
    assert fast.event_count > 20
    _assert_same(fast, _reference(path, monkeypatch))


@pytest.mark.parametrize(
    "content",
    [
        b'[[{"ph": "X", "ts": 1, "dur": 2}]]',  # a list of event lists
        b'[{"ph": "B", "ts": 1, "name": "a"}, {"ph": "X", "ts": 1, "dur": 2}]',  # a B never ended
        b'[{"ph": "X", "dur": 2}]',  # a slice without ts
        b'[{"ph": "X", "ts": 1, "dur": 2}, {"ph": "f", "id": 1, "cat": "ac2g"}]',  # a flow without ts
        b'[{"ph": "X", "ts": 1, "dur": 2}, {"ph": "i", "name": "[memory]"}]',  # a [memory] instant without ts
        b'[{"ph": "X", "ts": 1, "dur": 2, "pid": 1.5}]',  # types the schema leaves to the reference
        b'[{"ph": "X", "ts": true, "dur": 2}]',
        b'[{"ph": "X", "ts": 1, "dur": null}]',
        b'[{"ph": "X", "ts": 1, "dur": 2, "name": 5}]',
        b'[{"ph": "X", "ts": 1, "dur": 2, "args": {"bytes": 2.5}}]',
        b'[{"ph": "X", "ts": 1, "dur": 2, "args": [1]}]',  # args not an object
        b'[{"ph": ["X"], "ts": 1}]',  # a phase that is not a string
        b'{"instruction": []}',  # profile JSON, not a trace
        b'[{"ph": "X", "ts": 1, "dur": 2, "name": "\xff"}]',  # invalid UTF-8
        b'[{"ph": "X", "ts": 1, "dur": 2}',  # Chrome's unterminated array
        b'{"traceEvents": [], "traceName": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nesting msgspec refuses
    ],
)
def test_traces_that_are_not_plain_take_the_reference_path(content: bytes) -> None:
    assert fast_parse(content) is None


def _outcome(path: Path, monkeypatch: pytest.MonkeyPatch, reference: bool) -> Profile | str:
    """The Profile of importing `path` (the reference path if `reference`), or the NprofError's text."""
    from nprof.errors import NprofError

    with monkeypatch.context() as m:
        if reference:
            m.setattr(chrome, "fast_parse", lambda raw: None)
        try:
            return chrome.import_chrome_trace(path)
        except NprofError as exc:
            return str(exc)


_BIG = 10**30  # beyond 64 bits
# (event index in the base trace, where: "args"/"top", key, JSON literal, the fast path must take the file)
_NUMBERS = [
    (1, "args", "Ev Idx", b"1e400", True),  # unread numbers: accepted by both
    (1, "args", "Ev Idx", b"-1e999", True),
    (1, "args", "Ev Idx", str(_BIG).encode(), True),
    (1, "top", "zz", b"[1e400, " + b"9" * 400 + b"]", True),
    (2, "args", "correlation", str(_BIG).encode(), True),  # read numbers beyond 64 bits: exact in both
    (3, "args", "correlation", str(_BIG).encode(), True),
    (1, "args", "External id", b"18446744073709551616", True),
    (1, "top", "pid", str(_BIG).encode(), True),
    (1, "top", "dur", str(_BIG).encode(), True),  # read and refused by both (span)
    (3, "args", "bytes", b"1e400", False),  # read, beyond the double range: refused by both
    (3, "args", "bytes", str(_BIG).encode(), True),
    (1, "top", "ts", b"1e400", False),
    (1, "args", "Input Dims", b"[[" + str(_BIG).encode() + b"]]", True),
    (1, "args", "Input Dims", b"[[1e400]]", False),
    (4, "args", "depth", b"1e400", False),  # counter values
    (4, "args", "depth", b"9" * 400, False),
    (5, "args", "Total Allocated", b"1e400", False),
]


@pytest.mark.parametrize(("at", "where", "key", "literal", "fast"), _NUMBERS)
def test_numbers_beyond_64_bits_or_the_double_range_read_alike(
    at: int, where: str, key: str, literal: bytes, fast: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both paths read numbers by one rule (`chrome_fast.loads`): a silent difference is a bug."""
    x = {"ph": "X", "pid": 1, "tid": 7}
    events: list[dict[str, Any]] = [
        {**x, "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
        _op(random.Random(0), 1.0, 50.0, 7, 1),
        {**x, "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 5, "dur": 2, "args": {"correlation": 5}},
        {
            **x,
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "ts": 8,
            "dur": 3,
            "args": {"device": 0, "stream": 7, "correlation": 5, "bytes": 64},
        },
        {"ph": "C", "name": "queue", "pid": 1, "ts": 9, "args": {"depth": 1}},
        {
            "ph": "i",
            "name": "[memory]",
            "pid": 1,
            "tid": 7,
            "ts": 9,
            "s": "t",
            "args": {"Total Allocated": 1, "Device Type": 1, "Device Id": 0},
        },
    ]
    target = events[at]["args"] if where == "args" else events[at]
    target[key] = "@NUMBER@"
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}).replace(b'"@NUMBER@"', literal))
    if fast:  # the fast path is the one exercised (the others may fall back: then both are the reference)
        assert fast_parse(path.read_bytes()) is not None
    _assert_same_outcome(path, monkeypatch)


def _assert_same_outcome(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both paths refuse `path` with the same message, or give the same Profile."""
    got, ref = _outcome(path, monkeypatch, False), _outcome(path, monkeypatch, True)
    if isinstance(ref, str):
        assert got == ref
    else:
        assert isinstance(got, Profile)
        _assert_same(got, ref)


@pytest.mark.parametrize(
    ("key", "value"),
    [("Input Dims", [["a"]]), ("Input Dims", [[-1]]), ("Input Dims", 5), ("Input type", [1]), ("grid", ["x"]),
     ("Concrete Inputs", [[1]]), ("bytes", -5), ("correlation", [1]), ("Input Dims", [[2], None]),
     ("bytes", True), ("bytes", "7"), ("Sequence number", {"a": 1}), ("shared memory", [4]), ("device", True)],
)  # fmt: skip
def test_odd_args_are_read_alike(key: str, value: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(random.Random(3), 200)
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    ops[len(ops) // 2]["args"][key] = value
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    _assert_same_outcome(path, monkeypatch)


@pytest.mark.parametrize("value", [True, [1], {"a": 1}, 2.5, None, "w"])
@pytest.mark.parametrize("field", ["pid", "tid"])
def test_odd_threads_are_read_alike(field: str, value: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast parse counts the types of pid/tid (and scalar args) as it reads them; the checks use those
    counts: a slice with an odd one is refused, or imported, alike by both paths."""
    events = _events(random.Random(5), 300)
    [e for e in events if e.get("ph") == "X"][-7][field] = value
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    _assert_same_outcome(path, monkeypatch)


@pytest.mark.parametrize("dur", [None, "nan", "5", True, [1], "x"])
@pytest.mark.parametrize("field", ["dur", "ts"])
def test_odd_times_are_read_alike(field: str, dur: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(random.Random(4), 100)
    [e for e in events if e.get("ph") == "X"][3][field] = dur
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    _assert_same_outcome(path, monkeypatch)


@pytest.mark.parametrize("name", ["kineto_cuda_small.json", "kineto_sync_mtia.json"])
def test_the_fixture_traces_equal_the_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path(__file__).parent.parent / "fixtures" / name
    assert fast_parse(path.read_bytes()) is not None
    _assert_same(chrome.import_chrome_trace(path), _reference(path, monkeypatch))


@pytest.mark.parametrize("reserved", [True, False])
@pytest.mark.parametrize("device", [(1, 0), (1, 1.0), (0, 3), (True, 2), (None, 1)])
def test_memory_instants_of_one_device_equal_the_reference(
    device: tuple[Any, Any], reserved: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[memory] instants of one device with number totals are read column-wise: the same counters, in the same
    order, as the reference's instant-by-instant rule."""
    rng = random.Random(7)
    events = [e for e in _events(rng, 300) if e.get("name") != "[memory]"]
    for k in range(40):
        args: dict[str, Any] = {"Total Allocated": rng.choice([rng.randrange(1 << 30), 2.5, True]),
                                "Device Type": device[0], "Device Id": device[1]}  # fmt: skip
        if reserved:
            args["Total Reserved"] = rng.choice([1 << 30, 0.5])
        events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 7, "ts": 1000.0 + 3 * k, "args": args})
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    monkeypatch.setattr("nprof.capture.chrome_fast.CHUNK", 64)
    assert fast_parse(path.read_bytes()) is not None
    _assert_same(chrome.import_chrome_trace(path), _reference(path, monkeypatch))


def test_memory_instants_with_null_args_equal_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(random.Random(2), 200)
    events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 7, "ts": 1001.0, "args": None})
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    assert fast_parse(path.read_bytes()) is not None
    _assert_same_outcome(path, monkeypatch)


@pytest.mark.parametrize("change", ["rewritten", "shorter", "same size"])
def test_a_file_changed_while_it_is_read_is_not_imported_from_mixed_bytes(
    change: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import re-reads a plain file chunk by chunk once its top level is split (`FileSource`): a file
    changed in between gives None (the reference path then reads it anew), never columns of two versions."""
    events = _events(random.Random(3), 300)
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    monkeypatch.setattr("nprof.capture.chrome_fast.CHUNK", 50)
    with open(path, "rb") as fh:
        assert fast_parse(FileSource(fh, fh.read())) is not None
    with open(path, "rb") as fh:
        source = FileSource(fh, fh.read())
        other = orjson.dumps({"traceEvents": _events(random.Random(4), 300)})
        if change == "same size":  # every chunk still decodes: only the file's stamp tells
            other = path.read_bytes().replace(b"aten::mm", b"aten::mx")
        path.write_bytes(other[: len(other) // 2] if change == "shorter" else other)
        mtime = os.stat(path).st_mtime_ns + 10**9  # past the file system's mtime resolution
        os.utime(path, ns=(mtime, mtime))
        assert fast_parse(source) is None
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    _assert_same(chrome.import_chrome_trace(path), _reference(path, monkeypatch))
