"""`run_in_job` (one rank of a multi-process job, collectives exchanged) against the in-process reference
`simulate_workers`: ranks run as threads over an in-memory exchange must give the same outputs and the same
collective timing (the header checks and timeouts of the real exchange: tests/compiler/test_distributed.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from nprof.arch.isa import Opcode
from nprof.device.collectives import combine
from nprof.device.process_group import Job, run_in_job
from nprof.device.workers import simulate_workers
from nprof.errors import NprofError
from tests.multiworker.kit import collective_program


class ThreadExchange:
    """All-gather between threads (one per rank): what `Exchange` does between processes."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=300)
        self.slots: list[object] = [None] * world

    def rank(self, r: int) -> object:
        ex = self

        class One:
            def gather(self, header: list[int], payload: np.ndarray, describe: str) -> list[np.ndarray]:
                heads = ex._all(r, tuple(header))
                if len(set(heads)) > 1:
                    raise NprofError(f"ranks issue different collectives: rank {r} {describe}")
                return ex._all(r, np.array(payload, dtype=np.float64))

            def collective(self, header: list[int], opcode, op: str, payload: np.ndarray, describe: str):
                everyone = self.gather(header, payload, describe)  # the device model's rule (`combine`)
                size, n = everyone[0].size, len(everyone)
                per_rank = {Opcode.REDUCE_SCATTER: size // n, Opcode.ALL_GATHER: size * n}.get(opcode, size)
                return combine(opcode, op, everyone, [per_rank] * n)[r]

        return One()

    def _all(self, r: int, value: object) -> list:
        self.slots[r] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


def _run_threads(programs, inputs, world: int):
    ex = ThreadExchange(world)
    results, errors = [None] * world, [None] * world

    def one(r: int) -> None:
        try:
            results[r] = run_in_job(programs[r], inputs[r], Job(r, world, world), gatherer=ex.rank(r))
        except Exception as exc:  # reported to the test
            errors[r] = exc
            ex.barrier.abort()

    threads = [threading.Thread(target=one, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return results, errors


@pytest.mark.parametrize(
    "kind,shape,out_shape",
    [("all_reduce", (8, 16), (8, 16)), ("all_gather", (8, 16), (24, 16)), ("reduce_scatter", (12, 16), (4, 16))],
)
def test_threads_match_the_in_process_job(kind: str, shape: tuple[int, int], out_shape: tuple[int, int]) -> None:
    world = 3
    rng = np.random.default_rng(0)
    programs = [collective_program(kind, shape, out_shape, extra=4 * r) for r in range(world)]  # ranks arrive late
    inputs = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(world)]
    results, errors = _run_threads(programs, inputs, world)
    assert errors == [None] * world, errors
    job = simulate_workers(programs, dict(enumerate(inputs)), world_size=world)
    for r in range(world):
        np.testing.assert_array_equal(results[r].outputs["out"], job.results[r].outputs["out"])
        got = results[r].profile.collectives.to_pylist()
        want = job.results[r].profile.collectives.to_pylist()
        keys = ("kind", "bytes", "ts", "duration", "wait_ns", "algorithm")
        assert [{k: g[k] for k in keys} for g in got] == [{k: w[k] for k in keys} for w in want]
        assert results[r].profile.total_time_ns == job.results[r].profile.total_time_ns
    assert max(c["wait_ns"] for c in results[0].profile.collectives.to_pylist()) > 0  # rank 0 waited
