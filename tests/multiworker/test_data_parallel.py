"""A data-parallel MLP step compiled through torch.compile (gloo, one process) becomes CC instructions.

The example's step (forward, backward via torch.func, six gradient all-reduces through torch.distributed
functional collectives, SGD) is traced in a single process whose gloo group has one rank, with the 1/world
scale of a 2-worker job; the compiled program then runs on 2 simulated workers with different batches and
must match eager data-parallel SGD (the average of the two ranks' gradients), and captures for 32 workers.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device.workers import simulate_workers  # noqa: E402
from nprof.program.file import load_program  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data_parallel" / "train_dp.py"
BATCH = 8
LR = 0.05


def _example():
    spec = importlib.util.spec_from_file_location("train_dp_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["train_dp_example"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("dp")
    mp = pytest.MonkeyPatch()
    mp.setenv("NPROF_CACHE", str(tmp / "cache"))
    ex = _example()
    dist.init_process_group("gloo", init_method=f"file://{tmp / 'rdv'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = ex.MLP()
        step = ex.make_step(model, world=2, lr=LR)
        images, labels = ex.synthetic_mnist(2 * BATCH, seed=0)
        params = [p.detach().clone() for p in model.parameters()]
        step(images[:BATCH], labels[:BATCH], *params)
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()
        mp.undo()
    (neff,) = (tmp / "cache").rglob("model.neff")
    return ex, model, params, images, labels, load_program(neff)


def test_step_compiles_to_cc_instructions(compiled) -> None:
    *_, program = compiled
    ar = [i for i in program.instructions if i.opcode.value == "ALL_REDUCE"]
    assert len(ar) == 6  # one per parameter gradient
    assert all(i.engine.value == "cc" and "_c10d_functional.all_reduce" in (i.hlo_name or "") for i in ar)
    assert len({i.queue for i in ar}) > 1  # spread over CC-cores
    assert {i.attr("traced_world") for i in ar} == {1}  # traced on a one-rank gloo group
    assert any(i.opcode.value == "MATMUL" for i in program.instructions)


def test_two_workers_match_eager_data_parallel_sgd(compiled) -> None:
    _ex, model, params, images, labels, program = compiled
    names = [n for n, _ in model.named_parameters()]
    inputs = {}
    for r in range(2):
        feed = {f"flat.{k}": p.numpy() for k, p in enumerate(params)}
        feed["x"] = images[r * BATCH : (r + 1) * BATCH].numpy()
        feed["y"] = labels[r * BATCH : (r + 1) * BATCH].numpy().astype(np.int32)
        inputs[r] = pack_inputs(program, feed)  # the compiler packs the small inputs (biases) into one tensor
    job = simulate_workers(program, inputs, world_size=2)

    def loss_fn(ps, x, y):
        return torch.nn.functional.nll_loss(torch.func.functional_call(model, ps, (x,)), y)

    grads = []
    for r in range(2):
        ps = dict(zip(names, params, strict=True))
        grads.append(
            torch.func.grad(loss_fn)(ps, images[r * BATCH : (r + 1) * BATCH], labels[r * BATCH : (r + 1) * BATCH])
        )
    outs, outs1 = (unpack_outputs(program, job.results[r].outputs) for r in range(2))  # small outputs: packed
    for k, n in enumerate(names):
        want = params[k] - LR * (grads[0][n] + grads[1][n]) / 2
        got = outs[f"output_{k + 1}"].reshape(want.shape)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(outs1[f"output_{k + 1}"], outs[f"output_{k + 1}"])


def test_thirty_two_worker_capture(compiled, tmp_path: Path) -> None:
    from nprof.capture.multiworker import capture_workers
    from nprof.program.file import save_program

    *_, program = compiled
    neff = save_program(program, tmp_path / "model.neff")
    paths, job = capture_workers(neff, tmp_path / "output", workers_per_node=32, timing_only=True)
    assert len(paths) == 32 and len(job.ops) == 6
    assert all(len(op.ranks) == 32 for op in job.ops)
