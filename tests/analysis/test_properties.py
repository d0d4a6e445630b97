"""Hypothesis: any valid small Profile gives summary metrics and every pass without exceptions."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nprof.analysis import run_all, summary_metrics
from nprof.profile import Profile, ProfileInfo

DIRECTIONS = ["hbm->sbuf", "sbuf->hbm", "sbuf->sbuf"]
ENGINES = ["tensor", "vector", "scalar", "gpsimd", "sync", "cc", "other"]


@st.composite
def profiles(draw) -> Profile:
    n_i = draw(st.integers(0, 12))
    n_d = draw(st.integers(0, 8))
    times = st.integers(0, 10_000)
    durs = st.integers(0, 2_000)
    small = st.integers(0, 1 << 20)
    text = st.one_of(st.none(), st.sampled_from(["a", "b", "k.py:1", "layer.0"]))
    engines = draw(st.lists(st.sampled_from(ENGINES), min_size=n_i, max_size=n_i))
    instructions = {
        "id": list(range(n_i)),
        "ts": draw(st.lists(times, min_size=n_i, max_size=n_i)),
        "duration": draw(st.lists(durs, min_size=n_i, max_size=n_i)),
        "engine": engines,
        "track": [e if e != "tensor" else "tensor.moving" for e in engines],
        "opcode": draw(st.lists(st.sampled_from(["MATMUL", "ACT", "X"]), min_size=n_i, max_size=n_i)),
        "layer": draw(st.lists(text, min_size=n_i, max_size=n_i)),
        "flops": draw(st.lists(small, min_size=n_i, max_size=n_i)),
        "hw_flops": draw(st.lists(small, min_size=n_i, max_size=n_i)),
        "wait_ns": draw(st.lists(durs, min_size=n_i, max_size=n_i)),
        "deps": draw(st.lists(st.lists(st.integers(0, 30), max_size=3), min_size=n_i, max_size=n_i)),
    }
    dma = {
        "id": list(range(100, 100 + n_d)),
        "ts": draw(st.lists(times, min_size=n_d, max_size=n_d)),
        "duration": draw(st.lists(durs, min_size=n_d, max_size=n_d)),
        "queue": draw(st.lists(st.sampled_from(["q0", "q1", "q12"]), min_size=n_d, max_size=n_d)),
        "direction": draw(st.lists(st.sampled_from(DIRECTIONS), min_size=n_d, max_size=n_d)),
        "bytes": draw(st.lists(small, min_size=n_d, max_size=n_d)),
        "partitions": draw(st.lists(st.integers(0, 128), min_size=n_d, max_size=n_d)),
        "tensor": draw(st.lists(text, min_size=n_d, max_size=n_d)),
    }
    info = ProfileInfo(
        device=draw(st.sampled_from(["virtual-neuroncore", "cpu"])),
        peak_flops=draw(st.one_of(st.none(), st.floats(1e9, 1e15))),
        hbm_bandwidth=draw(st.one_of(st.none(), st.floats(1e9, 1e13))),
        total_time_ns=draw(st.one_of(st.none(), st.integers(0, 20_000))),
        created="2026-01-01T00:00:00+00:00",
    )
    return Profile.build(info, instructions=instructions, dma=dma)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles())
def test_any_profile_analyses(profile: Profile) -> None:
    m = summary_metrics(profile)
    assert m["event_count"] == profile.event_count
    for v in m.values():
        assert isinstance(v, int | float | str)
        if isinstance(v, float):
            assert math.isfinite(v)
    tables = run_all(profile)
    assert tables["summary"].num_rows == len(m)
    c = tables["counters"]
    assert all(math.isfinite(v) for v in c["value"].to_pylist())
