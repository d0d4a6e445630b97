"""Hypothesis: any valid profile exports to a Perfetto trace whose slices are exactly its events."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nprof.export import ExportOptions, export_profile
from nprof.profile import Profile, ProfileInfo
from tests.export.perfetto_reader import read


@st.composite
def profiles(draw) -> Profile:
    n_i = draw(st.integers(0, 10))
    n_d = draw(st.integers(0, 6))
    times = st.integers(0, 200)
    durs = st.integers(0, 60)
    tracks = draw(st.lists(st.sampled_from(["vector", "scalar", "cpu:1"]), min_size=n_i, max_size=n_i))
    instructions = {
        "id": list(range(n_i)),
        "ts": draw(st.lists(times, min_size=n_i, max_size=n_i)),
        "duration": draw(st.lists(durs, min_size=n_i, max_size=n_i)),
        "engine": ["other" if t.startswith("cpu") else t for t in tracks],
        "track": tracks,
        "opcode": draw(st.lists(st.sampled_from(["A", "B"]), min_size=n_i, max_size=n_i)),
        "layer": draw(st.lists(st.one_of(st.none(), st.just("l")), min_size=n_i, max_size=n_i)),
        "deps": draw(st.lists(st.lists(st.integers(0, 20), max_size=2), min_size=n_i, max_size=n_i)),
    }
    dma = {
        "id": list(range(100, 100 + n_d)),
        "ts": draw(st.lists(times, min_size=n_d, max_size=n_d)),
        "duration": draw(st.lists(durs, min_size=n_d, max_size=n_d)),
        "queue": draw(st.lists(st.sampled_from(["q0", "q1"]), min_size=n_d, max_size=n_d)),
        "direction": ["hbm->sbuf"] * n_d,
        "bytes": [64] * n_d,
        "deps": draw(st.lists(st.lists(st.integers(0, 10), max_size=2), min_size=n_d, max_size=n_d)),
    }
    return Profile.build(ProfileInfo(device="cpu", created="2026-01-01T00:00:00+00:00"), instructions, dma)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(), st.sampled_from([1, 3, 65_536]), st.booleans())
def test_every_event_is_one_slice(profile: Profile, chunk_rows: int, flows: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.pftrace"
        export_profile(profile, "perfetto", path, ExportOptions(show_flows=flows, chunk_rows=chunk_rows))
        t = read(path)
    assert t.errors == []
    want = sorted(
        [(i, s, d) for i, s, d in zip(*(profile.instructions[c].to_pylist() for c in ("id", "ts", "duration")),
                                      strict=True)]
        + [(i, s, d) for i, s, d in zip(*(profile.dma[c].to_pylist() for c in ("id", "ts", "duration")), strict=True)]
    )  # fmt: skip
    got = sorted((s.args["id"], s.ts, s.dur) for s in t.slices if "id" in s.args)
    assert got == want
