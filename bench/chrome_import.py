"""Benchmark: Chrome-trace (Kineto) import, nprof vs Holistic Trace Analysis, on the same file.

Generates a Kineto-like CUDA training trace (ProfilerStep annotations, nested
cpu_ops, cudaLaunchKernel runtime calls, kernels on two streams with grid/block
args, memcpys, ac2g flow events, [memory] instants) of about --events events,
then times `nprof.capture.open_profile` (parse + Profile tables) and HTA's
`TraceAnalysis(trace_files={0: file})` loading it, and prints both times and the
ratio, in wall time and in CPU time (both run in this process on one thread, so
the CPU ratio stays meaningful on a busy shared machine).

With --real DEPTHS (e.g. 8,32,96) it also records real torch.profiler traces (CPU, record_shapes,
with_stack, profile_memory: cpu_ops, python_function frames, fwdbwd flows, [memory] instants) of an MLP
training loop with that many Linear+ReLU layers; --gpu adds each made CUDA-shaped (`gpu_shaped`: the
recorded host side plus launches, kernels on two streams, ac2g flows, GPU ProfilerStep annotations and
memcpys, at stated times: this machine has no GPU), and --trace FILE times an existing trace. Each import
runs in a fresh child process, which reports its wall time, CPU time and peak extra RSS (the peak
resident size minus the size after importing the libraries, whose import both times exclude: for nprof
the importer's modules, for HTA `hta.trace_analysis`), printed beside the file size (goal <= 2x), HTA's
by the same measure beside it. The peak RSS counts the pages of library code a first call touches (file-backed:
~2.7 MB of numpy's and pyarrow's for nprof's table building and checks, more for HTA's pandas), which weigh on
the smallest traces; so two more figures are printed for each importer: the file-backed part of the RSS the
load added (/proc/self/status RssFile at its end; neither importer maps the trace file, so these are library
pages) and the peak less it (a lower bound of the private peak: pages touched after the peak are subtracted
too), and the peak "after a first import" (the child imports a 1283-event trace first, returns the memory it
freed to the system and resets its peak: the fixed per-process cost left out, for HTA likewise).
--repeat N runs each child N times and keeps the least of each figure (a busy shared machine).
It also prints the nprof import's CPU time per stage (parse into columns; checks, rows and tables),
measured in this process, so a regression can be placed.

Usage: .venv/bin/python bench/chrome_import.py [--events 1000000] [--real 8,32,96] [--gpu] [--trace FILE]
       [--keep DIR] [--skip-hta] [--skip-synthetic] [--repeat N]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import orjson

_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import chrome_import as b
if {which!r} == "nprof":
    import nprof.capture.chrome  # the importer's modules (msgspec, numpy, the Profile model): library imports
    import pyarrow
    pyarrow.array([0])  # pyarrow's first array imports pandas when installed: a library import, as hta's below
    fn = b.time_nprof
else:
    import hta.trace_analysis
    fn = b.time_hta
if {warm!r}:  # a first import of a small trace: the library code it touches is resident before the baseline
    import tempfile
    tiny = Path(tempfile.mkdtemp()) / "tiny.json"
    b.generate(tiny, 100)
    fn(tiny)
    import ctypes, gc
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # the memory it freed goes back to the system: not reused for free
    b.reset_peak()
base, base_file = b.rss_kb("VmRSS"), b.rss_kb("RssFile")
w, c = fn(Path({path!r}))[:2]
print(json.dumps([w, c, (b.rss_kb("VmHWM") - base) * 1024, (b.rss_kb("RssFile") - base_file) * 1024]))
"""


