"""Ring timing by hand, EFA across nodes, a delayed rank's wait, matching errors."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.analysis.collectives import RankFacts, analyze_group
from nprof.arch.isa import Opcode
from nprof.arch.presets import get_preset
from nprof.device.collectives import Topology, ring_time_ns
from nprof.device.workers import simulate_workers
from nprof.errors import NprofError
from tests.multiworker.kit import collective_program

TRN1 = get_preset("trn1")
SHAPE = (64, 128)  # 32 KiB of fp32 per rank
NBYTES = 64 * 128 * 4


def _rows(job, rank):
    return job.results[rank].profile.collectives.to_pylist()


@pytest.mark.parametrize("n", [2, 4])
def test_all_reduce_ring_time_by_hand(n: int) -> None:
    # 2(N-1) steps, each moving NBYTES/N over NeuronLink plus the per-step latency
    want = 2 * (n - 1) * (TRN1.link_latency_ns + (NBYTES / n) / TRN1.link_bandwidth * 1e9)
    assert n != 2 or want == pytest.approx(2 * (2000.0 + 16384 / 384e9 * 1e9))
    assert ring_time_ns(Opcode.ALL_REDUCE, NBYTES, range(n), Topology(n, n), TRN1) == pytest.approx(want)
    job = simulate_workers(collective_program("all_reduce", SHAPE, SHAPE), world_size=n, numerics=False)
    (op,) = job.ops
    assert op.end - op.start == pytest.approx(want)
    for r in range(n):
        (row,) = _rows(job, r)
        assert row["duration"] == round(op.end) - round(op.arrival[r])
        assert row["wait_ns"] == 0 and row["bytes"] == NBYTES and row["ranks"] == list(range(n))
        instr = job.results[r].profile.instructions.to_pylist()
        cc = [x for x in instr if x["opcode"] == "ALL_REDUCE"]
        assert len(cc) == 1 and cc[0]["engine"] == "cc" and cc[0]["track"].startswith("cc.")
        assert cc[0]["ts"] == row["ts"] and cc[0]["duration"] == row["duration"]


def test_other_collectives_by_hand() -> None:
    topo = Topology(4, 4)
    lat, bw = TRN1.link_latency_ns, TRN1.link_bandwidth
    assert ring_time_ns(Opcode.ALL_GATHER, 1000, range(4), topo, TRN1) == pytest.approx(3 * (lat + 1000 / bw * 1e9))
    assert ring_time_ns(Opcode.REDUCE_SCATTER, 1000, range(4), topo, TRN1) == pytest.approx(3 * (lat + 250 / bw * 1e9))


def test_ring_across_nodes_uses_efa() -> None:
    job = simulate_workers(
        collective_program("all_reduce", SHAPE, SHAPE), world_size=4, workers_per_node=2, numerics=False
    )
    (op,) = job.ops
    want = 6 * (TRN1.efa_latency_ns + (NBYTES / 4) / TRN1.efa_bandwidth * 1e9)
    assert op.end - op.start == pytest.approx(want)
    assert op.algorithm == "ring/efa"
    info = job.results[3].profile.info
    assert (info.rank, info.world_size, info.nd_idx, info.nc_idx, info.meta["node"]) == (3, 4, 0, 1, "1")


def test_delayed_rank_makes_the_others_wait() -> None:
    progs = [collective_program("all_reduce", SHAPE, SHAPE, extra=40 if r == 2 else 0) for r in range(4)]
    inputs = {r: {"x": np.full(SHAPE, r, np.float32)} for r in range(4)}
    job = simulate_workers(progs, inputs, world_size=4)
    np.testing.assert_allclose(job.results[0].outputs["out"], np.full(SHAPE, 6.0))
    (op,) = job.ops
    late = op.arrival[2]
    assert late == max(op.arrival.values()) and late - op.arrival[0] > 1000
    ends = set()
    for r in range(4):
        (row,) = _rows(job, r)
        ends.add(row["ts"] + row["duration"])
        if r == 2:
            assert row["wait_ns"] == 0
        else:
            assert row["wait_ns"] == round(late) - round(op.arrival[r]) > 1000
    assert len(ends) == 1  # the operation ends at once on every rank
    g = analyze_group(
        {r: RankFacts(res.profile.collectives, res.profile.total_time_ns) for r, res in job.results.items()}
    )
    assert g.straggler == 2 and g.ops[0].straggler == 2 and g.slowest_rank == 2
    assert g.ranks[2].caused_wait_ns == sum(_rows(job, r)[0]["wait_ns"] for r in range(4))
    assert g.ranks[0].cc_wait_ns > 0 and g.ranks[2].cc_wait_ns == 0


def test_chained_collectives_fixed_point() -> None:
    """Two ranks, the second op depends on the first: its arrival accounts for the first op's wait."""
    import nprof.nki.language as nl
    from nprof.nki import collectives as cc
    from nprof.nki.trace import ProgramBuilder

    def build(extra: int):
        def kernel(x, out):
            t = nl.load(x)
            for _ in range(extra):
                t = nl.add(t, 0.0)
            a = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
            nl.store(a, t)
            b = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
            cc.all_reduce(b, a)
            cc.all_reduce(out, b)

        bld = ProgramBuilder("chain")
        x = bld.hbm_tensor("x", (8, 8), "float32", kind="input")
        out = bld.hbm_tensor("out", (8, 8), "float32", kind="output")
        bld.call(kernel, x, out)
        return bld.build()

    job = simulate_workers([build(0), build(30)], {0: {"x": np.ones((8, 8), np.float32)}}, world_size=2)
    np.testing.assert_allclose(job.results[1].outputs["out"], np.full((8, 8), 2.0))  # (1 + 0) summed twice
    first, second = job.ops
    assert second.start >= first.end
    assert set(second.arrival.values()) == {second.start}  # nobody waits at the second op
    assert first.arrival[0] < first.arrival[1]


def test_missing_collective_is_a_deadlock_error() -> None:
    progs = [collective_program("all_reduce", (4, 4), (4, 4)), collective_program("all_gather", (4, 4), (8, 4))]
    with pytest.raises(NprofError, match="rank 0 issues ALL_REDUCE but rank 1 issues ALL_GATHER"):
        simulate_workers(progs, world_size=2, numerics=False)
    plain = collective_program("all_reduce", (4, 4), (4, 4), group=(0,))
    with pytest.raises(NprofError, match="without it"):
        simulate_workers(plain, world_size=2, numerics=False)


def test_size_mismatch_names_the_rank() -> None:
    prog = collective_program("all_gather", (4, 4), (8, 4))  # traced for 2 ranks, run on 3
    with pytest.raises(NprofError, match=r"rank 0 instruction .*ALL_GATHER"):
        simulate_workers(prog, world_size=3)


def test_ignored_errors_are_warned_per_rank() -> None:
    prog = collective_program("all_gather", (4, 4), (8, 4))  # traced for 2 ranks, run on 3
    job = simulate_workers(prog, world_size=3, ignore_exec_errors=True)
    for r in range(3):
        text = "\n".join(job.results[r].warnings)
        assert "no inputs given" in text
        assert f"rank {r}: " in text and "{rank}" not in text
    assert "execution error in rank 0 instruction" in "\n".join(job.results[0].warnings)
