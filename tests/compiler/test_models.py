"""Whole models through the nprof backend: the MNIST MLP (training curve, profile) and the ViT block."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
duckdb = pytest.importorskip("duckdb")

from nprof.compiler import STATS  # noqa: E402
from tests.compiler.conftest import check_module  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"nprof_example_{name}", EXAMPLES / name / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_mlp_training_curve_matches_eager() -> None:
    mlp = _example("mnist_mlp")
    torch._dynamo.reset()
    device = mlp.train(steps=20, batch=8, hidden=32)
    eager = mlp.train(steps=20, batch=8, hidden=32, backend=None)
    assert device == pytest.approx(eager, rel=1e-4)
    assert device[-1] < device[0]  # it really trains


def _tail_members(module: str) -> set[str]:
    """The outputs the program of `module` stores through `tailstage.TAIL_NAME`."""
    import json

    from nprof.compiler import CompileCache, tailstage
    from nprof.program.file import load_program

    entry = next(m for m in CompileCache().modules() if module.startswith(m.path.name))
    layout = json.loads(load_program(entry.program_path).meta.get(tailstage.TAIL_META, "[0, 0, []]"))
    return {str(member[0]) for member in layout[2]}


def test_mlp_profile_engines_dma_and_layers() -> None:
    mlp = _example("mnist_mlp")
    torch._dynamo.reset()
    STATS.reset()
    mlp.train(steps=1, batch=8, hidden=32)
    assert len(STATS.last_profile) == 2  # forward and backward graphs
    for module, profile in STATS.last_profile.items():
        ins = profile.instructions
        dma = profile.dma  # noqa: F841
        engines = dict(duckdb.sql("select opcode, list(distinct engine) from ins group by opcode").fetchall())
        assert engines["MATMUL"] == ["tensor"], module
        assert engines.get("ACTIVATE", ["scalar"]) == ["scalar"], module
        assert set(engines.get("TENSOR_TENSOR", ["vector"])) <= {"vector", "gpsimd"}, module  # compiler.balance
        unlabeled = duckdb.sql("select count(*) from ins where layer is null or hlo_name is null").fetchall()
        assert unlabeled == [(0,)], module
        layers = {row[0] for row in duckdb.sql("select distinct layer from ins").fetchall()}
        assert {"model.fc1", "model.fc2", "model.fc3"} <= layers, (module, layers)
        moved = {row[0] for row in duckdb.sql("select distinct tensor from dma").fetchall()}
        declared = {t.name for t in profile.info.tensors}
        tail = _tail_members(module)  # outputs whose last store went out in the tail pack (compiler.tailstage)
        assert declared <= moved | tail, (module, declared - moved - tail)  # a DMA for every input/output tensor
        spills = duckdb.sql("select count(*) filter (is_spill), count(*) filter (is_reload) from dma").fetchall()[0]
        if module == next(iter(STATS.last_profile)):  # forward: fusion keeps every intermediate in SBUF
            assert spills == (0, 0), (module, spills)
        else:  # backward: the saves left (if any) are read back (no dead save survives), fewer than one per node
            assert spills[0] == spills[1] < 16, (module, spills)
        assert profile.total_time_ns > 0
    fw = STATS.last_profile[next(iter(STATS.last_profile))]
    ins = fw.instructions  # noqa: F841
    relu = duckdb.sql("select engine from ins where hlo_name like '%= relu(%' and opcode = 'ACTIVATE'").fetchall()
    assert relu and all(e == ("scalar",) for e in relu)


def test_vit_block_forward_and_gradients() -> None:
    vit = _example("vit_block")
    images, _ = vit.synthetic_images(2)
    check_module(vit.TinyViT, images)


def test_vit_training_matches_eager() -> None:
    vit = _example("vit_block")
    torch._dynamo.reset()
    device = vit.train(steps=2, batch=4)
    eager = vit.train(steps=2, batch=4, backend=None)
    assert device == pytest.approx(eager, rel=1e-4)


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 6, 3, stride=2, dilation=1)
        self.fc = torch.nn.Linear(6 * 3 * 3, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def test_conv2d_cnn_forward_and_gradients() -> None:
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(5)).requires_grad_(True)
    check_module(SmallCNN, x)


def test_batchnorm_cnn_training_and_eval() -> None:
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 2),
        )  # fmt: skip

    device, eager = make(), make()
    x = torch.randn(4, 2, 6, 6, generator=torch.Generator().manual_seed(6))
    torch._dynamo.reset()
    step = torch.compile(device, backend="nprof")
    for _ in range(2):  # training mode: batch statistics, running stats updated in place
        out_d, out_e = step(x), eager(x)
        torch.testing.assert_close(out_d, out_e, rtol=1e-4, atol=1e-5)
        out_d.sum().backward()
        out_e.sum().backward()
    for (name, pd), pe in zip(device.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(pd.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(device[1].running_mean, eager[1].running_mean)
    torch.testing.assert_close(device[1].running_var, eager[1].running_var)
    device.eval()
    eager.eval()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(device, backend="nprof")(x), eager(x), rtol=1e-4, atol=1e-5)