def reset_peak() -> None:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux: /proc/self/clear_refs, value 5)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def rss_kb(field: str) -> int:
    """A /proc/self/status memory field in kB (VmRSS: now, VmHWM: peak); 0 where /proc is missing."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith(field + ":")), 0)


BASE_US = 3_500_000_000.0  # Kineto-style large timestamps (microseconds)
PID, TID = 4242, 4242


class _Gen:
    def __init__(self) -> None:
        self.corr = 0
        self.ext = 0
        self.t = BASE_US

    def op(self, out: list[Any], name: str, ts: float, dur: float, dims: list[Any], seq: int | None = None) -> None:
        self.ext += 1
        args: dict[str, Any] = {
            "External id": self.ext,
            "Record function id": 0,
            "Input Dims": dims,
            "Input type": ["float"] * len(dims),
            "Ev Idx": self.ext,
        }
        if seq is not None:
            args["Sequence number"], args["Fwd thread id"] = seq, 0
        out.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur, "args": args}
        )

    def launch(self, out: list[Any], ts: float, kernel: str, kts: float, kdur: float, stream: int) -> None:
        self.corr += 1
        c = self.corr
        out.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": PID,
                "tid": TID,
                "ts": ts,
                "dur": 4.0,
                "args": {"cbid": 211, "correlation": c, "External id": self.ext},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": stream,
                "ts": kts,
                "dur": kdur,
                "args": {
                    "queued": 0,
                    "device": 0,
                    "context": 1,
                    "stream": stream,
                    "correlation": c,
                    "registers per thread": 64,
                    "shared memory": 4096,
                    "blocks per SM": 1.2,
                    "warps per SM": 4.8,
                    "grid": [64, 4, 1],
                    "block": [128, 1, 1],
                    "est. achieved occupancy %": 12,
                    "External id": self.ext,
                },
            }
        )
        out.append({"ph": "s", "id": c, "pid": PID, "tid": TID, "ts": ts, "cat": "ac2g", "name": "ac2g"})
        out.append({"ph": "f", "id": c, "pid": 0, "tid": stream, "ts": kts, "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def memcpy(self, out: list[Any]) -> None:
        self.corr += 1
        rt = {"cbid": 41, "correlation": self.corr}
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": PID, "tid": TID,
                    "ts": self.t, "dur": 6.0, "args": rt})  # fmt: skip
        args = {"device": 0, "context": 1, "stream": 13, "correlation": self.corr, "bytes": 1 << 20}
        out.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 13,
                    "ts": self.t + 8.0, "dur": 20.0, "args": args})  # fmt: skip
        self.t += 30.0

    def layer(self, out: list[Any], i: int) -> None:
        t = self.t
        self.op(out, "aten::linear", t, 30.0, [[64, 1024], [1024, 1024], [1024]], seq=i)
        self.op(out, "aten::t", t + 1.0, 4.0, [[1024, 1024]])
        self.op(out, "aten::transpose", t + 1.5, 3.0, [[1024, 1024], [], []])
        self.op(out, "aten::as_strided", t + 2.0, 1.0, [[1024, 1024], [], [], []])
        self.op(out, "aten::addmm", t + 6.0, 22.0, [[1024], [64, 1024], [1024, 1024], [], []], seq=i + 1)
        self.launch(out, t + 10.0, "ampere_sgemm_128x64_tn", t + 40.0, 35.0, 7)
        self.op(out, "aten::gelu", t + 32.0, 10.0, [[64, 1024], []], seq=i + 2)
        self.launch(
            out, t + 34.0, "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", t + 76.0, 6.0, 7
        )
        self.op(out, "aten::sum", t + 44.0, 8.0, [[64, 1024], [], [], []])
        self.launch(
            out, t + 46.0, "void at::native::reduce_kernel<512, 1, ReduceOp<float, sum_functor>>", t + 84.0, 5.0, 13
        )
        out.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": PID,
                "tid": TID,
                "ts": t + 45.0,
                "args": {
                    "Total Reserved": 1 << 30,
                    "Total Allocated": (i % 97) << 20,
                    "Bytes": 4096,
                    "Device Id": 0,
                    "Device Type": 1,
                    "Addr": i,
                },
            }
        )
        self.t += 90.0


def generate(path: Path, n_events: int) -> int:
    """Write a Kineto-like trace of about `n_events` events to `path`; return the exact count."""
    gen = _Gen()
    count, step = 0, 0
    with open(path, "wb") as fh:
        head = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
            "displayTimeUnit": "ms",
        }
        fh.write(orjson.dumps(head)[:-1] + b',"traceEvents":[')
        first = True
        while count < n_events:
            chunk: list[Any] = []
            start = gen.t
            for i in range(64):
                gen.layer(chunk, 3 * i)
            gen.memcpy(chunk)
            chunk.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{step}",
                    "pid": PID,
                    "tid": TID,
                    "ts": start - 0.5,
                    "dur": gen.t - start,
                    "args": {"External id": 0},
                }
            )
            step += 1
            body = orjson.dumps(chunk)[1:-1]
            fh.write(body if first else b"," + body)
            first = False
            count += len(chunk)
        fh.write(b'],"traceName":"bench"}')
    return count


def record_mlp(path: Path, depth: int) -> None:
    """Record a real torch.profiler trace of 6 SGD steps of a `depth`-layer MLP (Linear 256 + ReLU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(depth) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)
    acts = [ProfilerActivity.CPU]
    with profile(activities=acts, record_shapes=True, with_stack=True, profile_memory=True) as prof:
        for step in range(6):
            with record_function(f"ProfilerStep#{step}"):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
    prof.export_chrome_trace(str(path))


