"""Collective numerics across 2..32 simulated workers against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.device.workers import simulate_workers
from tests.multiworker.kit import collective_program


def _inputs(n: int, shape: tuple[int, ...], seed: int = 0) -> dict[int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {r: {"x": rng.standard_normal(shape).astype(np.float32)} for r in range(n)}


@pytest.mark.parametrize("n", [2, 3, 8, 32])
def test_all_reduce_sums_across_ranks(n: int) -> None:
    shape = (16, 32)
    prog = collective_program("all_reduce", shape, shape)
    inputs = _inputs(n, shape, seed=n)
    job = simulate_workers(prog, inputs, world_size=n)
    want = np.sum([inputs[r]["x"].astype(np.float64) for r in range(n)], axis=0)
    for r in range(n):
        np.testing.assert_allclose(job.results[r].outputs["out"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,fn", [("maximum", np.max), ("minimum", np.min)])
def test_all_reduce_max_min(op: str, fn) -> None:
    shape = (8, 16)
    prog = collective_program("all_reduce", shape, shape, op=op)
    inputs = _inputs(4, shape, seed=7)
    job = simulate_workers(prog, inputs, world_size=4)
    want = fn(np.stack([inputs[r]["x"] for r in range(4)]), axis=0)
    np.testing.assert_array_equal(job.results[3].outputs["out"], want)


@pytest.mark.parametrize("n", [2, 5, 32])
def test_all_gather_concatenates_in_rank_order(n: int) -> None:
    shape = (4, 8)
    prog = collective_program("all_gather", shape, (n * 4, 8))
    inputs = _inputs(n, shape, seed=1)
    job = simulate_workers(prog, inputs, world_size=n)
    want = np.concatenate([inputs[r]["x"] for r in range(n)], axis=0)
    for r in (0, n - 1):
        np.testing.assert_array_equal(job.results[r].outputs["out"], want)


@pytest.mark.parametrize("n", [2, 4, 32])
def test_reduce_scatter_gives_each_rank_its_chunk(n: int) -> None:
    in_shape = (n * 2, 8)
    prog = collective_program("reduce_scatter", in_shape, (2, 8))
    inputs = _inputs(n, in_shape, seed=2)
    job = simulate_workers(prog, inputs, world_size=n)
    total = np.sum([inputs[r]["x"].astype(np.float64) for r in range(n)], axis=0).reshape(n, 2, 8)
    for r in range(n):
        np.testing.assert_allclose(job.results[r].outputs["out"], total[r], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2, 4])
def test_all_to_all_exchanges_chunks(n: int) -> None:
    shape = (n * 2, 8)
    prog = collective_program("all_to_all", shape, shape)
    inputs = _inputs(n, shape, seed=3)
    job = simulate_workers(prog, inputs, world_size=n)
    chunks = [inputs[i]["x"].reshape(n, -1) for i in range(n)]
    for j in range(n):
        want = np.concatenate([chunks[i][j] for i in range(n)]).reshape(shape)
        np.testing.assert_array_equal(job.results[j].outputs["out"], want)


def test_replica_group_subset() -> None:
    shape = (4, 4)
    progs = [collective_program("all_reduce", shape, shape, group=(0, 2) if r in (0, 2) else (1, 3)) for r in range(4)]
    inputs = _inputs(4, shape, seed=4)
    job = simulate_workers(progs, inputs, world_size=4)
    np.testing.assert_allclose(job.results[0].outputs["out"], inputs[0]["x"] + inputs[2]["x"], rtol=1e-6)
    np.testing.assert_allclose(job.results[3].outputs["out"], inputs[1]["x"] + inputs[3]["x"], rtol=1e-6)
    assert sorted(op.ranks for op in job.ops) == [(0, 2), (1, 3)]


def test_single_worker_collective_is_a_copy() -> None:
    shape = (4, 4)
    prog = collective_program("all_reduce", shape, shape)
    inputs = _inputs(1, shape)
    job = simulate_workers(prog, inputs, world_size=1)
    np.testing.assert_array_equal(job.results[0].outputs["out"], inputs[0]["x"])


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_to_all", "all_gather", "all_reduce"])
def test_ranks_sharing_inputs_match_ranks_apart(kind: str) -> None:
    """Ranks given the same array share one memory until results differ; outputs equal separate runs."""
    n = 4
    in_shape = (n * 2, 8)
    out_shape = {"reduce_scatter": (2, 8), "all_gather": (n * n * 2, 8)}.get(kind, in_shape)
    prog = collective_program(kind, in_shape, out_shape)
    x = np.random.default_rng(9).standard_normal(in_shape).astype(np.float32)
    shared = simulate_workers(prog, {"x": x}, world_size=n)  # one array object for every rank
    apart = simulate_workers(prog, {r: {"x": x.copy()} for r in range(n)}, world_size=n)
    for r in range(n):
        np.testing.assert_array_equal(shared.results[r].outputs["out"], apart.results[r].outputs["out"])
    if kind == "reduce_scatter":
        np.testing.assert_allclose(shared.results[3].outputs["out"], (n * x).reshape(n, 2, 8)[3], rtol=1e-6)
