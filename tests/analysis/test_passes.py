"""The table passes on tiny_profile() and small hand-built profiles."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nprof.analysis import PASSES, run_all
from nprof.analysis.counters import bin_width_ns, counters, spread_over_bins
from nprof.analysis.dma_queues import dma_queues
from nprof.analysis.engines import engines
from nprof.analysis.layers import layers
from nprof.analysis.opcodes import opcodes
from nprof.analysis.summary import summary
from tests.analysis.helpers import make
from tests.conftest import tiny_profile


def test_registry_and_run_all() -> None:
    names = ["summary", "engines", "opcodes", "layers", "dma_queues", "counters", "warnings", "findings"]
    names.append("system_steps")
    assert list(PASSES) == names
    out = run_all(tiny_profile())
    assert list(out) == list(PASSES)
    assert all(isinstance(t, pa.Table) for t in out.values())


def test_summary_rows() -> None:
    t = summary(tiny_profile())
    rows = {r["name"]: r for r in t.to_pylist()}
    assert rows["total_time"]["unit"] == "s" and rows["total_time"]["numeric"] == pytest.approx(4.5e-7)
    assert rows["bound"]["numeric"] is None and rows["bound"]["value"] == "compute"
    assert rows["dma_transfer_total_bytes"]["value"] == "5120"
    assert rows["nc_idx"]["group"] == "Overview"


def test_engines_table() -> None:
    rows = {r["engine"]: r for r in engines(tiny_profile()).to_pylist()}
    assert list(rows) == ["tensor", "vector", "scalar", "gpsimd", "sync"]
    assert rows["tensor"]["active_time_ns"] == 200 and rows["tensor"]["instruction_count"] == 1
    assert rows["vector"]["instruction_time_ns"] == 100
    assert rows["scalar"]["active_time_percent"] == 0


def test_opcodes_table() -> None:
    p = make({"ts": [0, 10, 20], "duration": [5, 7, 3], "opcode": ["A", "B", "A"], "flops": [1, 0, 2],
              "sbuf_read_bytes": [10, 0, 5]})  # fmt: skip
    rows = {(r["engine"], r["opcode"]): r for r in opcodes(p).to_pylist()}
    assert rows[("vector", "A")] == {"engine": "vector", "opcode": "A", "count": 2, "total_ns": 8, "avg_ns": 4.0,
                                     "max_ns": 5, "flops": 3, "hw_flops": 0, "bytes": 15}  # fmt: skip
    assert opcodes(p)["opcode"].to_pylist()[0] == "A"  # sorted by total time


def test_layers_table() -> None:
    assert layers(tiny_profile()).num_rows == 0
    p = make(
        {"ts": [0, 100, 200], "duration": [50, 50, 50], "layer": ["fc1", "fc2", "fc1"], "flops": [10, 20, 30]},
        {"ts": [300], "duration": [10], "bytes": [64], "layer": ["fc2"]},
    )
    rows = {r["layer"]: r for r in layers(p).to_pylist()}
    assert rows["fc1"]["instruction_count"] == 2 and rows["fc1"]["flops"] == 40
    assert (rows["fc1"]["start_ns"], rows["fc1"]["end_ns"]) == (0, 250)
    assert rows["fc2"]["dma_bytes"] == 64 and rows["fc2"]["end_ns"] == 310
    assert layers(p)["layer"].to_pylist() == ["fc1", "fc2"]


def test_dma_queues_table() -> None:
    p = make(dma={"ts": [0, 50, 0], "duration": [100, 100, 10], "bytes": [100, 300, 64 * 1024],
                  "queue": ["q10", "q10", "q2"], "partitions": [1, 1, 1]})  # fmt: skip
    rows = dma_queues(p).to_pylist()
    assert [r["queue"] for r in rows] == ["q2", "q10"]  # natural order
    q10 = rows[1]
    assert q10["transfers"] == 2 and q10["bytes"] == 400 and q10["active_time_ns"] == 150
    assert q10["throughput_gbps"] == pytest.approx(400 / 150)
    assert q10["small_transfers"] == 2 and rows[0]["small_transfers"] == 0


def _series(table: pa.Table, name: str) -> list[tuple[int, float]]:
    return [(r["ts"], r["value"]) for r in table.to_pylist() if r["name"] == name]


def test_counters_tiny() -> None:
    c = counters(tiny_profile())
    assert _series(c, "tensor_util") == [(0, 0.0), (100, 100.0), (300, 0.0)]
    assert _series(c, "pending_dma") == [(0, 1.0), (100, 0.0), (400, 1.0), (450, 0.0)]
    assert _series(c, "dma_throughput") == [(0, 40.96), (100, 0.0), (400, 20.48), (450, 0.0)]


def test_pending_dma_is_exact_with_overlaps() -> None:
    p = make(dma={"ts": [0, 10, 10, 30], "duration": [20, 5, 30, 0], "bytes": [1, 1, 1, 1]})
    assert _series(counters(p), "pending_dma") == [(0, 1.0), (10, 3.0), (15, 2.0), (20, 1.0), (40, 0.0)]


def test_binned_series_are_bounded_and_conserve_bytes() -> None:
    total = 10_000_000
    assert bin_width_ns(total) == 100
    starts = [0, 1234, 5_000_000]
    durs = [77, 999_999, 4_999_999]
    p = make(dma={"ts": starts, "duration": durs, "bytes": [1000, 5000, 123456]})
    tp = _series(counters(p), "dma_throughput")
    assert len(tp) <= 100_001
    # integrate the step function back: bytes are conserved
    end = max(s + d for s, d in zip(starts, durs, strict=True))
    area = sum(v * (b[0] - a[0]) for a, b, v in ((a, b, a[1]) for a, b in zip(tp, [*tp[1:], (end, 0)], strict=True)))
    assert area == pytest.approx(1000 + 5000 + 123456, rel=1e-6)


def test_spread_over_bins_partial_bins() -> None:
    import numpy as np

    out = spread_over_bins(np.array([5]), np.array([25]), np.array([20.0]), 10, 3)
    assert out.tolist() == pytest.approx([5.0, 10.0, 5.0])


def test_sampled_counters_pass_through() -> None:
    from nprof.profile import Profile, ProfileInfo

    p = Profile.build(ProfileInfo(device="cpu"), counters={"ts": [5, 0], "name": ["cpu_percent"] * 2,
                                                          "value": [50.0, 10.0]})  # fmt: skip
    assert _series(counters(p), "cpu_percent") == [(0, 10.0), (5, 50.0)]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 80)), min_size=1, max_size=14),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 80), st.integers(1, 5000)), max_size=14),
    st.booleans(),
)
def test_batched_counters_equal_unbatched(mm, transfers, in_order: bool) -> None:
    import importlib

    import numpy as np

    from nprof.analysis.facts import facts

    cmod = importlib.import_module("nprof.analysis.counters")  # the module, not the pass of the same name

    if in_order:
        mm, transfers = sorted(mm), sorted(transfers)
    p = make(
        {"ts": [s for s, _ in mm], "duration": [d for _, d in mm], "engine": ["tensor"] * len(mm),
         "track": ["tensor.moving"] * len(mm)},
        {"ts": [s for s, _, _ in transfers], "duration": [d for _, d, _ in transfers],
         "bytes": [b for _, _, b in transfers]} if transfers else None,
    )  # fmt: skip
    whole = {k: (t.tolist(), v.tolist()) for k, (t, v) in cmod._computed(p).items()}
    old = cmod.BATCH
    try:
        cmod.BATCH = 2
        facts(p).__dict__.pop("_memo_computed_series", None)
        batched = {k: (t.tolist(), v.tolist()) for k, (t, v) in cmod._computed(p).items()}
    finally:
        cmod.BATCH = old
    assert batched.keys() == whole.keys()
    for name, (ts, values) in whole.items():
        assert batched[name][0] == ts
        assert batched[name][1] == pytest.approx(values, rel=1e-9, abs=1e-9)
    # the exact pending count against brute force, whole and window by window (the streaming path)
    if transfers:
        ts, value = cmod.pending_dma(p)
        for batch in (1, 2, 3):
            chunks = list(cmod.pending_dma_chunks(p, batch=batch))
            assert [t for c in chunks for t in c[0].tolist()] == ts.tolist()
            assert [v for c in chunks for v in c[1].tolist()] == value.tolist()
        for t, v in zip(ts.tolist(), value.tolist(), strict=True):
            assert v == sum(1 for s, d, _ in transfers if s <= t < s + d)
    assert np.all(np.diff(cmod.tensor_util(p)[0]) > 0) if mm else True
