"""The group analysis keeps the two clocks apart: simulated device waits vs waits measured on the host."""

from __future__ import annotations

from nprof.analysis.collectives import RankFacts, analyze_group, exchange_facts
from nprof.analysis.metrics import summary_metrics
from nprof.profile import Profile, ProfileInfo
from nprof.profile.model import make_table

SIM = "ring/neuronlink (simulated)"
GLOO = "gloo (host, measured)"


def _table(rank: int, rows: list[tuple[int, int, int, int, str]]) -> object:
    """collectives rows (id, ts, duration, wait_ns, algorithm) of `rank` in a 2-rank job."""
    return make_table(
        "collectives",
        {
            "id": [r[0] for r in rows],
            "kind": ["all-reduce"] * len(rows),
            "bytes": [4096] * len(rows),
            "rank": [rank] * len(rows),
            "ranks": [[0, 1]] * len(rows),
            "ts": [r[1] for r in rows],
            "duration": [r[2] for r in rows],
            "wait_ns": [r[3] for r in rows],
            "algorithm": [r[4] for r in rows],
        },
    )


def test_launch_skew_of_a_simulated_op_is_no_wait_and_the_host_side_is_measured() -> None:
    # op 0: simulated, no modelled wait, but rank 1 launched 80 ms after rank 0 (placements differ);
    # rank 0's host waited 80 ms in the exchange for rank 1. op 1: a gloo op where rank 0 waited 2 us.
    skew = 80_000_000
    facts = {
        0: RankFacts(
            _table(0, [(0, 1_000, 5_000, 0, SIM), (1, 200_000_000, 9_000, 2_000, GLOO)]),
            300_000_000,
            exchanges={0: (3_000, skew)},
        ),
        1: RankFacts(
            _table(1, [(0, 1_000 + skew, 5_000, 0, SIM), (1, 200_002_000, 7_000, 0, GLOO)]),
            300_000_000,
            exchanges={0: (3_000 + skew, 0)},
        ),
    }
    g = analyze_group(facts)
    sim, gloo = g.ops
    assert (sim.clock, sim.max_wait_ns, sim.total_wait_ns, sim.transfer_ns) == ("device", 0, 0, 5_000)
    assert sim.launch_skew_ns == skew and sim.start == 1_000 and sim.end == 1_000 + skew + 5_000
    assert (sim.host_max_wait_ns, sim.host_total_wait_ns, sim.host_straggler) == (skew, skew, 1)
    assert [(w.host_arrival, w.host_wait_ns) for w in sim.ranks] == [(3_000, skew), (3_000 + skew, 0)]
    assert (gloo.clock, gloo.max_wait_ns, gloo.straggler, gloo.transfer_ns) == ("host", 2_000, 1, 7_000)
    assert gloo.start == 200_002_000
    assert gloo.host_max_wait_ns == 2_000 and gloo.launch_skew_ns == 0
    assert g.straggler is None and g.total_wait_ns == 0  # device clock: the simulated op made nobody wait
    r0, r1 = g.ranks
    assert (r0.cc_wait_ns, r0.host_wait_ns, r1.host_wait_ns) == (0, 2_000 + skew, 0)
    assert (g.host_straggler, r1.caused_host_wait_ns, g.host_total_wait_ns) == (1, skew + 2_000, skew + 2_000)


def test_simulated_job_on_one_clock_is_unchanged() -> None:
    # every rank on the model's clock: rank 1 arrives 700 ns late, rank 0 waits 700 ns
    facts = {
        0: RankFacts(_table(0, [(0, 100, 1_700, 700, SIM)]), 5_000),
        1: RankFacts(_table(1, [(0, 800, 1_000, 0, SIM)]), 5_000),
    }
    g = analyze_group(facts)
    (op,) = g.ops
    assert (op.start, op.end, op.straggler, op.max_wait_ns, op.launch_skew_ns) == (800, 1_800, 1, 700, 0)
    assert op.host_max_wait_ns is None and op.host_straggler is None
    assert g.straggler == 1 and g.ranks[1].caused_wait_ns == 700 and g.host_straggler is None


def test_exchange_facts_reads_the_op_id_from_the_row_name() -> None:
    got = exchange_facts(["all-reduce#3", "all-gather#12", None, "odd"], [5, 6, 7, 8], [1, 2, 3, 4])
    assert got == {3: (5, 1), 12: (6, 2)}


def test_summary_keeps_host_collective_waits_apart() -> None:
    cc = _table(0, [(0, 1_000, 5_000, 300, SIM), (1, 200_000, 9_000, 2_000, GLOO)])
    m = summary_metrics(Profile.build(ProfileInfo(device="cpu", world_size=2), collectives=cc))
    assert m["cc_wait_time"] == 300e-9 and m["cc_host_wait_time"] == 2_000e-9
