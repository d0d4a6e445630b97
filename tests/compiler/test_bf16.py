"""bf16: autocast regions and bf16 models run bf16 matmuls on TensorE (fp32 PSUM), results equal eager's."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nprof.arch.isa import Opcode  # noqa: E402
from nprof.compiler import CompileCache  # noqa: E402
from nprof.program.file import load_program  # noqa: E402


def _matmul_dtypes(cache: Path) -> dict[str, set[str]]:
    out = {}
    for module in CompileCache(cache).modules():
        program = load_program(module.program_path)
        out[module.manifest["kind"]] = {a.dtype for i in program.instructions if i.opcode is Opcode.MATMUL
                                        for a in i.ins}  # fmt: skip
    return out


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def _compare(eager: torch.nn.Module, device: torch.nn.Module, run: object, x: torch.Tensor) -> None:
    expected = run(eager, x)  # type: ignore[operator]
    got = run(device, x)  # type: ignore[operator]
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=1e-2)
    weights = torch.randn(expected.shape)
    (expected.float() * weights).sum().backward()
    (got.float() * weights).sum().backward()
    for (name, pe), (_, pd) in zip(eager.named_parameters(), device.named_parameters(), strict=True):
        assert pd.grad.dtype == pe.grad.dtype, name
        torch.testing.assert_close(pd.grad.float(), pe.grad.float(), rtol=2e-2, atol=1e-2, msg=name)


def test_autocast_runs_bf16_matmuls_forward_and_backward(tmp_path: Path) -> None:
    def run(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)

    eager, dev = _net(), _net()
    torch._dynamo.reset()
    compiled = torch.compile(dev, backend="nprof", options={"cache_dir": str(tmp_path)})
    _compare(eager, compiled, run, torch.randn(8, 16, generator=torch.Generator().manual_seed(1)))
    dtypes = _matmul_dtypes(tmp_path)
    assert dtypes["fw"] == {"bfloat16"}
    assert "bfloat16" in dtypes["bw"]


def test_bf16_model_runs_bf16_matmuls(tmp_path: Path) -> None:
    eager, dev = _net().bfloat16(), _net().bfloat16()
    torch._dynamo.reset()
    compiled = torch.compile(dev, backend="nprof", options={"cache_dir": str(tmp_path)})
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).bfloat16()
    _compare(eager, compiled, lambda m, x: m(x), x)
    assert _matmul_dtypes(tmp_path)["fw"] == {"bfloat16"}
