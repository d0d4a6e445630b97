"""The compile cache never serves a stale result: the simulated-timing cache (`cache.TimingCache`) and the
program cache miss on every change that decides them (model, shape, dtype, preset, nprof version, cost model,
the simulator's source), and a hit gives what a fresh simulation gives."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import nprof.compiler.cache as cache_mod  # noqa: E402
from nprof.arch import presets  # noqa: E402
from nprof.compiler import STATS, CompileCache, graphinfo  # noqa: E402
from nprof.compiler.cache import PROGRAM_FILE, TimingCache, timing_fingerprint  # noqa: E402
from nprof.compiler.graphinfo import compiler_fingerprint  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.program.file import load_program  # noqa: E402

SRC = Path(cache_mod.__file__).resolve().parents[1]


def _net(hidden: int = 5, act: object = torch.tanh) -> torch.nn.Module:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(6, hidden), torch.nn.Linear(hidden, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(act(self.fc1(x)))

    torch.manual_seed(0)
    return Net()


def _step(model: torch.nn.Module, x: torch.Tensor, cache: Path, **options: object) -> torch.Tensor:
    """One training step (forward + backward) through a fresh Dynamo, as a new process would run it."""
    torch._dynamo.reset()
    STATS.reset()
    out = torch.compile(model, backend="nprof", options={"cache_dir": str(cache), **options})(x)
    out.sum().backward()
    return out


def test_second_process_reads_the_timing_and_gets_the_same_profile(tmp_path: Path) -> None:
    x = torch.randn(4, 6)
    _step(_net(), x, tmp_path)
    assert (STATS.compiled, STATS.timing_hits) == (2, 0)
    first = {m: (p, dict(STATS.device_ns)[m]) for m, p in STATS.last_profile.items()}
    files = sorted(tmp_path.glob("*/MODULE_*/timing/*.ntff"))
    assert len(files) == 2
    _step(_net(), x, tmp_path)
    assert (STATS.compiled, STATS.cache_hits, STATS.timing_hits) == (0, 2, 2)
    assert sorted(tmp_path.glob("*/MODULE_*/timing/*.ntff")) == files  # nothing simulated again
    for module, profile in STATS.last_profile.items():
        fresh, ns = first[module]
        assert dict(STATS.device_ns)[module] == ns == profile.total_time_ns
        for name in ("instructions", "dma", "collectives", "counters"):
            assert profile.table(name).equals(fresh.table(name)), name
        assert dataclasses.replace(profile.info, created="") == dataclasses.replace(fresh.info, created="")


def test_a_damaged_timing_entry_is_simulated_again(tmp_path: Path) -> None:
    x = torch.randn(4, 6)
    _step(_net(), x, tmp_path)
    expected = sorted(STATS.device_ns)
    for path in tmp_path.glob("*/MODULE_*/timing/*.ntff"):
        path.write_bytes(b"not a profile")
    _step(_net(), x, tmp_path)
    assert STATS.timing_hits == 0 and sorted(STATS.device_ns) == expected
    _step(_net(), x, tmp_path)
    assert STATS.timing_hits == 2  # rewritten whole


@pytest.mark.parametrize(
    "change",
    ["model", "width", "shape", "dtype", "preset", "nprof version"],
)
def test_every_change_that_decides_a_program_misses_both_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    x = torch.randn(4, 6)
    _step(_net(), x, tmp_path)
    assert STATS.compiled == 2
    model, options = _net(), {}
    if change == "model":
        model = _net(act=torch.sigmoid)
    elif change == "width":
        model = _net(hidden=7)
    elif change == "shape":
        x = torch.randn(5, 6)
    elif change == "dtype":
        model, x = model.double(), x.double()
    elif change == "preset":
        options = {"preset": "trn2"}
    else:
        monkeypatch.setattr(cache_mod, "__version__", "999.0")
        monkeypatch.setattr("nprof.compiler.graphinfo.__version__", "999.0")
    out = _step(model, x, tmp_path, **options)
    assert (STATS.compiled, STATS.cache_hits, STATS.timing_hits) == (2, 0, 0), change
    torch.testing.assert_close(out.detach(), model(x).detach(), rtol=1e-4, atol=1e-5)


def _program_dir(tmp_path: Path) -> Path:
    """A module directory holding one compiled program (the forward of the small net)."""
    _step(_net(), torch.randn(4, 6), tmp_path)
    return next(m.path for m in CompileCache(tmp_path).modules() if m.manifest["kind"] == "fw")


def test_the_timing_key_covers_program_preset_cost_model_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _program_dir(tmp_path)
    preset = load_program(module / PROGRAM_FILE).preset
    base = TimingCache(module).path(preset)
    assert base.is_file()
    assert TimingCache(module).path(preset) == base  # stable
    assert TimingCache(module).path("trn2" if preset != "trn2" else "trn1") != base
    changed = dataclasses.replace(presets.PRESETS[preset], dma_latency_ns=presets.PRESETS[preset].dma_latency_ns + 1)
    with monkeypatch.context() as m:
        m.setitem(presets.PRESETS, preset, changed)  # same name, other values
        assert TimingCache(module).path(preset) != base
    with monkeypatch.context() as m:
        m.setattr("nprof.arch.cost.MODEL_VERSION", "999")
        assert TimingCache(module).path(preset) != base
    with monkeypatch.context() as m:
        m.setattr(cache_mod, "__version__", "999.0")
        assert TimingCache(module).path(preset) != base
    with monkeypatch.context() as m:
        m.setattr(cache_mod, "timing_fingerprint", lambda: "other source")
        assert TimingCache(module).path(preset) != base
    program = module / PROGRAM_FILE
    program.write_bytes(program.read_bytes() + b"\0")  # any other program bytes
    assert TimingCache(module).path(preset) != base
    assert TimingCache(module).load(preset) is None


@pytest.mark.parametrize(
    ("fingerprint", "edits"),
    [
        (timing_fingerprint, ("device/schedule.py", "arch/cost.py", "profile/model.py", "compiled.py", "container.py")),
        (compiler_fingerprint, ("compiler/fusion.py", "nki/deps.py", "arch/presets.py", "program/model.py")),
    ],
)
def test_the_fingerprints_cover_the_source_they_depend_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fingerprint: Any, edits: tuple[str, ...]
) -> None:
    root = tmp_path / "nprof"
    for package in ("device", "arch", "profile", "compiler", "nki", "program"):
        shutil.copytree(SRC / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    for module in ("compiled.py", "container.py"):
        shutil.copy(SRC / module, root / module)
    monkeypatch.setattr(graphinfo, "__file__", str(root / "compiler" / "graphinfo.py"))
    digests = []
    try:
        for edit in (None, *edits):
            if edit is not None:
                path = root / edit
                path.write_text(path.read_text() + "\n# changed\n")
            fingerprint.cache_clear()
            digests.append(fingerprint())
    finally:
        fingerprint.cache_clear()
    assert len(set(digests)) == len(digests)


def test_a_cached_timing_equals_a_fresh_simulation(tmp_path: Path) -> None:
    module = _program_dir(tmp_path)
    program = load_program(module / PROGRAM_FILE)
    cached = TimingCache(module).load(program.preset)
    fresh = simulate(program, None, numerics=False)
    assert cached is not None and cached.total_time_ns == fresh.latencies_ns[-1]
    assert cached.instructions.equals(fresh.profile.instructions)
    assert cached.dma.equals(fresh.profile.dma)
