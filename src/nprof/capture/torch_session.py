"""One torch.profiler session with nprof's annotations, and its conversion into a Profile.

Contract:
* `TorchSession(device)` profiles the current process between `start()` and
  `stop(trace_path)` (which writes torch's Chrome-trace JSON): CPU activity, plus
  CUDA when ``device == "cuda"``; ``record_shapes`` (operands and FLOPs) and
  ``profile_memory`` (memory counters) are on. torch's Python tracer
  (``with_stack``/``with_modules``) stays off: it costs a lot and gives only
  function definition lines and per-class module names. Instead, while the
  session runs:
  - every torch function called from user code (not torch, nprof, the standard
    library or site-packages) is wrapped in a ``nprof.src: <file>:<line>``
    annotation naming the exact calling line (a TorchFunctionMode);
  - every ``nn.Module`` call is wrapped in a ``nprof.module: <path>`` annotation
    with its attribute path from the root module (``MLP.fc1``), via global
    forward hooks.
  The importer (`nprof.capture.chrome`) turns those into ``nki_source_location`` and ``layer``.
  `step()` ends a training step and starts the next (``ProfilerStep#N``
  annotations, as torch's own ``profiler.step()``): rows get N as ``iteration``.
  A `SystemRecorder` (`nprof.capture.system_recorder`) observes the nprof
  backend meanwhile (compiles, launches, copies, device profiles per
  ``device_profile`` policy); `stop` writes its log beside the trace, and
  `nprof.capture.system` joins it to the host rows (the system profile).
* `resolve_device(device)` checks the requested device ("cpu", "cuda" or None =
  cuda if available) and raises `NprofError` when CUDA is asked for but absent.
* `build_torch_profile(trace_path, device, name, meta)` imports the trace and
  sets the manifest: device, device name, peaks (CPU calibration or GPU table).
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
import threading
import warnings
import weakref
from pathlib import Path
from types import FrameType
from typing import Any

from nprof.errors import NprofError
from nprof.profile import Profile, ProfileInfo

_NPROF_DIR = str(Path(__file__).resolve().parent.parent)
_COMPILE_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"  # torch/_dynamo/eval_frame.py


def resolve_device(device: str | None) -> str:
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise NprofError(f"device {device!r}: expected cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise NprofError("device cuda: no CUDA device is available (torch.cuda.is_available() is False); use cpu")
    return device


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    from nprof.capture.devices import cpu_model

    return cpu_model()


class _UserFiles:
    """Decides (and caches) whether a code file belongs to the user rather than a library."""

    def __init__(self) -> None:
        import torch

        paths = sysconfig.get_paths()
        roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
        roots |= {str(Path(torch.__file__).resolve().parent), _NPROF_DIR, sys.prefix + "/lib"}
        self._roots = tuple(r for r in roots if r)
        self._cache: dict[str, bool] = {}

    def __call__(self, filename: str) -> bool:
        got = self._cache.get(filename)
        if got is None:
            if filename.startswith("<"):
                got = False
            else:
                full = str(Path(filename).resolve())
                got = not full.startswith(self._roots) and "site-packages" not in full
            self._cache[filename] = got
        return got


class _Annotator:
    """Installs the source-line TorchFunctionMode and the module-path hooks (see module doc)."""

    def __init__(self) -> None:
        import torch
        from torch.overrides import TorchFunctionMode

        self._torch = torch
        user = _UserFiles()
        record = torch.autograd.profiler.record_function
        is_compiling = torch.compiler.is_compiling  # inside torch.compile tracing: stay out of the graph
        skip = {"__get__", "__set__", "size", "dim", "numel", "stride", "is_contiguous", "data_ptr", "__len__"}

        class SourceMode(TorchFunctionMode):
            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                if is_compiling():  # first: Dynamo traces this mode, and must see nothing but the call
                    return func(*args, **kwargs)
                fname = getattr(func, "__name__", "")
                if fname in skip or "record_function" in fname:
                    return func(*args, **kwargs)
                frame: FrameType | None = sys._getframe(1)
                while frame is not None and not user(frame.f_code.co_filename):
                    frame = frame.f_back
                if frame is None:
                    return func(*args, **kwargs)
                with record(f"nprof.src: {frame.f_code.co_filename}:{frame.f_lineno}"):
                    return func(*args, **kwargs)

        self._mode = SourceMode()
        self._record = record
        self._paths: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._local = threading.local()  # module call stacks are per thread
        self._handles: list[Any] = []

    @property
    def _stack(self) -> list[tuple[Any, Any, str]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _path(self, module: Any) -> str:
        parent = self._stack[-1] if self._stack else None
        if parent is None:  # the root: its class name (the wrapped model's for torch.compile's OptimizedModule)
            return self._paths.get(module) or type(getattr(module, "_orig_mod", module)).__name__
        got = self._paths.get(module)
        if got is not None and got.startswith(parent[2] + "."):
            return got
        for attr, child in parent[0]._modules.items():
            if child is module:
                path = parent[2] if attr == "_orig_mod" else f"{parent[2]}.{attr}"
                break
        else:
            path = f"{parent[2]}.{type(module).__name__}"
        self._paths[module] = path
        return path

    def _pre(self, module: Any, args: Any) -> None:
        if self._torch.compiler.is_compiling():  # torch.compile traces hooks: keep them out of its graphs
            return
        path = self._path(module)
        rf = self._record(f"nprof.module: {path}")
        rf.__enter__()
        self._stack.append((module, rf, path))

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._torch.compiler.is_compiling() or not any(entry[0] is module for entry in self._stack):
            return
        while self._stack:
            mod, rf, _ = self._stack.pop()
            rf.__exit__(None, None, None)
            if mod is module:
                break

    def __enter__(self) -> _Annotator:
        hooks = self._torch.nn.modules.module
        # torch warns on every call of a torch.compile'd module while global hooks exist; these are nprof's own
        # and `_path` already names the OptimizedModule's extra call after the module it wraps (`_orig_mod`)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
        self._handles = [
            hooks.register_module_forward_pre_hook(self._pre),
            hooks.register_module_forward_hook(self._post, always_call=True),
        ]
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(None, None, None)
        for h in self._handles:
            h.remove()
        self._warnings.__exit__(None, None, None)
        while self._stack:
            self._stack.pop()[1].__exit__(None, None, None)


class TorchSession:
    """A running torch.profiler session (see module doc)."""

    active: TorchSession | None = None  # the running session of this process (torch allows one)

    def __init__(self, device: str | None = None, device_profile: str = "default") -> None:
        import torch

        from nprof.capture.system_recorder import DevicePolicy, SystemRecorder

        self.device = resolve_device(device)
        self.recorder = SystemRecorder(DevicePolicy.parse(device_profile))
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(activities=activities, record_shapes=True, profile_memory=True)
        self._annotator = _Annotator()
        self._running = False
        self._record = torch.autograd.profiler.record_function
        self._step: Any = None
        self.step_num = 0

    def start(self) -> None:
        self.recorder.install()
        self._prof.__enter__()
        self._annotator.__enter__()
        self._running = True
        TorchSession.active = self
        self._open_step()

    def _open_step(self) -> None:
        self._step = self._record(f"ProfilerStep#{self.step_num}")
        self._step.__enter__()

    def _close_step(self) -> None:
        if self._step is not None:
            self._step.__exit__(None, None, None)
            self._step = None

    def step(self) -> None:
        """End the current step and start the next: rows get the step number as `iteration`."""
        if not self._running:
            return
        self._close_step()
        self.step_num += 1
        self._open_step()

    def stop(self, trace_path: str | os.PathLike[str]) -> None:
        """Stop profiling; write torch's Chrome trace to `trace_path` and the backend log beside it."""
        if not self._running:
            return
        self._running = False
        if TorchSession.active is self:
            TorchSession.active = None
        self._close_step()
        self._annotator.__exit__(None, None, None)
        self._prof.__exit__(None, None, None)
        self.recorder.uninstall()
        self.recorder.write(Path(trace_path).parent)
        self._prof.export_chrome_trace(str(trace_path))


def build_torch_profile(trace_path: str | os.PathLike[str], device: str, name: str, meta: dict[str, str]) -> Profile:
    """Import a trace written by `TorchSession.stop` and fill the manifest (device, name, peaks)."""
    from nprof import __version__
    from nprof.capture.chrome import import_chrome_trace
    from nprof.capture.devices import cpu_peaks

    peaks = cpu_peaks() if device == "cpu" else None
    info = ProfileInfo(
        device=device,
        name=name,
        producer=f"nprof {__version__} (torch.profiler capture)",
        device_name=device_name(device),
        peak_flops=peaks[0] if peaks else None,
        hbm_bandwidth=peaks[1] if peaks else None,
        peaks_source=peaks[2] if peaks else None,
        meta={"host": platform.node(), "python": platform.python_version(), **meta},
    )
    return import_chrome_trace(trace_path, info=info)