# ops that launch a CUDA kernel on a GPU run, and the stream they take (optimizer/elementwise updates on a
# second stream, as with a side stream for weight updates); everything else stays host-only (views, autograd)
_KERNELS = {
    "aten::mm": (7, "ampere_sgemm_64x32_sliced1x4_nn"), "aten::addmm": (7, "ampere_sgemm_128x64_tn"),
    "aten::relu": (7, "void at::native::vectorized_elementwise_kernel<4, clamp_min>"),
    "aten::clamp_min": (7, "void at::native::vectorized_elementwise_kernel<4, clamp_min>"),
    "aten::threshold_backward": (7, "void at::native::vectorized_elementwise_kernel<4, threshold>"),
    "aten::sum": (7, "void at::native::reduce_kernel<512, 1, ReduceOp<float, sum>>"),
    "aten::copy_": (7, "void at::native::unrolled_elementwise_kernel<copy>"),
    "aten::add_": (20, "void at::native::vectorized_elementwise_kernel<4, AddFunctor>"),
    "aten::fill_": (20, "void at::native::vectorized_elementwise_kernel<4, FillFunctor>"),
}  # fmt: skip


def gpu_shaped(src: Path, dst: Path) -> int:
    """Write `src` (a real CPU torch.profiler trace) as a real-shaped CUDA trace to `dst`; return its events.

    Each op of `_KERNELS` gets a ``cudaLaunchKernel`` runtime slice after its last child op, a kernel on its
    stream (7 or 20; queued behind the stream's previous kernel), an ``ac2g`` flow pair and correlation ids, each
    ProfilerStep a ``gpu_user_annotation`` over its kernels and a host-to-device memcpy; the host side (ops,
    Python frames, fwdbwd flows, [memory] instants) stays as recorded. This machine has no GPU: the device
    times follow this stated rule (kernel = half its op's host time, at least 2 us), not a measurement."""
    data = orjson.loads(src.read_bytes())
    events = data["traceEvents"]
    host = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    last: dict[int, float] = {}  # op -> end of its last descendant op (a stack of open ops per thread)
    stacks: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for op in host:
        stack = stacks.setdefault((op["pid"], op["tid"]), [])
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= op["ts"]:
            stack.pop()
        for above in stack:
            last[id(above)] = max(last.get(id(above), 0.0), op["ts"] + op["dur"])
        stack.append(op)
    ops = []  # (op, launch time): after the op's last child op, inside the op
    for op in host:
        end = op["ts"] + op["dur"]
        after = max(last.get(id(op), 0.0), op["ts"] + 0.5 * op["dur"])
        if op["name"] in _KERNELS and end - after > 0.02:
            ops.append((op, after + 0.25 * (end - after)))
    free = {7: 0.0, 20: 0.0}
    corr, out, step_kernels = 0, [], []
    for op, launch in ops:
        corr += 1
        stream, kernel = _KERNELS[op["name"]]
        ext = op.get("args", {}).get("External id", 0)
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": op["pid"], "tid": op["tid"],
                    "ts": launch, "dur": min(4.0, 0.5 * (op["ts"] + op["dur"] - launch)),
                    "args": {"cbid": 211, "correlation": corr, "External id": ext}})  # fmt: skip
        kts = max(launch + 5.0, free[stream])
        kdur = max(2.0, 0.5 * op["dur"])
        free[stream] = kts + kdur
        out.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": kts, "dur": kdur,
                    "args": {"queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": corr,
                             "registers per thread": 64 if stream == 7 else 32, "shared memory": 16384,
                             "grid": [64, 4, 1], "block": [128, 1, 1], "External id": ext}})  # fmt: skip
        out.append({"ph": "s", "id": corr, "pid": op["pid"], "tid": op["tid"], "ts": launch, "cat": "ac2g",
                    "name": "ac2g"})  # fmt: skip
        out.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": kts, "cat": "ac2g", "name": "ac2g",
                    "bp": "e"})  # fmt: skip
        step_kernels.append((op["ts"], kts, kdur))
    for step in (e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")):
        inside = [(k, d) for t, k, d in step_kernels if step["ts"] <= t < step["ts"] + step["dur"]]
        if inside:
            first, last = min(k for k, _ in inside), max(k + d for k, d in inside)
            out.append({**step, "cat": "gpu_user_annotation", "pid": 0, "tid": 7, "ts": first, "dur": last - first})
        corr += 1
        out.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 20,
                    "ts": step["ts"] + 1.0, "dur": 3.0, "args": {"device": 0, "stream": 20, "correlation": corr,
                    "bytes": 32 * 256 * 4}})  # fmt: skip
    dst.write_bytes(_appended(src.read_bytes(), out))
    return len(events) + len(out)


