"""`nki.jit`, `nki.simulate_kernel`, `nki.benchmark`, `nki.profile`: run kernels on the virtual NeuronCore.

* `@nki.jit` — calling the kernel with numpy arrays traces it, simulates it and
  returns numpy results; called inside another traced kernel it inlines.
* `nki.simulate_kernel(kernel, *args, **kwargs)` — the same, for any kernel.
* `@nki.benchmark(warmup=2, iters=10, save_neff_name=None, save_trace_name=None)`
  — each call runs `warmup + iters` executions and prints the neuron-bench
  style latency table (the one place the library prints: it is the decorator's
  user-facing output). Columns: B (batch: 1), NC / NC USED (NeuronCores: 1),
  WEIGHTS (weight tensors in the Program), MODE (`virtual`), INF/S and IRES/S
  (inferences / inference results per second at L(50)), L(p) end-to-end
  latency percentiles in µs, NCL(p) NeuronCore (device) latency percentiles in
  µs, %USER (device share of the end-to-end latency at p50).
  Latency model: NCL is the simulated device time of each measured execution
  (the cost model of `nprof.arch.cost`, version `MODEL_VERSION`). The simulated
  device is deterministic and keeps no state between executions, so NCL(1) =
  NCL(50) = NCL(99) by construction — spread there would be invented. No host
  is measured or modelled, so L(p), INF/S, IRES/S and %USER print `N/A`, as the
  real tool does for figures it cannot measure; one line under the table says so.
  `kernel.benchmark_result.nc_latency.get_latency_percentile(p)` returns µs;
  `.e2e_latency` is None (not measured). Returns the kernel's outputs (numpy).
* `@nki.profile(working_directory, save_neff_name="file.neff",
  save_trace_name="profile.ntff", overwrite=False, profile_nth=1, num_execs=None)`
  — runs the executions, profiles the `profile_nth`-th and writes the Program
  and Profile into `working_directory` (NprofError if a file exists and not
  `overwrite`). With `num_execs`, every `profile_nth`-th execution up to it is
  profiled into `<stem>_exec_<n>.ntff` (`<stem>.ntff` for execution 1), each
  with a small JSON report (simulated total time, event counts) in
  `json_reports/<stem>_exec_<n>.json` (the layout of AWS's nki.profile; the
  report content is nprof's own). The
  simulated device keeps no state between executions, so these profiles are
  the same but for their execution number. Returns the kernel's outputs.

Each decorator works with or without parentheses, keeps the wrapped
function's name and docstring, and takes `preset="trn1"|"trn2"|"trn3"` (the
device the kernel is traced for and simulated on). `nki.benchmark` and
`nki.profile` wrapped around an `nki.jit(platform_target=...)` kernel keep
the jit's preset unless given `preset=`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nprof.errors import NprofError
from nprof.nki.calls import unmodelled
from nprof.nki.kernel import Kernel, finish

DEFAULT_WARMUP = 2
DEFAULT_ITERS = 10
COLUMNS = ("B", "NC", "NC USED", "WEIGHTS", "MODE", "INF/S", "IRES/S", "L(1)", "L(50)", "L(99)", "NCL(1)", "NCL(50)",
           "NCL(99)", "%USER")  # fmt: skip


def _as_kernel(func: Any, **opts: Any) -> Kernel:
    if isinstance(func, Kernel):
        return func
    if not callable(func):
        raise NprofError(f"expected a kernel function, got {type(func).__name__}")
    return Kernel(func, **opts)


def jit(func: Callable[..., Any] | None = None, mode: str = "auto", *, preset: str = "trn1",
        platform_target: str | None = None, additional_compile_opt: str | None = None,
        show_compiler_tb: bool = False, debug_kernel: bool = False) -> Any:  # fmt: skip
    """Decorate a kernel so that calling it with numpy arrays simulates it and returns numpy results
    (`platform_target` "trn1"/"trn2" picks the preset; compiler options warn: nprof has no compiler flags)."""
    preset = _platform(platform_target, preset)
    _compile_opt("nki.jit", additional_compile_opt)
    if func is None:
        return lambda f: Kernel(f, preset=preset)
    return Kernel(func, preset=preset)


def baremetal(kernel: Callable[..., Any] | None = None, *, save_neff_name: str | None = None,
              save_trace_name: str | None = None, additional_compile_opt: str | None = None,
              artifacts_dir: str | None = None, preset: str = "trn1") -> Any:  # fmt: skip
    """Run a kernel on the virtual device with numpy arrays (like `jit`); saving artifacts is not supported."""
    if save_neff_name or save_trace_name or artifacts_dir:
        unmodelled("nki.baremetal", "save_neff_name/save_trace_name/artifacts_dir", "use nki.profile to save files")
    return jit(kernel, preset=preset, additional_compile_opt=additional_compile_opt)


def _platform(target: str | None, preset: str) -> str:
    """The preset for AWS's `platform_target` ("trn1", "inf2" -> trn1; "trn2" -> trn2; "trn3" -> trn3) or
    `preset`."""
    if target is None:
        return preset
    presets = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2", "trn3": "trn3",
               "gen4": "trn3"}  # fmt: skip
    if target not in presets:
        raise NprofError(f"platform_target must be one of {', '.join(presets)}, got {target!r}")
    return presets[target]


def _compile_opt(func: str, value: str | None) -> None:
    if value:
        unmodelled(func, "additional_compile_opt", "nprof has no compiler flags")


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Run `kernel` (decorated or not) on the virtual device with numpy arguments; returns numpy results."""
    return _as_kernel(kernel).run(*args, **kwargs)


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*arrays)` (the beta-2 entry point): `kernel` run on the virtual device."""
    k = _as_kernel(kernel)
    return k.run


@dataclass(frozen=True)
class LatencyStats:
    """Latency samples of the measured iterations, in µs."""

    samples_us: tuple[float, ...]

    def get_latency_percentile(self, percentile: float) -> float:
        if not 0 <= percentile <= 100:
            raise NprofError(f"percentile must be within 0..100, got {percentile}")
        return float(np.percentile(np.asarray(self.samples_us), percentile))

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples_us))


@dataclass(frozen=True)
class BenchmarkResult:
    """What `nki.benchmark` measured: the simulated device latencies (`nc_latency`); no end-to-end figure."""

    nc_latency: LatencyStats
    e2e_latency: LatencyStats | None  # None: no host is measured or modelled (L(p) prints N/A)
    warmup: int
    iters: int
    weights: int
    model: str = ""  # which model produced NCL, for the line under the table

    def table(self) -> str:
        """The neuron-bench style table, then one line saying where each figure comes from."""
        nc = self.nc_latency
        values = [
            "1", "1", "1", str(self.weights), "virtual", "N/A", "N/A", "N/A", "N/A", "N/A",
            *(f"{nc.get_latency_percentile(p):.2f}" for p in (1, 50, 99)), "N/A",
        ]  # fmt: skip
        widths = [max(len(c), len(v)) for c, v in zip(COLUMNS, values, strict=True)]
        head = "  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths, strict=True))
        row = "  ".join(v.rjust(w) for v, w in zip(values, widths, strict=True))
        note = (
            f"NCL(p): simulated device time ({self.model or 'virtual NeuronCore'}), the same every execution; "
            "L(p), INF/S, IRES/S, %USER: N/A (no host is measured or modelled)"
        )
        return f"{head}\n{row}\n{note}"


def _check_target(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise NprofError(f"{path} already exists; pass overwrite=True or choose another name")


class _Benchmarked(Kernel):
    def __init__(self, func: Callable[..., Any], warmup: int, iters: int, neff: str | None, trace: str | None) -> None:
        super().__init__(func)
        if warmup < 0 or iters < 1:
            raise NprofError(f"benchmark needs warmup >= 0 and iters >= 1, got warmup={warmup}, iters={iters}")
        self.warmup, self.iters, self.neff, self.trace_name = warmup, iters, neff, trace
        self.benchmark_result: BenchmarkResult | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        traced, result = self.simulate(*args, executions=self.warmup + self.iters, **kwargs)
        device = [ns / 1000.0 for ns in result.latencies_ns[self.warmup :]]
        weights = sum(1 for t in traced.program.tensors if t.kind == "weight")
        info = result.profile.info
        model = f"preset {info.preset}, cost model {info.meta.get('cost_model', '?')}"
        stats = LatencyStats(tuple(device))
        self.benchmark_result = BenchmarkResult(stats, None, self.warmup, self.iters, weights, model)
        print(self.benchmark_result.table())
        _save(traced.program, result.profile, self.neff, self.trace_name, overwrite=True, func=self.func)
        if self.trace_name:
            print(f"Profile results are written to {self.trace_name}")
        return finish(traced, result.outputs)


def _save(
    program: Any,
    profile: Any,
    neff: str | os.PathLike[str] | None,
    ntff: Any,
    *,
    overwrite: bool,
    func: Callable[..., Any] | None = None,
) -> None:
    from nprof.program.file import save_program

    for name in (neff, ntff):
        if name:
            _check_target(Path(name), overwrite)
    if neff:
        Path(neff).parent.mkdir(parents=True, exist_ok=True)
        save_program(program, neff)
    if ntff:
        from nprof.profile.sources import embed_sources

        Path(ntff).parent.mkdir(parents=True, exist_ok=True)
        # the kernel's source travels in the profile (the viewer's Source tab); looked up where it was defined
        roots = [Path(inspect.getsourcefile(func) or ".").resolve().parent] if func is not None else []
        embed_sources(profile, [*roots, Path.cwd()]).save(ntff)


def _kernel_preset(f: Callable[..., Any], preset: str | None) -> str:
    """The preset a wrapped kernel runs on: `preset` when given, else the one its `nki.jit` chose (its
    `platform_target`), else trn1."""
    if preset is not None:
        return preset
    chosen = getattr(f, "preset", None)
    return chosen if isinstance(chosen, str) else "trn1"


def benchmark(kernel: Callable[..., Any] | None = None, *, warmup: int = DEFAULT_WARMUP, iters: int = DEFAULT_ITERS,
              save_neff_name: str | None = None, save_trace_name: str | None = None, preset: str | None = None,
              additional_compile_opt: str | None = None, device_count: int = 1) -> Any:  # fmt: skip
    """Benchmark a kernel on the virtual device (see module doc for the table and latency model)."""
    _compile_opt("nki.benchmark", additional_compile_opt)
    if device_count != 1:
        unmodelled("nki.benchmark", "device_count", "one virtual NeuronCore is simulated")

    def wrap(f: Callable[..., Any]) -> _Benchmarked:
        bench = _Benchmarked(getattr(f, "__wrapped_kernel__", f), warmup, iters, save_neff_name, save_trace_name)
        bench.preset = _kernel_preset(f, preset)
        return bench

    return wrap if kernel is None else wrap(kernel)


class _Profiled(Kernel):
    num_execs: int | None = None  # set by `profile(num_execs=...)`

    def __init__(self, func: Callable[..., Any], workdir: str, neff: str, ntff: str, overwrite: bool, nth: int) -> None:
        super().__init__(func)
        if nth < 1:
            raise NprofError(f"profile_nth must be >= 1, got {nth}")
        self.workdir, self.neff, self.ntff, self.overwrite, self.nth = Path(workdir), neff, ntff, overwrite, nth

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        num_execs = getattr(self, "num_execs", None)
        nths = profiled_executions(self.nth, num_execs)
        neff = self.workdir / self.neff
        traces = [self.workdir / trace_file_name(self.ntff, n, num_execs) for n in nths]
        for path in (neff, *traces):
            _check_target(path, self.overwrite)
        runs = max(num_execs or self.nth, nths[-1])
        traced, result = self.simulate(*args, executions=runs, profile_nth=nths[0], **kwargs)
        self.workdir.mkdir(parents=True, exist_ok=True)
        _save(traced.program, None, neff, None, overwrite=True, func=self.func)
        for n, path in zip(nths, traces, strict=True):
            profile = _as_execution(result.profile, n)
            _save(traced.program, profile, None, path, overwrite=True, func=self.func)
            if num_execs is not None:
                _json_report(profile, path, self.workdir / "json_reports" / f"{path.stem}.json")
        return finish(traced, result.outputs)


def profiled_executions(nth: int, num_execs: int | None) -> list[int]:
    """Which executions `nki.profile` profiles: every `profile_nth`-th up to `num_execs` (AWS nki-samples'
    test_neuron_profile: 20 executions, profile_nth=10 -> 10 and 20); just `profile_nth` when `num_execs` is None
    or smaller."""
    if num_execs is None or num_execs < nth:
        return [nth]
    return list(range(nth, num_execs + 1, nth))


def trace_file_name(name: str, n: int, num_execs: int | None) -> str:
    """`save_trace_name` for execution `n`: as given without `num_execs`; else `<stem>_exec_<n>.ntff` (the
    neuron-profile capture naming), `<stem>.ntff` for execution 1."""
    if num_execs is None or n == 1:
        return name
    path = Path(name)
    return str(path.with_name(f"{path.stem}_exec_{n}{path.suffix or '.ntff'}"))


def _as_execution(profile: Any, n: int) -> Any:
    """The profile labelled as execution `n`: the simulated device keeps no state between executions and is
    deterministic, so every execution's profile is the same (see module doc)."""
    from dataclasses import replace

    meta = {**profile.info.meta, "profiled_execution": str(n)}
    return replace(profile, info=replace(profile.info, meta=meta))


def _json_report(profile: Any, trace: Path, path: Path) -> None:
    """A small JSON report of `profile` (where neuron-profile writes its JSON reports): the simulated total time
    and event counts, read from the profile itself (the full summary is the analysis stage's:
    `nprof view -s <trace> --output-format summary-json`)."""
    import json

    report = {
        "profiled_execution": profile.info.meta.get("profiled_execution"),
        "trace": trace.name,
        "total_time_ns": profile.total_time_ns,
        "instructions": profile.instructions.num_rows,
        "dma_transfers": profile.dma.num_rows,
        "full_summary": f"nprof view -s {trace} --output-format summary-json",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))


def profile(func: Callable[..., Any] | None = None, *, working_directory: str | os.PathLike[str] | None = None,
            save_neff_name: str = "file.neff", save_trace_name: str = "profile.ntff", overwrite: bool = False,
            profile_nth: int = 1, preset: str | None = None, additional_compile_opt: str | None = None,
            num_execs: int | None = None) -> Any:  # fmt: skip
    """Profile a kernel into `working_directory` (see module doc); with `num_execs`, that many executions run
    and every `profile_nth`-th is profiled (`profiled_executions`, `trace_file_name`), with a JSON summary each
    in `json_reports/`."""
    _compile_opt("nki.profile", additional_compile_opt)
    if profile_nth < 1 or (num_execs is not None and num_execs < 1):
        raise NprofError(f"profile_nth ({profile_nth}) and num_execs ({num_execs}) must be >= 1")
    if working_directory is None:
        raise NprofError("nki.profile needs working_directory= (where file.neff and profile.ntff are written)")

    def wrap(f: Callable[..., Any]) -> _Profiled:
        fn = getattr(f, "__wrapped_kernel__", f)
        prof = _Profiled(fn, str(working_directory), save_neff_name, save_trace_name, overwrite, profile_nth)
        prof.num_execs = num_execs
        prof.preset = _kernel_preset(f, preset)
        return prof

    return wrap if func is None else wrap(func)
