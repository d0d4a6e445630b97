"""`nprof.torch`: profile a block of PyTorch code into an nprof profile file.

    import nprof.torch
    with nprof.torch.profile("profile.ntff") as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Contract of `profile(path, device=None)` (a context manager):
* profiles the block with torch.profiler exactly as `nprof capture -- python
  script.py` does (see `nprof.capture.torch_session`: shapes, memory, exact user
  source lines, module paths), on ``device`` "cpu" or "cuda" (None = cuda when
  available, else cpu; "cuda" without a GPU raises `NprofError` on entry);
* on exit writes the profile atomically to `path` and exposes it as
  ``.profile`` (a `nprof.profile.Profile`) and ``.path``; when the block raises,
  what was recorded is still written (if any op ran) and the exception propagates;
* `name` sets the profile's display name (default: the file name without suffix);
* graphs compiled with ``torch.compile(backend="nprof")`` that run in the block make it a
  system profile (`nprof.capture.system`); ``device_profile`` ("default", "all", "nth:N",
  "none") picks which of their executions keep a device profile, saved in ``<path>.devices/``;
* ``.step()`` inside the block marks the end of a training step, like torch's
  ``profiler.step()``: rows of step N get ``iteration`` N (0 until the first call);
  the module-level `step()` does the same for whatever session is running (a
  script under ``nprof capture -- python script.py`` calls ``nprof.torch.step()``)
  and is a no-op when nothing is profiled.
Sessions do not nest (torch.profiler allows one at a time). In a multi-process job (torchrun: WORLD_SIZE > 1)
``{rank}`` in `path` becomes the process's rank, and a path without it is refused (the ranks would overwrite
one file); the rank and world size go into the manifest.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from nprof.errors import NprofError
from nprof.profile import Profile

if TYPE_CHECKING:
    from nprof.capture.torch_session import TorchSession

__all__ = ["profile", "step"]


def step() -> None:
    """End a training step in the running nprof session, if any (also under `nprof capture -- python ...`).

    A no-op when nothing is being profiled, so training scripts can call it unconditionally."""
    from nprof.capture.torch_session import TorchSession

    if TorchSession.active is not None:
        TorchSession.active.step()


def _rank_path(path: str) -> str:
    """`path` with ``{rank}`` replaced by this process's rank in a multi-process job (torchrun sets RANK and
    WORLD_SIZE); NprofError when several processes would write the same file."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if "{rank}" in path:
        return path.replace("{rank}", os.environ.get("RANK", "0"))
    if world > 1:
        raise NprofError(
            f"{path}: every process of this {world}-process job would write this file; put {{rank}} in the path "
            "(out/profile_rank_{rank}.ntff, which `nprof view -d out/` opens as one group) or run the job with "
            "`nprof capture -s out/ -- torchrun ...`, which also puts the ranks on one clock"
        )
    return path


class profile:  # lower case like torch.profiler.profile
    """Context manager profiling its block into an nprof profile file (see module doc)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        device: str | None = None,
        *,
        name: str | None = None,
        device_profile: str = "default",
    ) -> None:
        self.path = Path(_rank_path(str(path)))
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise NprofError(f"{self.path}: directory {parent} does not exist; create it or pick another path")
        self.name = name or self.path.stem
        self.requested_device = device
        self.device_profile = device_profile
        self.device: str | None = None
        self.profile: Profile | None = None
        self._session: TorchSession | None = None

    def __enter__(self) -> profile:
        from nprof.capture.torch_session import TorchSession

        self._session = TorchSession(self.requested_device, self.device_profile)
        self.device = self._session.device
        self._session.start()
        return self

    def step(self) -> None:
        """Mark the end of a training step: ops of step N get ``iteration`` N (the first step is 0)."""
        if self._session is not None:
            self._session.step()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        from nprof.capture.system import attach_system, save_system
        from nprof.capture.torch_session import build_torch_profile

        session, self._session = self._session, None
        if session is None:
            return
        with tempfile.TemporaryDirectory(prefix="nprof-torch-") as tmp:
            trace = Path(tmp) / "trace.json"
            session.stop(trace)
            meta = {"block_raised": exc_type.__name__} if exc_type is not None else {}
            result = build_torch_profile(trace, session.device, self.name, meta)
            if "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
                world = int(os.environ["WORLD_SIZE"])
                result = replace(result, info=replace(result.info, rank=int(os.environ["RANK"]), world_size=world))
            if result.instructions.num_rows == 0 and result.dma.num_rows == 0:
                if exc_type is None:
                    raise NprofError(f"{self.path}: no PyTorch op ran inside the profiled block; no profile written")
                return
            system = attach_system(result, Path(tmp), self.path)
            save_system(system, self.path)
        self.profile = system.profile
