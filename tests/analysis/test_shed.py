"""`each_pass` sheds cached facts between passes (SHED_AFTER): every table equals its pass run alone on a fresh
profile (no facts shared, nothing shed), and no later pass computes a shed fact again (which would hold its
memory through the rest of the analysis)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from nprof.analysis import PASSES, SHED_AFTER, TUNED, each_pass, intervals
from nprof.analysis.counters import counter_batches, counters
from nprof.analysis.facts import SHEDDABLE, facts
from nprof.analysis.thresholds import Thresholds
from nprof.profile import Profile
from nprof.store.synthetic import synthetic_profile
from tests.analysis.test_properties import profiles


def _fresh(p: Profile) -> Profile:
    """The same tables in a new Profile object (its own, empty facts)."""
    return Profile(p.info, p.instructions, p.dma, p.collectives, p.counters)


def _alone(p: Profile, name: str, th: Thresholds) -> object:
    q = _fresh(p)
    return TUNED[name](q, thresholds=th) if name in TUNED else PASSES[name](q)


def _check(p: Profile, th: Thresholds) -> None:
    shed: set[str] = set()
    for name, table in each_pass(p, thresholds=th):
        assert not shed & set(facts(p).__dict__), f"pass {name} computed a shed fact again"
        shed |= set(SHED_AFTER.get(name, ()))
        assert table.equals(_alone(p, name, th)), name
    assert not shed & set(facts(p).__dict__)


@pytest.mark.parametrize("seed", range(6))
def test_each_pass_equals_each_pass_alone_synthetic(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = synthetic_profile(int(rng.integers(200, 6000)), seed=seed, mean_dur=int(rng.integers(50, 800)))
    th = Thresholds(gap_share=0.0, gap_min_ns=1) if seed % 2 else Thresholds()  # idle gaps found on odd seeds
    _check(p, th)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles())
def test_each_pass_equals_each_pass_alone_random(p: Profile) -> None:
    _check(p, Thresholds())


def test_shed_names_are_checked() -> None:
    assert {n for names in SHED_AFTER.values() for n in names} <= set(SHEDDABLE)
    with pytest.raises(ValueError, match="not a sheddable fact"):
        facts(synthetic_profile(10, seed=0)).shed(["engine_merged"])


@pytest.mark.parametrize("seed", range(20))
def test_rows_within_gaps_equals_the_whole_computation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    merged = intervals.merge(rng.integers(0, 10_000, 50), rng.integers(0, 10_000, 50) + rng.integers(0, 300, 50))
    start = rng.integers(0, 11_000, int(rng.integers(0, 400)))
    end = start + rng.integers(0, 200, start.size)
    want = np.flatnonzero(intervals.within_gaps(merged, start, end))
    got = intervals.rows_within_gaps(merged, start, end, batch=int(rng.integers(1, 50)))
    assert got.dtype == np.int64 and np.array_equal(got, want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles())
def test_counter_batches_are_the_counters_table_random(p: Profile) -> None:
    want = counters(_fresh(p))
    for batch in (1, 2, 5, None):
        reader = counter_batches(p, batch)
        assert reader.schema == want.schema
        assert reader.read_all().equals(want)


@pytest.mark.parametrize("seed", range(4))
def test_counter_batches_are_the_counters_table_read_later(seed: int) -> None:
    """Read after the later passes ran and shed their facts (as the ingest's writer thread may): the same rows."""
    p = synthetic_profile(4000 + 1000 * seed, seed=seed)
    want = counters(_fresh(p))
    reader = counter_batches(p, batch=97)
    list(each_pass(p))
    got = reader.read_all()
    assert got.equals(want) and got.num_rows > 1000


@pytest.mark.parametrize("seed", range(8))
def test_engine_sums_and_counts_equal_plain_sums(seed: int) -> None:
    """Per-engine sums accumulated in place are the exact integer sums (also past 2**53, where float64 is not)."""
    rng = np.random.default_rng(seed)
    p = synthetic_profile(int(rng.integers(50, 3000)), seed=seed)
    big = rng.integers(0, 1 << 50, p.instructions.num_rows) if seed % 2 else None
    if big is not None:  # flops of 2**50 each: the sums pass 2**53
        p = Profile(p.info, p.instructions.set_column(p.instructions.schema.get_field_index("flops"), "flops",
                    pa.array(big, pa.int64())), p.dma, p.collectives, p.counters)  # fmt: skip
    rows = p.instructions.select(["engine", "duration", "flops"]).to_pylist()
    f = facts(p)
    for engine in {r["engine"] for r in rows}:
        mine = [r for r in rows if r["engine"] == engine]
        assert f.engine_counts[engine] == len(mine)
        assert f.engine_sum(engine, "duration") == sum(r["duration"] for r in mine)
        assert f.engine_sum(engine, "flops") == sum(r["flops"] for r in mine)
