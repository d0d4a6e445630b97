"""Convolutions over image sizes and batches: every lowering either succeeds or refuses clearly (never an
internal compiler error such as "SBUF over capacity"), a few compared with eager; and the kernels' optional
SBUF stages are chosen against what the allocator can place (fragmentation included)."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nprof.compiler.lowerings  # noqa: E402, F401  (registers every lowering, ops_conv among them)
from nprof.compiler.kernels import conv_taps  # noqa: E402
from nprof.compiler.lower import GraphPlan, lower_graph  # noqa: E402
from nprof.compiler.packing import pack_inputs, unpack_outputs  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.errors import UnsupportedOpError  # noqa: E402
from nprof.nki.alloc import Allocator, OutOfMemory  # noqa: E402

aten = torch.ops.aten

# name -> (in channels, out channels, kernel, stride, padding): resnet18's stem and its ordinary convolutions
GEOMETRIES = {
    "stem": (3, 64, 7, 2, 3),
    "3x3": (64, 64, 3, 1, 1),
    "3x3s2": (64, 128, 3, 2, 1),
    "1x1s2": (64, 128, 1, 2, 0),
}
# (geometry, image side, batch): the stem and the strided ones over 16..96 and 1..8; the stride-1 3x3 (the
# slowest to lower) over fewer
SWEEP = [(g, side, batch) for g in ("stem", "3x3s2", "1x1s2") for side in (16, 40, 64, 96) for batch in (1, 3, 8)]
SWEEP += [("3x3", side, batch) for side in (16, 40, 64) for batch in (1, 2)] + [("3x3", 96, 1)]


def _graph(name: str, side: int, batch: int, part: str) -> tuple[object, list[torch.Tensor]]:
    """The aten graph of one part ("forward", or "backward": the weight gradient, with the input gradient
    unless the stem, whose input is the image) of a convolution, and random inputs for it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    c, oc, k, s, p = GEOMETRIES[name]
    gen = torch.Generator().manual_seed(side * 10 + batch)
    x, w = torch.randn(batch, c, side, side, generator=gen), torch.randn(oc, c, k, k, generator=gen) * 0.1
    if part == "forward":

        def forward(x: torch.Tensor, w: torch.Tensor) -> tuple:
            return (aten.convolution.default(x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1),)

        return make_fx(forward)(x, w), [x, w]
    o = (side + 2 * p - k) // s + 1
    g = torch.randn(batch, oc, o, o, generator=gen)
    mask = [name != "stem", True, False]

    def backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple:
        r = aten.convolution_backward.default(g, x, w, [0], [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)
        return tuple(t for t in r if t is not None)

    return make_fx(backward)(g, x, w), [g, x, w]


def _lower(gm: object, args: list[torch.Tensor]) -> tuple:
    names = [f"in{i}" for i in range(len(args))]
    n_out = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])  # type: ignore[attr-defined]
    return lower_graph(gm, GraphPlan("conv_sweep", "inference", names, [f"out{i}" for i in range(n_out)]))


@pytest.mark.parametrize("case", SWEEP, ids=[f"{g}-{s}px-b{b}" for g, s, b in SWEEP])
def test_conv_lowers_or_refuses_clearly(case: tuple[str, int, int]) -> None:
    for part in ("forward", "backward"):
        gm, args = _graph(*case, part)
        try:
            _lower(gm, args)
        except UnsupportedOpError as err:  # the clear refusal (the backend's fallback, or one line)
            assert "internal compiler error" not in str(err)


def _simulated(gm: object, args: list[torch.Tensor]) -> list[np.ndarray]:
    program, slots = _lower(gm, args)
    inputs = pack_inputs(program, {f"in{i}": a.numpy() for i, a in enumerate(args)})
    outputs = unpack_outputs(program, simulate(program, inputs, numerics=True).outputs)
    return [np.asarray(outputs[s.name]).reshape(s.shape) for s in slots]


def _matches_eager(name: str, side: int, batch: int) -> None:
    for part in ("forward", "backward"):
        gm, args = _graph(name, side, batch, part)
        want = gm(*args)  # type: ignore[operator]
        for got, ref in zip(_simulated(gm, args), want, strict=True):
            np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [("stem", 16, 2), ("3x3s2", 16, 3), ("1x1s2", 16, 2)])
def test_swept_conv_matches_eager(case: tuple[str, int, int]) -> None:
    _matches_eager(*case)


def test_stem_without_room_for_its_stages_matches_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fragmented SBUF with no free range for a stage (resnet18 at 64x64, batch 2: a 30732-byte stage with
    63564 bytes live) moves the taps' windows by strided DMAs instead: same values."""
    asked: list[int] = []

    def no_room(nbytes: int) -> bool:
        asked.append(nbytes)
        return False

    monkeypatch.setattr(conv_taps, "placeable", no_room)
    _matches_eager("stem", 16, 2)
    assert asked  # the stages were asked for, and refused


def test_placeable_agrees_with_alloc_on_random_fragmentation() -> None:
    """`Allocator.placeable(size)` is True exactly when `alloc(size)` would succeed (the reference: try it
    on a copy), over random allocate/free sequences that fragment the memory."""
    rng = random.Random(0)
    for _ in range(40):
        a = Allocator(4096, align=64)
        live: list[int] = []
        for _ in range(rng.randint(5, 60)):
            if live and rng.random() < 0.4:
                a.free(live.pop(rng.randrange(len(live))))
                continue
            try:
                live.append(a.alloc(rng.randint(1, 600)))
            except OutOfMemory:
                pass
        for size in (1, 64, 100, 500, 1000, 2000, 4096, 5000):
            trial = copy.deepcopy(a)
            try:
                trial.alloc(size)
                ok = True
            except OutOfMemory:
                ok = False
            assert a.placeable(size) is ok, (size, a.used)
