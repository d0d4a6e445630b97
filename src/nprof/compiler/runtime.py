"""Run a compiled graph on the virtual device and hand torch tensors back.

Contract: `DeviceGraph(program, input_names, slots)` is AOTAutograd-callable (boxed: it takes the list of graph
inputs). Each call converts the torch inputs to numpy in the program's dtypes (int64 -> int32, bool -> uint8), runs
the program on the virtual device — its timing simulated once by `nprof.device.simulate` (it does not depend on the
data; with a `TimingCache` the Profile is read from the compile cache when a process simulated this program before,
and written there when not), its numerics on every call by `nprof.device.numerics_prepared` (the same bits as
`simulate`'s); in a multi-process torch.distributed job, a program with collectives exchanges their data with the
other processes on every call (`device.process_group.run_in_job`) — and rebuilds every graph output as a torch tensor
of the traced shape, dtype and strides, on the inputs' device (graph inputs returned as outputs are passed through;
constant outputs are filled on the host). The first call saves its inputs as ``inputs/<name>.npy`` in the module's
cache directory (`sample_dir`), so ``nprof capture -n model.neff`` can be given real values. Program inputs named
``rng.*`` (training-mode dropout) are drawn from torch's generator on every call, in input order, as the program's
meta says (`draw_rng`: eager dropout's masks for the same seed).
After each call `failed_checks` names the program's checks (`nprof.compiler.regather_check`) that found a
regather or one-hot matmul of a non-finite value: when any, the caller must not use the results.
`STATS` counts compilations, cache hits and device time for tests and benchmarks.
`OBSERVERS`: callables that receive a `RuntimeEvent` for every compile, cache hit, fallback, host->device
copy, launch and device->host copy of the backend (stamped with `time.time_ns()`, the Unix clock that
torch.profiler's traces use), so a capture can draw the system view; nothing is recorded when empty.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nprof.compiler.cache import TimingCache
from nprof.compiler.lower import RNG_DRAWS_META, OutputSlot
from nprof.compiler.packing import INTS_NAME, PACKED_META, RNG_PREFIX, pack_inputs, unpack_outputs
from nprof.compiler.regather_check import failed_checks

_NUMPY_OF_PROGRAM = {"float32": np.float32, "int32": np.int32, "uint8": np.uint8, "int16": np.int16, "int8": np.int8}


@dataclass
class Stats:
    """Process-wide counters of the nprof backend."""

    compiled: int = 0  # graphs lowered to a Program in this process
    cache_hits: int = 0  # graphs loaded from the compile cache instead
    fallbacks: int = 0  # graphs run eagerly because of unsupported ops
    compile_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, seconds) per lowering
    compile_cpu_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, CPU s) per lowering
    store_cpu_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, CPU s) writing the cache
    load_cpu_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, CPU s) reading a cached one
    device_ns: list[tuple[str, int]] = field(default_factory=list)  # (module, simulated ns) per execution
    wall_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, wall s) per execution
    cpu_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, CPU s) per execution
    timing_hits: int = 0  # graphs whose simulated timing came from the cache (`TimingCache`)
    timing_cpu_seconds: list[tuple[str, float]] = field(default_factory=list)  # (module, CPU s) simulating/loading
    last_profile: dict[str, Any] = field(default_factory=dict)  # module -> Profile of its last execution

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


STATS = Stats()


@dataclass(frozen=True)
class RuntimeEvent:
    """One host-side event of the backend, for `OBSERVERS` (times: `time.time_ns()`, Unix ns)."""

    kind: str  # compile, cache_hit, fallback, h2d, launch or d2h
    module: str  # compile-cache module (MODULE_<hash>) of the graph
    start_ns: int  # when it began
    end_ns: int  # when it ended
    nbytes: int = 0  # bytes copied (h2d, d2h)
    exec_index: int = -1  # the graph's execution count, from 0 (h2d, launch, d2h)
    device_ns: int = 0  # simulated device time of the execution (launch)
    profile: Any = None  # the device Profile of the execution (launch)
    thread: int = 0  # native id of the host thread
    graph: str = ""  # program name, <module>_<fw|bw|inference> (h2d, launch, d2h)


OBSERVERS: list[Callable[[RuntimeEvent], None]] = []


def notify(kind: str, module: str, start_ns: int, **fields: Any) -> None:
    """Send a `RuntimeEvent` ending now to every observer (no-op without observers)."""
    if OBSERVERS:
        event = RuntimeEvent(kind, module, start_ns, time.time_ns(), thread=threading.get_native_id(), **fields)
        for observer in list(OBSERVERS):
            observer(event)




def draw_rng(shape: Sequence[int], how: dict[str, Any] | None) -> np.ndarray:
    """One ``rng.*`` program input drawn from torch's default generator. ``{"bernoulli": q, "dtype": d}``
    (`lower.RNG_DRAWS_META`): a 0/1 keep mask drawn as eager CPU dropout draws it,
    ``torch.empty(shape, dtype=d).bernoulli_(q)`` (same generator state -> same mask as eager); None (programs
    compiled before that rule): uniform [0, 1) numbers, ``torch.rand(shape)``, as those programs expect."""
    import torch

    if how is None:
        return torch.rand(tuple(shape)).numpy()
    keep = torch.empty(tuple(shape), dtype=getattr(torch, str(how["dtype"]))).bernoulli_(float(how["bernoulli"]))
    return keep.float().numpy()


def to_numpy(t: Any, program_dtype: str) -> np.ndarray:
    """A torch tensor as a numpy array in the program dtype's numpy type (bf16/fp16 go via float32)."""
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype in (torch.bfloat16, torch.float16, torch.float64):
        t = t.float()
    arr = t.contiguous().numpy()
    want = _NUMPY_OF_PROGRAM.get(program_dtype)
    if want is not None and arr.dtype != want:
        arr = arr.astype(want)
    return arr


