"""The last output stores staged into one DMA (`nprof.compiler.tailstage`): outputs bit for bit unchanged.

The reference is the same lowering with the pass off (and eager torch, loosely); every number of staged stores
from 2 to all of them is checked, not only the one the timing model picks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.arch.presets import get_preset  # noqa: E402
from nprof.compiler import packing, tailstage  # noqa: E402
from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.listsched import makespan  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.device import simulate  # noqa: E402


def _lower(fn: object, args: list[torch.Tensor]) -> tuple[object, list[object]]:
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    names = [f"in{i}" for i in range(len(args))]
    n_out = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    return lower_graph(gm, GraphPlan("tail_test", "fw", names, [f"out{i}" for i in range(n_out)]))


def _outputs(program: object, slots: list[object], args: list[torch.Tensor]) -> list[np.ndarray]:
    names = [f"in{i}" for i in range(len(args))]
    inputs = packing.pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    outputs = packing.unpack_outputs(program, simulate(program, inputs, numerics=True).outputs)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots]


def _block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A forward of several saved activations (one transposed, one head-split) and a result."""
    h = torch.relu(x @ w1 + b)
    y = h @ w2
    heads = h.view(16, 4, 8).transpose(0, 1).contiguous()
    return y, h, heads, (h * 2.0).t().contiguous(), y.softmax(-1)


def _args(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 24, generator=gen), torch.randn(24, 32, generator=gen),
            torch.randn(32, 12, generator=gen), torch.randn(32, generator=gen)]  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1])
def test_every_tail_staging_keeps_the_outputs(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _args(seed)
    monkeypatch.setattr(tailstage, "ENABLED", False)
    program, slots = _lower(_block, args)
    assert tailstage.TAIL_NAME not in {t.name for t in program.tensors}
    plain = _outputs(program, slots, args)
    for got, want in zip(plain, _block(*args), strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    found = tailstage.candidates(program)
    assert len(found) >= 4
    for k in range(2, len(found) + 1):
        staged = tailstage.staged(program, found[-k:])
        assert staged is not None
        staged.validate()
        assert len(staged.instructions) == len(program.instructions) + 1  # K copies and one DMA for K stores
        for got, want in zip(_outputs(staged, slots, args), plain, strict=True):
            np.testing.assert_array_equal(got, want)


def test_stage_tail_is_never_slower(monkeypatch: pytest.MonkeyPatch) -> None:
    args = _args(2)
    monkeypatch.setattr(tailstage, "ENABLED", False)
    program, _ = _lower(_block, args)
    monkeypatch.setattr(tailstage, "ENABLED", True)
    chosen = tailstage.stage_tail(program)
    preset = get_preset(program.preset)
    assert makespan(chosen, preset) <= makespan(program, preset)


def test_unpack_tail_writes_each_member_by_its_pattern() -> None:
    """Member values land at offset + p * partition stride + sum(i_k * stride_k), element (p, f) of the
    member's columns j .. j + F on partitions p0 .. p0 + P; other elements keep the device's values."""
    import json

    from nprof.program.model import Program

    table = np.arange(3 * 7, dtype=np.float32).reshape(3, 7)
    layout = [3, 7, [["a", 0, [1, 4, 2, [[2, 2]]], 1, 2], ["b", 2, [0, 1, 3, [[3, 2], [1, 1]]], 0, 3]]]
    program = Program("p", "trn1", (), (), meta={tailstage.TAIL_META: json.dumps(layout)})
    out = tailstage.unpack_tail(program, {tailstage.TAIL_NAME: table.reshape(-1), "a": np.full(10, -1.0),
                                          "b": np.full(9, -1.0)})  # fmt: skip
    want_a = np.full(10, -1.0)
    for p in range(2):
        for f in range(2):
            want_a[1 + p * 4 + f * 2] = table[1 + p, f]
    want_b = np.full(9, -1.0)
    for p in range(3):
        for f in range(2):
            want_b[p + f * 3] = table[p, 2 + f]
    np.testing.assert_array_equal(out["a"], want_a)
    np.testing.assert_array_equal(out["b"], want_b)
    assert tailstage.TAIL_NAME not in out