def _appended(raw: bytes, extra: list[dict[str, Any]]) -> bytes:
    """The Kineto trace text `raw` with `extra` events appended to traceEvents in Kineto's layout (one field
    a line, args on one line) and an A100 as its device; the recorded text is kept byte for byte."""
    close = raw.rfind(b"]")  # traceEvents closes last: Kineto writes only "traceName" (a string) after it
    assert b"[" not in raw[close:] and raw[:close].rstrip().endswith(b"}"), "not a Kineto trace layout"

    def event(e: dict[str, Any]) -> bytes:
        fields = [b'    "%s": %s' % (k.encode(), orjson.dumps(v)) for k, v in e.items() if k != "args"]
        if "args" in e:
            fields.append(b'    "args": {\n      ' + orjson.dumps(e["args"])[1:-1] + b"\n    }")
        return b"  {\n" + b",\n".join(fields) + b"\n  }"

    body = raw[:close].rstrip() + b"".join(b",\n" + event(e) for e in extra) + b"\n  " + raw[close:]
    gpu = b'"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]'
    return body.replace(b'"deviceProperties": []', gpu, 1)


def in_child(which: str, path: Path, repeat: int = 1, warm: bool = False) -> tuple[float, float, int, int]:
    """(wall s, CPU s, peak extra RSS bytes, file-backed RSS bytes added) of `time_nprof` or `time_hta`, each
    run in a fresh Python process `repeat` times: the least of each figure (on a busy machine the least is the
    least disturbed run). The file-backed RSS added (/proc/self/status RssFile, at the end of the load) is the
    library code and data pages the load touched first: neither importer maps the trace file.
    `warm`: the child first imports a 1283-event trace (its freed memory returned to the system), so the
    figures leave out the library code a first import touches (a fixed cost per process, not per file)."""
    import subprocess

    code = _CHILD.format(bench=str(Path(__file__).parent), which=which, path=str(path), warm=warm)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        runs.append(orjson.loads(out.stdout.strip().splitlines()[-1]))
    w, c, rss, file_rss = (min(r[k] for r in runs) for k in range(4))
    return w, c, rss, file_rss


def memory(rss: int, file_rss: int, rss_warm: int, size: int) -> str:
    """The peak-memory figures of one importer on one file, each stated as measured."""
    private = rss - file_rss
    return (
        f"peak extra RSS {rss / 1e6:.1f} MB = {rss / size:.1f}x the file; of the RSS it added {file_rss / 1e6:.1f} MB "
        f"is file-backed (library code pages), the peak less those {private / 1e6:.1f} MB = {private / size:.1f}x "
        f"(a lower bound of the private peak); after a first import: {rss_warm / 1e6:.1f} MB = {rss_warm / size:.1f}x"
    )