def to_torch(arr: np.ndarray, slot: OutputSlot) -> Any:
    """Device output `arr` as a torch tensor of the slot's shape, dtype and strides, owning its memory (never a view
    of a buffer the device reuses): an array that owns its data (`collect_outputs` copies every output) is wrapped
    without another copy, anything else is copied first; a strided copy is made only when the traced strides are
    not the contiguous ones."""
    import torch

    dtype = getattr(torch, slot.dtype)
    if arr.dtype.kind not in "iub":  # float32, and bfloat16/float8 (ml_dtypes) which torch cannot wrap
        arr = arr.astype(np.float32, copy=False)
    if not (arr.flags.owndata and arr.flags.c_contiguous):
        arr = np.array(arr, order="C")  # a copy the tensor owns
    value = torch.from_numpy(arr).to(dtype).reshape(slot.shape)
    if 0 in slot.stride or value.stride() == tuple(slot.stride):  # expanded outputs: contiguous values are faithful
        return value
    out = torch.empty_strided(slot.shape, slot.stride, dtype=dtype)
    out.copy_(value)
    return out


class DeviceGraph:
    """A callable (on the list of graph inputs) running one Program per call (see module doc)."""

    def __init__(
        self,
        program: Any,
        input_names: Sequence[str],
        slots: Sequence[OutputSlot],
        module: str,
        sample_dir: Path | None = None,
        timing: TimingCache | None = None,
    ) -> None:
        self.program = program
        self.input_names = list(input_names)
        self.slots = list(slots)
        self.module = module
        self.sample_dir = sample_dir
        self.timing = timing
        self._decls = {t.name: t for t in program.inputs}
        self.calls = 0  # executions so far (the next one's index)
        self.failed_checks: frozenset[str] = frozenset()  # the last execution's checks with a non-finite row
        self._timed: tuple[Any, int] | None = None  # (Profile, simulated ns) of every execution
        self._numerics: Any = None  # the PreparedNumerics of the program
        self._rng_draws = json.loads(program.meta.get(RNG_DRAWS_META, "{}"))
        self._packed = {m[0]: "int32" if pack == INTS_NAME else "float32"  # member -> its dtype in the pack
                        for pack, layout in json.loads(program.meta.get(PACKED_META, "{}")).items() for m in layout}

    def __call__(self, args: list[Any]) -> list[Any]:
        start, start_cpu = time.perf_counter(), time.process_time()
        call_ns, index = time.time_ns(), self.calls
        self.calls += 1
        device = next((a.device for a in args if hasattr(a, "device")), "cpu")  # results go back where inputs live
        inputs = {}
        for name, value in zip(self.input_names, args, strict=True):
            decl = self._decls.get(name)
            if decl is not None and hasattr(value, "detach"):
                inputs[name] = to_numpy(value, decl.dtype)
        for name, value in zip(self.input_names, args, strict=True):
            if name in self._packed and hasattr(value, "detach"):
                inputs[name] = to_numpy(value, self._packed[name])
        inputs = pack_inputs(self.program, inputs)  # small inputs share one HBM tensor (compiler.packing)
        for name, decl in self._decls.items():
            if name.startswith(RNG_PREFIX):  # fresh random numbers per execution (dropout masks), in input order
                inputs[name] = draw_rng(decl.shape, self._rng_draws.get(name))
        if self.sample_dir is not None:
            save_samples(self.sample_dir, inputs)
            self.sample_dir = None
        graph = self.program.name
        in_bytes = sum(a.nbytes for a in inputs.values())
        notify("h2d", self.module, call_ns, nbytes=in_bytes, exec_index=index, graph=graph)
        launch_ns = time.time_ns()
        outputs, profile, device_ns = self._execute(inputs)
        outputs = unpack_outputs(self.program, outputs)  # small outputs staged into one HBM tensor
        self.failed_checks = failed_checks(outputs)  # a regather or one-hot matmul may have spread a NaN
        notify("launch", self.module, launch_ns, exec_index=index, device_ns=device_ns, profile=profile,
               graph=graph)  # fmt: skip
        copy_ns = time.time_ns()
        outs: list[Any] = []
        handed: set[str] = set()  # program outputs already wrapped: a second slot of one gets its own copy
        for slot in self.slots:
            if slot.kind == "tensor":
                arr = outputs[slot.name]
                outs.append(to_torch(arr.copy() if slot.name in handed else arr, slot).to(device))
                handed.add(slot.name)
            elif slot.kind == "input":
                outs.append(args[int(slot.name)])
            elif slot.kind == "input_view":
                base = args[int(slot.name)]
                base = base if base.is_contiguous() else base.contiguous()
                outs.append(base.as_strided(slot.shape, slot.stride, base.storage_offset() + slot.offset))
            elif slot.kind == "const":
                import torch

                outs.append(torch.full(slot.shape, slot.value, dtype=getattr(torch, slot.dtype), device=device))
            else:
                outs.append(None)
        out_bytes = sum(outputs[s.name].nbytes for s in self.slots if s.kind == "tensor")
        notify("d2h", self.module, copy_ns, nbytes=out_bytes, exec_index=index, graph=graph)
        STATS.device_ns.append((self.module, device_ns))
        STATS.wall_seconds.append((self.module, time.perf_counter() - start))
        STATS.cpu_seconds.append((self.module, time.process_time() - start_cpu))
        STATS.last_profile[self.module] = profile
        return outs

    def _execute(self, inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], Any, int]:
        """(outputs, device Profile, simulated ns) of one execution. The timing does not depend on the data and
        the device keeps no state between executions (`nprof.device.simulate`), so it is simulated on the first
        call and reused (except in a multi-process job with collectives, where every call is exchanged); the
        numerics run on every call, prepared once (`PreparedNumerics`: same bits as
        `simulate(numerics=True)`, inf/NaN allowed as eager torch allows them)."""
        from nprof.arch.presets import get_preset
        from nprof.device import simulate
        from nprof.device.numerics_prepared import PreparedNumerics
        from nprof.device.process_group import current_job, has_collectives, run_in_job

        job = current_job() if has_collectives(self.program) else None
        if job is not None:  # torchrun: the collectives' data (and waits) come from the other processes
            result = run_in_job(self.program, inputs, job, allow_nonfinite=True)
            return result.outputs, result.profile, int(result.latencies_ns[-1])
        if self._timed is None:
            start = time.process_time()
            profile = self.timing.load(self.program.preset) if self.timing is not None else None
            if profile is None:
                profile = simulate(self.program, inputs, numerics=False).profile
                if self.timing is not None:
                    self.timing.store(self.program.preset, profile)
            else:
                STATS.timing_hits += 1
            total = profile.info.total_time_ns
            assert total is not None  # a simulated profile always has its execution window
            self._timed = (profile, int(total))  # simulate's latency of every execution
            STATS.timing_cpu_seconds.append((self.module, time.process_time() - start))
            self._numerics = PreparedNumerics(self.program, get_preset(self.program.preset))
        assert self._numerics is not None
        return self._numerics.run(inputs, lenient=True), *self._timed


def save_samples(directory: Path, inputs: dict[str, np.ndarray]) -> None:
    """Write the inputs of one call as ``<dir>/<name>.npy`` (once: existing files are kept)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, arr in inputs.items():
            path = directory / f"{name}.npy"
            if not path.exists():
                tmp = directory / f".{name}.{time.monotonic_ns()}.npy"
                np.save(tmp, arr)
                tmp.replace(path)
        args = directory.parent / "inputs.args"
        if not args.exists():
            args.write_text(" ".join(f"{name} {directory / (name + '.npy')}" for name in inputs) + "\n")
    except OSError:
        return  # samples are a convenience: a read-only cache must not break training
