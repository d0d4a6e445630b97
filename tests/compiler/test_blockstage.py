"""Outputs staged as row blocks (`nprof.compiler.blockstage`): one DMA for all of them, values unchanged.

The reference is eager torch on the same graph; a staged program must also move fewer DMAs than the same
lowering with staging off."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from nprof.arch.isa import Opcode  # noqa: E402
from nprof.compiler import blockstage, packing  # noqa: E402
from nprof.compiler.backend import decompositions  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.device import simulate  # noqa: E402


@pytest.fixture(autouse=True)
def _no_tail_staging(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the DMAs of the packs alone: the last stores gathered into one more DMA
    (`nprof.compiler.tailstage`) and front loads merged (`nprof.compiler.prefetch.merge_front_loads`) would
    change both counts."""
    from nprof.compiler import prefetch, tailstage

    monkeypatch.setattr(tailstage, "ENABLED", False)
    monkeypatch.setattr(prefetch, "MERGE_FRONT", False)


def _run(fn: object, args: list[torch.Tensor]) -> tuple[list[np.ndarray], int, object]:
    """(outputs, DMA count, program) of `fn` lowered and simulated with numerics."""
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    names = [f"in{i}" for i in range(len(args))]
    n_out = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    program, slots = lower_graph(gm, GraphPlan("stage_test", "bw", names, [f"grad{i}" for i in range(n_out)]))
    inputs = packing.pack_inputs(program, {n: a.numpy() for n, a in zip(names, args, strict=True)})
    outputs = packing.unpack_outputs(program, simulate(program, inputs, numerics=True).outputs)
    dmas = sum(ins.opcode is Opcode.DMA_DIRECT2D for ins in program.instructions)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots], dmas, program


def _grads(g: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A linear layer's backward shape: weight gradients [R, C] and bias gradients (one row each)."""
    return g.t() @ x, g.sum(0), (g * 2.0).sum(0, keepdim=True), x.t() @ y, (x * x).sum(0)


@pytest.mark.parametrize("rows_max", [1, 128], ids=["rows", "blocks"])
def test_staged_outputs_equal_eager_in_fewer_dmas(rows_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(rows_max)
    g, x, y = torch.randn(40, 24, generator=gen), torch.randn(40, 16, generator=gen), torch.randn(40, 20, generator=gen)
    monkeypatch.setattr(blockstage, "BLOCK_ROWS_MAX", rows_max)
    staged, staged_dmas, program = _run(_grads, [g, x, y])
    monkeypatch.setattr(packing, "ENABLED", False)
    plain, plain_dmas, _ = _run(_grads, [g, x, y])
    for s, p, e in zip(staged, plain, _grads(g, x, y), strict=True):
        np.testing.assert_allclose(s, e.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(s, p)
    assert blockstage.BLOCKS_NAME in {t.name for t in program.tensors}
    assert staged_dmas <= plain_dmas - (2 if rows_max == 1 else 4)


def test_a_staged_output_read_back_is_stored_first() -> None:
    """An output staged as a row and then read by a later kernel with another pattern (a column) is stored
    to its own tensor before the read and unstaged: the read sees its values."""
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(30, 12, generator=gen)

    def fn(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = g.sum(0)
        return s, (g * s).t().sum(1)

    got, _, _ = _run(fn, [g])
    for a, e in zip(got, fn(g), strict=True):
        np.testing.assert_allclose(a, e.numpy(), rtol=1e-5, atol=1e-5)


def test_unpack_blocks_cuts_each_member() -> None:
    """Element (r, c) of a member at column j sits at partition r % P, column j + (r // P) * C + c."""
    import json

    from nprof.program.model import Program

    parts, width = 4, 9
    table = np.arange(parts * width, dtype=np.float32).reshape(parts, width)
    layout = [parts, width, [["a", 0, 6, 2], ["b", 4, 1, 3], ["c", 7, 3, 2]]]
    program = Program("p", "trn1", (), (), meta={blockstage.BLOCKS_META: json.dumps(layout)})
    out = blockstage.unpack_blocks(program, {blockstage.BLOCKS_NAME: table.reshape(-1), "d": np.ones(2)})
    expect_a = np.concatenate([table[:, 0:2], table[:, 2:4]])[:6]
    np.testing.assert_array_equal(out["a"].reshape(6, 2), expect_a)
    np.testing.assert_array_equal(out["b"], table[0, 4:7])
    np.testing.assert_array_equal(out["c"].reshape(3, 2), table[:3, 7:9])
    assert set(out) == {"a", "b", "c", "d"}
