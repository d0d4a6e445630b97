"""`exchange_collective` between 3 real processes (gloo) gives each rank the bits of the device model's
`combine` (float64 in rank order), on data whose float64 sums depend on the order; and its traffic per rank does
not grow with the number of ranks (counted on the requests it makes, not timed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.arch.isa import Opcode
from nprof.device.collectives import combine

torch = pytest.importorskip("torch")

WORLD = 3
CASES = [(Opcode.ALL_REDUCE, "add", 301), (Opcode.ALL_REDUCE, "maximum", 7), (Opcode.REDUCE_SCATTER, "add", 12),
         (Opcode.ALL_REDUCE, "multiply", 5), (Opcode.ALL_GATHER, "add", 6), (Opcode.ALL_TO_ALL, "add", 9)]  # fmt: skip


def _data(rank: int, size: int) -> np.ndarray:
    """float32 values over 60 binary orders of magnitude: their float64 sums round, so order shows."""
    rng = np.random.default_rng(100 + rank)
    return (rng.standard_normal(size) * 2.0 ** rng.integers(-30, 30, size)).astype(np.float32)


def _worker(rank: int, store: str, out_dir: str) -> None:
    import torch.distributed as dist

    from nprof.device.exchange_data import exchange_collective

    dist.init_process_group("gloo", store=dist.FileStore(store, WORLD), rank=rank, world_size=WORLD)
    try:
        results = {}
        for k, (opcode, op, size) in enumerate(CASES):
            results[str(k)] = exchange_collective(dist.group.WORLD, rank, WORLD, opcode, op, _data(rank, size),
                                                  lambda work: work.wait())  # fmt: skip
        np.savez(Path(out_dir) / f"rank{rank}.npz", **results)
    finally:
        dist.destroy_process_group()


def test_three_processes_get_the_device_models_bits(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    got = [np.load(tmp_path / f"rank{r}.npz") for r in range(WORLD)]
    differs = 0
    for k, (opcode, op, size) in enumerate(CASES):
        inputs = [_data(r, size) for r in range(WORLD)]
        per_rank = {Opcode.REDUCE_SCATTER: size // WORLD, Opcode.ALL_GATHER: size * WORLD}.get(opcode, size)
        want = combine(opcode, op, inputs, [per_rank] * WORLD)
        for r in range(WORLD):
            mine = got[r][str(k)]
            assert mine.shape == want[r].shape, (opcode, r)
            np.testing.assert_array_equal(mine.astype(np.float64), want[r], err_msg=f"{opcode} {op} rank {r}")
        if op == "add" and opcode is Opcode.ALL_REDUCE:
            reverse = np.add(np.add(inputs[2].astype(np.float64), inputs[1]), inputs[0])
            differs += int(np.sum(reverse != want[0]))
    assert differs > 0  # the data is one on which another summation order gives other bits


class _Counting:
    """A stand-in for torch.distributed's point-to-point and collective calls that counts elements sent."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world, self.sent = rank, world, 0

    def isend(self, tensor, dst, group):  # type: ignore[no-untyped-def]
        self.sent += tensor.numel()

    def irecv(self, tensor, src, group):  # type: ignore[no-untyped-def]
        tensor.zero_()

    def scatter(self, out, pieces, src, group, async_op):  # type: ignore[no-untyped-def]
        if pieces is not None:
            self.sent += sum(p.numel() for i, p in enumerate(pieces) if i != self.rank)

    def all_gather(self, out, tensor, group, async_op):  # type: ignore[no-untyped-def]
        self.sent += tensor.numel() * (self.world - 1)  # what each rank forwards in a ring all-gather
        for o in out:
            o.copy_(tensor)


@pytest.mark.parametrize("opcode", [Opcode.ALL_REDUCE, Opcode.REDUCE_SCATTER])
def test_reduction_traffic_per_rank_does_not_grow_with_the_world(opcode: Opcode, monkeypatch) -> None:
    import torch.distributed as dist

    from nprof.device.exchange_data import exchange_collective

    size, most = 960, {}
    for world in (2, 4, 8):
        worst = 0
        for rank in range(world):
            fake = _Counting(rank, world)
            for name in ("isend", "irecv", "scatter", "all_gather"):
                monkeypatch.setattr(dist, name, getattr(fake, name))
            exchange_collective(None, rank, world, opcode, "add", np.ones(size, np.float32), lambda w: None)
            worst = max(worst, fake.sent)
        most[world] = worst
    assert max(most.values()) <= 2 * size + 8, most  # about twice the contribution, whatever the world
