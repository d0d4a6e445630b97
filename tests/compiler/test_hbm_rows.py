"""Small planes moved batch-major (`kernels.hbm_rows`): the channel-major tiles `hbm.load` returns and the HBM
contents `hbm.store` leaves are the direct DMA's, on random [N, C, S] tensors (more than 128 channels, odd sizes,
1x1 and 2x2 planes); the DMAs have one run per image; compiled conv / batch norm / ReLU / add on small planes
equal eager's, forward and backward."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nprof.arch.cost import dma_chunks  # noqa: E402
from nprof.arch.isa import Access, Opcode, Space  # noqa: E402
from nprof.arch.presets import get_preset  # noqa: E402
from nprof.compiler.kernels import hbm, hbm_rows  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.nki import language as nl  # noqa: E402
from nprof.nki.trace import ProgramBuilder  # noqa: E402

from .conftest import check_fn  # noqa: E402

PLANES = {"load": [(8, 512, 1), (2, 130, 4), (5, 64, 2), (3, 7, 3), (128, 4, 1)], "store": [(8, 512, 1), (128, 4, 1),
          (6, 200, 1)]}  # fmt: skip


def _channels(name: str, n: int, c: int, s: int, c0: int, cc: int) -> Access:
    """Channels c0..c0+cc of the [n, c, s] tensor `name`, channel-major: [cc, n, s]."""
    return Access(Space.HBM, name, "float32", c0 * s, cc, ((c * s, n), (1, s)), 0, s)


def _copied(shape: tuple[int, int, int], through_rows: str) -> tuple[np.ndarray, np.ndarray, object]:
    """(x, y, program): y is x copied channel block by block, `through_rows` ("load" or "store") moved by
    `hbm.load` / `hbm.store`, the other side by a direct DMA."""
    n, c, s = shape
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    builder = ProgramBuilder("rows_test")
    builder.hbm_tensor("x", shape, "float32", "input")
    builder.hbm_tensor("y", shape, "float32", "output")

    def kernel() -> None:
        for c0 in range(0, c, 128):
            cc = min(128, c - c0)
            src, dst = _channels("x", n, c, s, c0, cc), _channels("y", n, c, s, c0, cc)
            if through_rows == "load":
                nl.store(hbm.window(dst), value=hbm.load(src))
            else:
                hbm.store(dst, nl.load(hbm.window(src)))

    builder.call(kernel)
    program = builder.build()
    y = np.asarray(simulate(program, {"x": x}).outputs["y"]).reshape(shape)
    return x, y, program


@pytest.mark.parametrize(("side", "shape"), [(side, shape) for side, shapes in PLANES.items() for shape in shapes])
def test_moved_batch_major_are_the_direct_dmas_values(shape: tuple[int, int, int], side: str) -> None:
    x, y, program = _copied(shape, side)
    np.testing.assert_array_equal(y, x)
    transposes = [i for i in program.instructions if i.opcode is Opcode.TRANSPOSE]  # type: ignore[attr-defined]
    assert len(transposes) == shape[2] * -(-shape[1] // 128)  # the path was taken: S per channel block
    dmas = [i for i in program.instructions if i.opcode is Opcode.DMA_DIRECT2D]  # type: ignore[attr-defined]
    hbm_side = [d.outs[0] if d.outs[0].space is Space.HBM else d.ins[0] for d in dmas]
    rows = [d for d, a in zip(dmas, hbm_side, strict=True) if a.partition_stride == shape[1] * shape[2] > 1]
    assert len(rows) == -(-shape[1] // 128)  # one batch-major DMA per channel block, one run per image
    assert all(dma_chunks(d.ins[0], d.outs[0]) == shape[0] for d in rows)


@pytest.mark.parametrize("side", ["load", "store"])
def test_larger_planes_split_over_psum_banks(side: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planes beyond the default limits (a 4x4 plane: a store's [N, C' * S] needs 4 PSUM banks) move right too."""
    monkeypatch.setitem(hbm_rows.MAX_PLANE, side, 16)
    x, y, program = _copied((4, 128, 16), side)
    np.testing.assert_array_equal(y, x)
    assert sum(i.opcode is Opcode.TRANSPOSE for i in program.instructions) == 16 * (4 if side == "store" else 1)


def test_plan_takes_only_small_channel_major_planes() -> None:
    preset = get_preset("trn1")
    for side in ("load", "store"):
        assert hbm_rows.plan(_channels("x", 8, 512, 1, 0, 128), preset, side) is not None
        assert hbm_rows.plan(_channels("x", 8, 128, 16, 0, 128), preset, side) is None  # plane > MAX_PLANE
        assert hbm_rows.plan(_channels("x", 1, 512, 1, 0, 128), preset, side) is None  # one image: one run
        assert hbm_rows.plan(_channels("x", 200, 64, 1, 0, 64), preset, side) is None  # > 128 images
        contiguous = Access(Space.HBM, "x", "float32", 0, 128, ((1, 64),), 0, 64)
        assert hbm_rows.plan(contiguous, preset, side) is None  # rows already contiguous
        bf16 = Access(Space.HBM, "x", "bfloat16", 0, 128, ((512, 8), (1, 1)), 0, 1)
        assert hbm_rows.plan(bf16, preset, side) is None
        # one value a tap of a depthwise weight [8, 1, 7, 7], broadcast to 10 partitions (partition stride 0):
        # no channels on the partitions, so moving it "batch-major" would read past the tensor (a ConvNeXt
        # block's backward did)
        broadcast = Access(Space.HBM, "w", "float32", 48, 10, ((0, 1), (49, 8), (0, 1)), 0, 0)
        assert hbm_rows.plan(broadcast, preset, side) is None
    assert hbm_rows.plan(_channels("x", 8, 256, 4, 128, 128), preset, "load") is not None
    assert hbm_rows.plan(_channels("x", 8, 256, 4, 128, 128), preset, "store") is None  # measured slower


@pytest.mark.parametrize(("n", "c", "size"), [(4, 130, 1), (3, 32, 2), (6, 20, 1)])
def test_compiled_small_planes_equal_eager_forward_and_backward(n: int, c: int, size: int) -> None:
    gen = torch.Generator().manual_seed(n * c + size)
    x = torch.randn(n, c, size, size, generator=gen, requires_grad=True)
    w = torch.randn(c, c, 1, 1, generator=gen, requires_grad=True)
    gamma = torch.randn(c, generator=gen, requires_grad=True)
    beta = torch.randn(c, generator=gen, requires_grad=True)

    running = (torch.zeros(c), torch.ones(c))

    def fn(x, w, gamma, beta):  # type: ignore[no-untyped-def]
        y = torch.nn.functional.conv2d(x, w)
        z = torch.nn.functional.batch_norm(y, *(r.clone() for r in running), gamma, beta, training=True)
        return torch.relu(z + x)

    check_fn(fn, x, w, gamma, beta, atol=1e-4)
