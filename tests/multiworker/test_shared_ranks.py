"""Identical ranks share one schedule and one set of tables, exactly; a late rank (start delay) is exact too."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from nprof.device.workers import simulate_workers
from nprof.errors import NprofError
from tests.multiworker.kit import collective_program

SHAPE = (32, 64)


def _tables(job, rank):
    p = job.results[rank].profile
    return {name: p.table(name).to_pylist() for name in ("instructions", "dma", "collectives")}, p.total_time_ns


@pytest.mark.parametrize("delays", [{}, {5: 3000.0}, {0: 1500.0, 6: 777.0}])
def test_shared_schedule_equals_one_schedule_per_rank(delays: dict[int, float]) -> None:
    """The reference: every rank gets its own copy of the program, so nothing can be shared between ranks."""
    n = 8
    prog = collective_program("all_reduce", SHAPE, SHAPE, extra=2)
    shared = simulate_workers(prog, world_size=n, numerics=False, start_delay_ns=delays)
    alone = simulate_workers([copy.deepcopy(prog) for _ in range(n)], world_size=n, numerics=False,
                             start_delay_ns=delays)  # fmt: skip
    for r in range(n):
        assert _tables(shared, r) == _tables(alone, r)


def test_identical_ranks_are_scheduled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import nprof.device.workers as workers

    calls = []
    real = workers.schedule
    monkeypatch.setattr(workers, "schedule", lambda plan: calls.append(1) or real(plan))
    prog = collective_program("all_reduce", SHAPE, SHAPE)
    simulate_workers(prog, world_size=64, numerics=False)
    passes = len(calls)
    calls.clear()
    simulate_workers(prog, world_size=64, numerics=False, start_delay_ns={7: 100.0})
    assert passes <= 3 and len(calls) <= 2 * 3  # per fixed-point pass: one schedule per distinct rank


def test_late_rank_by_hand() -> None:
    """Rank 3 starts 5 us late: it arrives 5 us after the others, which each wait 5 us; it waits for nobody."""
    n, late, delay = 4, 3, 5000.0
    prog = collective_program("all_reduce", SHAPE, SHAPE)
    base = simulate_workers(prog, world_size=n, numerics=False)
    job = simulate_workers(prog, world_size=n, numerics=False, start_delay_ns={late: delay})
    (op0,), (op,) = base.ops, job.ops
    assert op.arrival[late] == pytest.approx(op0.arrival[late] + delay)
    for r in range(n):
        assert op.arrival[r] == pytest.approx(op0.arrival[r] + (delay if r == late else 0.0))
        (row,) = job.results[r].profile.collectives.to_pylist()
        assert row["wait_ns"] == (0 if r == late else round(delay))
    first = job.results[late].profile.instructions.column("ts").to_numpy()
    np.testing.assert_array_equal(first, base.results[late].profile.instructions.column("ts").to_numpy() + 5000)
    assert job.results[0].profile.total_time_ns == base.results[0].profile.total_time_ns + 5000


@pytest.mark.parametrize("bad", [{9: 1.0}, {1: -1.0}, {1: float("nan")}])
def test_bad_delays_refused(bad: dict[int, float]) -> None:
    with pytest.raises(NprofError, match="delay"):
        simulate_workers(collective_program("all_reduce", SHAPE, SHAPE), world_size=4, numerics=False,
                         start_delay_ns=bad)  # fmt: skip
