"""Functional collectives traced with a 4-rank (fake) process group lower to CC instructions that compute right."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.device.workers import simulate_workers  # noqa: E402
from nprof.errors import UnsupportedOpError  # noqa: E402


@pytest.fixture(scope="module")
def fake_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _trace(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*args)


def test_gather_scatter_reduce_on_four_workers(fake_world) -> None:
    import torch.distributed._functional_collectives as funcol

    def step(x):
        a = torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_gather_into_tensor(x, 4, "0"))
        b = torch.ops._c10d_functional.wait_tensor(
            torch.ops._c10d_functional.reduce_scatter_tensor(a * 2, "sum", 4, "0")
        )
        return a, funcol.all_reduce(b, "max", fake_world)

    gm = _trace(step, torch.randn(4, 8))
    program, _ = lower_graph(gm, GraphPlan("cc4", "inference", ["x"], ["a", "c"]))
    cc = [(i.opcode.value, i.attr("group"), i.attr("op")) for i in program.instructions if i.engine.value == "cc"]
    assert cc == [("ALL_GATHER", (0, 1, 2, 3), None), ("REDUCE_SCATTER", (0, 1, 2, 3), "add"),
                  ("ALL_REDUCE", None, "maximum")]  # fmt: skip
    rng = np.random.default_rng(0)
    xs = {r: {"x": rng.standard_normal((4, 8)).astype(np.float32)} for r in range(4)}
    job = simulate_workers(program, xs, world_size=4)
    gathered = np.concatenate([xs[r]["x"] for r in range(4)])
    want_c = np.max([8 * xs[r]["x"] for r in range(4)], axis=0)
    for r in range(4):
        np.testing.assert_array_equal(job.results[r].outputs["a"], gathered)
        np.testing.assert_allclose(job.results[r].outputs["c"], want_c, rtol=1e-6)


def test_avg_is_refused(fake_world) -> None:
    import torch.distributed._functional_collectives as funcol

    gm = _trace(lambda x: funcol.all_reduce(x, "avg", fake_world), torch.randn(4, 4))
    with pytest.raises(UnsupportedOpError, match="'avg'"):
        lower_graph(gm, GraphPlan("avg", "inference", ["x"], ["y"]))
