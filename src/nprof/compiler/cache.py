"""The persistent compile cache and `nprof compile -- <command>`.

Layout: ``<cache>/nprof-<version>/MODULE_<graph-hash>/`` holding ``model.neff`` (the Program, written by
`nprof.program.file.save_program`), ``manifest.json`` (module, kind fw/bw/inference, graph text, input and
output specs with names/shapes/dtypes, instruction count, created time) and, after the first execution,
``inputs/<name>.npy`` (that call's input values) plus ``inputs.args`` (the ``NAME FILE.npy`` pairs to give
``nprof capture``), and ``timing/<key>.ntff``: the simulated Profile of the program's execution (`TimingCache`).
The cache root is the backend option ``cache_dir``, else ``$NPROF_CACHE``, else
``~/.cache/nprof/compile-cache``. A module is written to a temporary directory next to its final place and
renamed into it, so readers never see half a module and concurrent compilers of the same graph agree.

`TimingCache(module_dir)` keeps the simulated timing of a compiled program (its Profile: timing does not depend
on the data, `nprof.device.simulate`) so a new process does not simulate it again. Its key is a digest of the
program file's bytes, the preset's values, the cost-model version (`arch.cost.MODEL_VERSION`), the nprof
version and the source of everything that produces a Profile from a Program (`timing_fingerprint`: the
packages ``device``, ``arch``, ``profile`` and the modules ``compiled``, ``container``): any change to one of
them is a miss. An unreadable entry is a miss and is simulated and written again.

`compile_command(command, cache_dir)` runs the command once with ``NPROF_COMPILE_ONLY=1`` (every nprof graph
is compiled into the cache, then executed eagerly on the CPU for speed); its `Outcome` holds the listing
`compile_report` writes (which modules the run compiled or found in the cache, with their kind and
instruction count, and where they are) for the CLI to print, and the command's exit code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nprof import __version__
from nprof.commandline import with_own_python
from nprof.errors import NprofError
from nprof.outcome import Outcome

ENV_CACHE = "NPROF_CACHE"
ENV_COMPILE_ONLY = "NPROF_COMPILE_ONLY"
ENV_COMPILE_LOG = "NPROF_COMPILE_LOG"
PROGRAM_FILE = "model.neff"
MANIFEST_FILE = "manifest.json"
TIMING_DIR = "timing"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    base = cache_dir or os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "nprof" / "compile-cache"
    return Path(base).expanduser() / f"nprof-{__version__}"


@dataclass(frozen=True)
class CachedModule:
    path: Path  # the MODULE_<hash> directory
    manifest: dict[str, Any]

    @property
    def program_path(self) -> Path:
        return self.path / PROGRAM_FILE


class CompileCache:
    """One cache root (see module doc)."""

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.root = cache_root(cache_dir)

    def module_dir(self, graph_hash: str) -> Path:
        return self.root / f"MODULE_{graph_hash}"

    def load(self, graph_hash: str) -> Any | None:
        """The cached Program of a graph, or None when it is not (validly) cached."""
        from nprof.program.file import load_program

        path = self.module_dir(graph_hash) / PROGRAM_FILE
        if not path.is_file():
            return None
        try:
            return load_program(path)
        except NprofError:
            return None  # a damaged entry is recompiled and replaced

    def store(self, graph_hash: str, program: Any, manifest: dict[str, Any]) -> Path:
        from nprof.program.file import save_program

        final = self.module_dir(graph_hash)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=self.root))
        except OSError as err:
            raise NprofError(f"cannot write the compile cache {self.root}: {err.strerror}; set {ENV_CACHE}") from err
        try:
            save_program(program, tmp / PROGRAM_FILE)
            (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1))
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)  # a damaged entry being replaced
            os.rename(tmp, final)
        except OSError:
            if not (final / PROGRAM_FILE).is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process stored the same graph first
        return final

    def modules(self) -> list[CachedModule]:
        found: list[CachedModule] = []
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.glob("MODULE_*")):
            try:
                manifest = json.loads((path / MANIFEST_FILE).read_text())
            except (OSError, ValueError):
                continue
            found.append(CachedModule(path, manifest))
        return found


@functools.lru_cache(maxsize=1)
def timing_fingerprint() -> str:
    """A digest of the source of everything that turns a Program into its simulated Profile (see module doc)."""
    from nprof.compiler.graphinfo import source_digest

    return source_digest(("device", "arch", "profile", "compiled.py", "container.py"))


class TimingCache:
    """The simulated Profile of one cached program, on disk beside it (see module doc)."""

    def __init__(self, module_dir: Path) -> None:
        self.module_dir = module_dir
        self._path: Path | None = None

    def path(self, preset: str) -> Path:
        """``timing/<key>.ntff`` of the program file as it is now, simulated on `preset` (a preset name)."""
        if self._path is None:
            from nprof.arch.cost import MODEL_VERSION
            from nprof.arch.presets import get_preset

            h = hashlib.sha256((self.module_dir / PROGRAM_FILE).read_bytes())
            h.update(f"\n{get_preset(preset)!r}\ncost model {MODEL_VERSION}\nnprof {__version__}".encode())
            h.update(f"\n{timing_fingerprint()}".encode())
            self._path = self.module_dir / TIMING_DIR / f"{h.hexdigest()[:24]}.ntff"
        return self._path

    def load(self, preset: str) -> Any | None:
        """The cached Profile, or None (not cached, unreadable, or no program file)."""
        from nprof.profile import Profile

        try:
            path = self.path(preset)
            if not path.is_file():
                return None
            profile = Profile.load(path)
        except (OSError, NprofError):
            return None
        return profile if profile.info.total_time_ns is not None else None

    def store(self, preset: str, profile: Any) -> None:
        """Keep `profile` (atomically); a cache that cannot be written is only slower next time."""
        try:
            path = self.path(preset)
            path.parent.mkdir(exist_ok=True)
            profile.save(path)
        except (OSError, NprofError):
            return


def log_event(module_dir: Path, kind: str, status: str, instructions: int, error: str | None = None) -> None:
    """Append one line to the `nprof compile` log named by $NPROF_COMPILE_LOG (no-op without it)."""
    log = os.environ.get(ENV_COMPILE_LOG)
    if not log:
        return
    event = {"module": str(module_dir), "kind": kind, "status": status, "instructions": instructions}
    if error:
        event["error"] = error
    line = json.dumps(event)
    with open(log, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def compile_command(command: list[str], cache_dir: str | None) -> Outcome:
    """`nprof compile -- <command>`: run it once, compiling every graph into the cache; the listing of the
    modules (`compile_report`) and the command's exit code."""
    root = cache_root(cache_dir)
    with tempfile.TemporaryDirectory(prefix="nprof-compile-") as tmp:
        log = Path(tmp) / "events.jsonl"
        env = dict(os.environ)
        env[ENV_COMPILE_ONLY] = "1"
        env[ENV_COMPILE_LOG] = str(log)
        if cache_dir:
            env[ENV_CACHE] = str(Path(cache_dir).expanduser().resolve())
        start = time.perf_counter()
        try:
            code = subprocess.call(with_own_python(command), env=env)
        except FileNotFoundError:
            raise NprofError(f"cannot run {command[0]!r}: no such program") from None
        except PermissionError:
            raise NprofError(f"cannot run {command[0]!r}: permission denied") from None
        seconds = time.perf_counter() - start
        events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Outcome(compile_report(events, root, seconds, code), code=code)


