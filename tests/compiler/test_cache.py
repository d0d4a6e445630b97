"""Compile cache, unsupported ops and fallback, naming, and `nprof compile -- python train.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS, CompileCache  # noqa: E402
from nprof.compiler.cache import compile_report  # noqa: E402
from nprof.errors import UnsupportedOpError  # noqa: E402
from nprof.program.file import load_program  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 5)
        self.fc2 = torch.nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _run(model: torch.nn.Module, x: torch.Tensor, **options: object) -> torch.Tensor:
    torch._dynamo.reset()
    out = torch.compile(model, backend="nprof", options=options or None)(x)
    out.sum().backward()
    return out


def test_second_compile_hits_the_cache_and_new_shape_compiles(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    STATS.reset()
    _run(model, torch.randn(4, 6), cache_dir=str(tmp_path))
    assert (STATS.compiled, STATS.cache_hits) == (2, 0)
    _run(model, torch.randn(4, 6), cache_dir=str(tmp_path))
    assert (STATS.compiled, STATS.cache_hits) == (2, 2)  # nothing compiled again
    _run(model, torch.randn(7, 6), cache_dir=str(tmp_path))
    assert (STATS.compiled, STATS.cache_hits) == (4, 2)  # a new batch size is a new module
    modules = CompileCache(tmp_path).modules()
    assert len(modules) == 4
    assert {m.manifest["kind"] for m in modules} == {"fw", "bw"}
    for m in modules:
        assert m.path.name.startswith("MODULE_") and m.program_path.is_file()
        assert m.manifest["instructions"] == len(load_program(m.program_path).instructions)
        assert m.manifest["graph"] and m.manifest["inputs"]
        assert (m.path / "inputs.args").is_file()  # the values of the first call, for nprof capture
    fw = next(m for m in modules if m.manifest["kind"] == "fw")
    names = [i["name"] for i in fw.manifest["inputs"]]
    assert {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} <= set(names)
    program = load_program(fw.program_path)
    assert {t.name for t in program.outputs} >= {"output_0"}
    assert not list(tmp_path.glob("*/.MODULE_*"))  # no temporary directories left behind


def test_cached_program_runs_with_saved_inputs(tmp_path: Path) -> None:
    from nprof.device import simulate

    torch.manual_seed(0)
    model = Net()
    x = torch.randn(4, 6)
    out = _run(model, x, cache_dir=str(tmp_path))
    fw = next(m for m in CompileCache(tmp_path).modules() if m.manifest["kind"] == "fw")
    words = (fw.path / "inputs.args").read_text().split()
    inputs = {name: __import__("numpy").load(path) for name, path in zip(words[::2], words[1::2], strict=True)}
    result = simulate(load_program(fw.program_path), inputs)
    torch.testing.assert_close(torch.from_numpy(result.outputs["output_0"]), out.detach(), rtol=1e-5, atol=1e-6)


def test_unsupported_op_names_op_and_source_line() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sort(  # the statement the error must show whole, on one line
            x, dim=0
        ).values * 2.0  # fmt: skip

    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(fn, backend="nprof")(torch.randn(4))
    err = info.value
    while not isinstance(err, UnsupportedOpError) and err.__cause__ is not None:
        err = err.__cause__
    inner = getattr(info.value, "inner_exception", err)
    assert isinstance(inner, UnsupportedOpError)
    message = str(inner)
    assert "'sort'" in message and "\n" not in message
    assert f"{Path(__file__).resolve()}:" in message and "return torch.sort(x, dim=0).values * 2.0" in message


def test_fallback_eager_runs_unsupported_graph_with_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=0).values * 2.0

    x = torch.randn(5)
    for how in ("option", "env"):
        torch._dynamo.reset()
        if how == "env":
            monkeypatch.setenv("NPROF_FALLBACK", "eager")
        options = {"fallback": "eager"} if how == "option" else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(fn, backend="nprof", options=options)(x)
        torch.testing.assert_close(out, fn(x))
        assert any("eagerly" in str(w.message) and "sort" in str(w.message) for w in caught)


def test_unknown_backend_option_is_refused() -> None:
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown nprof backend option 'colour'"):
        torch.compile(lambda x: x + 1, backend="nprof", options={"colour": "red"})(torch.randn(2))


def test_nprof_compile_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "nprof", "compile", "--cache", str(cache), "--",
           sys.executable, str(ROOT / "examples" / "mnist_mlp" / "train.py"), "--steps", "2", "--batch", "4",
           "--hidden", "16"]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "2 graph(s)" in first.stdout and "2 compiled" in first.stdout, first.stdout
    modules = CompileCache(cache).modules()
    assert sorted(m.manifest["kind"] for m in modules) == ["bw", "fw"]
    for m in modules:
        assert m.path.name in first.stdout and str(m.manifest["instructions"]) in first.stdout
        assert json.loads((m.path / "manifest.json").read_text())["module"] == m.path.name
        assert list((m.path / "inputs").glob("*.npy"))
    assert str(CompileCache(cache).root) in first.stdout
    # a second run compiles nothing: replay it in-process (one torch start-up less) through the same log
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("NPROF_COMPILE_ONLY", "1")
    monkeypatch.setenv("NPROF_COMPILE_LOG", str(log))
    monkeypatch.setenv("NPROF_CACHE", str(cache))
    from tests.compiler.test_models import _example

    STATS.reset()
    torch._dynamo.reset()
    _example("mnist_mlp").train(steps=1, batch=4, hidden=16)
    assert (STATS.compiled, STATS.cache_hits) == (0, 2)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(e["status"] for e in events) == ["cached", "cached"]
    assert "0 compiled, 2 already cached" in compile_report(events, cache, 1.0, 0)


def test_shape_change_without_reset_specializes_per_shape(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Net()
    compiled = torch.compile(model, backend="nprof", options={"cache_dir": str(tmp_path)})
    torch._dynamo.reset()
    STATS.reset()
    for batch in (3, 5, 6):  # dynamo turns the batch dim symbolic after the first change
        x = torch.randn(batch, 6)
        model.zero_grad()
        out = compiled(x)
        out.sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).sum().backward()
        torch.testing.assert_close(out.detach(), model(x).detach(), rtol=1e-4, atol=1e-5)
        for g, p in zip(got, model.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    assert STATS.compiled == 6  # a static forward and backward program per batch size


def test_a_flipped_compiler_switch_is_a_new_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a test that turns a lowering off must not be served the Program the switch-on lowering cached (nor the reverse)
    from nprof.compiler import fusion

    torch.manual_seed(0)
    model = Net()
    STATS.reset()
    _run(model, torch.randn(4, 6), cache_dir=str(tmp_path))
    monkeypatch.setattr(fusion, "ENABLED", False)
    _run(model, torch.randn(4, 6), cache_dir=str(tmp_path))
    assert (STATS.compiled, STATS.cache_hits) == (4, 0)
    monkeypatch.setattr(fusion, "ENABLED", True)
    _run(model, torch.randn(4, 6), cache_dir=str(tmp_path))
    assert (STATS.compiled, STATS.cache_hits) == (4, 2)


def test_every_compiler_module_switch_enters_the_graph_hash() -> None:
    import re

    from nprof.compiler.graphinfo import SWITCHES

    found = set()
    for path in (ROOT / "src" / "nprof" / "compiler").rglob("*.py"):
        for name in re.findall(r"^([A-Z_]+) = .*# module switch", path.read_text(), flags=re.M):
            module = path.relative_to(ROOT / "src" / "nprof" / "compiler").with_suffix("").as_posix()
            found.add((module.replace("/", "."), name))
    assert found, "no module switch found: the pattern drifted from the sources"
    assert found <= set(SWITCHES)


def test_compile_report_says_why_when_no_graph_reached_the_backend(tmp_path: Path) -> None:
    empty = compile_report([], tmp_path, 1.0, 0)
    assert "0 graph(s)" in empty and "no graph reached the nprof backend" in empty and "DDP(torch.compile(" in empty
    assert "no graph reached" not in compile_report([], tmp_path, 1.0, 1)  # a failed command explains itself
    ev = {"module": str(tmp_path / "MODULE_x"), "kind": "fw", "status": "compiled", "instructions": 3}
    assert "no graph reached" not in compile_report([ev], tmp_path, 1.0, 0)