def compare(path: Path, n: int, skip_hta: bool, repeat: int = 1) -> int:
    """Print nprof's and HTA's import figures for one trace file (each in child processes, the same measure:
    times of the load call, peak RSS over the RSS after the library imports)."""
    size = os.path.getsize(path)
    load = f"; machine load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores" if hasattr(os, "getloadavg") else ""
    print(f"trace: {n} events, {size / 1e6:.1f} MB ({path.name}){load}")
    t_nprof, c_nprof, rss, file_rss = in_child("nprof", path, repeat)
    rss_warm = in_child("nprof", path, repeat, warm=True)[2]
    print(
        f"  nprof import: {t_nprof:.2f} s wall, {c_nprof:.2f} s CPU ({n / t_nprof:,.0f} events/s); "
        f"{memory(rss, file_rss, rss_warm, size)} (goal: peak <= 2x)"
    )
    stages(path)
    if skip_hta:
        return 0
    try:
        t_hta, c_hta, rss_hta, file_hta = in_child("hta", path, repeat)
    except Exception as exc:  # report why HTA could not load, do not hide it
        err = getattr(exc, "stderr", None) or str(exc)  # a child's failure: the last line it printed
        print(f"  HTA: failed to load ({type(exc).__name__}: {err.strip().splitlines()[-1][:200]})")
        return 1
    rss_hta_warm = in_child("hta", path, repeat, warm=True)[2]
    print(
        f"  HTA TraceAnalysis load: {t_hta:.2f} s wall, {c_hta:.2f} s CPU ({n / t_hta:,.0f} events/s); "
        f"{memory(rss_hta, file_hta, rss_hta_warm, size)}"
    )
    print(
        f"  ratio: nprof is {t_hta / t_nprof:.1f}x faster than HTA (wall), {c_hta / c_nprof:.1f}x (CPU time); "
        "goal >= 5x"
    )
    return 0


def stages(path: Path) -> None:
    """Print the CPU time of the import's two stages (parse into columns, then checks, rows and tables)."""
    from nprof.capture import chrome
    from nprof.capture.chrome_fast import fast_parse

    with tempfile.TemporaryDirectory() as tmp:  # warm up: lazy imports are not a stage
        generate(Path(tmp) / "tiny.json", 100)
        chrome.import_chrome_trace(Path(tmp) / "tiny.json")
    c0 = time.process_time()
    columns = fast_parse(chrome.read_bytes(path))
    c1 = time.process_time()
    if columns is None:
        print("  nprof stages: the trace is not plain; it takes the reference path (orjson dicts)")
        return
    chrome.columns_to_profile(columns, path)
    rest = time.process_time() - c1
    print(f"  nprof stages (CPU): parse into columns {c1 - c0:.2f} s, checks + rows + tables {rest:.2f} s")


def time_nprof(path: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, profile events) of nprof's import; both run in this process, single-threaded."""
    from nprof.capture import open_profile

    t, c = time.perf_counter(), time.process_time()
    profile = open_profile(path)
    return time.perf_counter() - t, time.process_time() - c, profile.event_count


def time_hta(path: Path) -> tuple[float, float]:
    """(wall s, CPU s) of HTA loading one rank's trace (HTA parses a single rank in-process)."""
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from hta.trace_analysis import TraceAnalysis

    t, c = time.perf_counter(), time.process_time()
    TraceAnalysis(trace_files={0: path.name}, trace_dir=str(path.parent))
    return time.perf_counter() - t, time.process_time() - c


def _count(path: Path) -> int:
    """Events in a trace file."""
    data = orjson.loads(path.read_bytes())
    return len(data["traceEvents"] if isinstance(data, dict) else data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--real", default="", help="comma-separated MLP depths to record real traces of")
    parser.add_argument("--trace", action="append", default=[], help="an existing trace file to time")
    parser.add_argument("--keep", default=None, help="directory to keep the generated traces in")
    parser.add_argument("--gpu", action="store_true", help="also time each --real trace made CUDA-shaped")
    parser.add_argument("--skip-hta", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="child runs per figure; the least of each is kept")
    args = parser.parse_args()
    status = 0
    with tempfile.TemporaryDirectory(prefix="nprof-bench-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        files = [Path(t) for t in args.trace]
        for depth in [int(d) for d in args.real.split(",") if d]:
            files.append(folder / f"mlp{depth}.pt.trace.json")
            record_mlp(files[-1], depth)
            if args.gpu:
                gpu_shaped(files[-1], folder / f"mlp{depth}.cuda.pt.trace.json")
                files.append(folder / f"mlp{depth}.cuda.pt.trace.json")
        if not args.skip_synthetic:
            files.append(folder / "kineto_bench.json")
            generate(files[-1], args.events)
        for path in files:
            status |= compare(path, _count(path), args.skip_hta, args.repeat)
    return status


if __name__ == "__main__":
    sys.exit(main())