NO_GRAPH_HINT = (
    "nprof compile: no graph reached the nprof backend: the command ran no torch.compile(..., backend='nprof') "
    "code, or Dynamo traced nothing in it (torch.compile(DDP(nn.Sequential(...))) traces no graph: Dynamo "
    "skips torch.nn's own forward; write DDP(torch.compile(model, backend='nprof')) instead)\n"
)


def compile_report(events: list[dict[str, Any]], root: Path, seconds: float, code: int) -> str:
    """The listing `nprof compile` prints: the graphs the run compiled (or found cached, or failed on) from
    its log `events`, the cache `root`, how to profile one, and the command's exit `code` when not 0."""
    seen: dict[str, dict[str, Any]] = {}
    for ev in events:
        seen.setdefault(ev["module"], ev)
    compiled = sum(1 for e in seen.values() if e["status"] == "compiled")
    cached = sum(1 for e in seen.values() if e["status"] == "cached")
    failed = [e for e in seen.values() if e["status"] == "failed"]
    out = [f"nprof compile: {len(seen)} graph(s) in {seconds:.1f} s: {compiled} compiled, {cached} already cached"]
    out.append(f", {len(failed)} failed\n" if failed else "\n")
    if seen:
        out.append(f"{'MODULE':<32} {'KIND':<10} {'STATUS':<9} {'INSTRUCTIONS':>12}\n")
        for ev in seen.values():
            name = Path(ev["module"]).name
            out.append(f"{name:<32} {ev['kind']:<10} {ev['status']:<9} {ev['instructions']:>12}\n")
        for ev in failed:
            out.append(f"  {Path(ev['module']).name}: {ev.get('error', 'failed')}\n")
    out.append(f"cache: {root}\n")
    if not seen and code == 0:
        out.append(NO_GRAPH_HINT)
    if seen:
        first = next(iter(seen.values()))
        module = Path(first["module"])
        args = f" $(cat {module / 'inputs.args'})" if (module / "inputs.args").is_file() else ""
        out.append(f"profile one: nprof capture -n {module / PROGRAM_FILE} -s profile.ntff{args}\n")
    if code != 0:
        out.append(f"nprof compile: the command exited with code {code}\n")
    return "".join(out)
