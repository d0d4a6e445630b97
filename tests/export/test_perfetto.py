"""Perfetto output parsed back with the bundled protos and checked track by track."""

from __future__ import annotations

from pathlib import Path

import pytest

from nprof.export import ExportOptions, export_profile
from nprof.export import perfetto_export as pe
from nprof.profile import Profile, ProfileInfo
from tests.analysis.helpers import make
from tests.conftest import tiny_profile
from tests.export.perfetto_reader import read


def _export(profile: Profile, tmp_path: Path, **opts) -> object:
    path = tmp_path / "t.pftrace"
    export_profile(profile, "perfetto", path, ExportOptions(**opts))
    parsed = read(path)
    assert parsed.errors == []
    return parsed


def test_tracks_slices_and_counters(tmp_path: Path) -> None:
    t = _export(tiny_profile(), tmp_path)
    assert t.process_name.startswith("tiny (virtual-neuroncore trn1 nd0 nc0")
    names = [t.tracks[u] for u in sorted(t.tracks, key=t.ranks.get)]
    assert names == ["DMA q0", "DMA q1", "TensorMatrix (MultiplyMoving)", "Vector", "TensorMatrix utilization",
                     "Pending DMA count", "DMA throughput"]  # fmt: skip
    (mm,) = t.track_slices("TensorMatrix (MultiplyMoving)")
    assert (mm.name, mm.category, mm.ts, mm.dur) == ("MATMUL", "tensor", 100, 200)
    assert mm.args == {"id": 2, "operands": "psum[0:128, 0:512] <- sbuf a, sbuf b", "source": "kernel.py:10",
                       "flops": 2 * 128 * 128 * 512}  # fmt: skip
    (q0,) = t.track_slices("DMA q0")
    assert (q0.name, q0.category, q0.ts, q0.dur) == ("hbm->sbuf", "dma", 0, 100)
    assert q0.args == {"id": 1, "bytes": 4096, "partitions": 2, "tensor": "a"}
    assert len(t.track_slices("Vector")) == 1 and len(t.track_slices("DMA q1")) == 1
    assert t.counters["Pending DMA count"] == [(0, 1.0), (100, 0.0), (400, 1.0), (450, 0.0)]
    assert t.counters["TensorMatrix utilization"] == [(0, 0.0), (100, 100.0), (300, 0.0)]
    assert t.counter_units["DMA throughput"] == "GB/s"
    assert all(not s.flow_ids and not s.terminating_flow_ids for s in t.slices)


def test_flows_follow_deps(tmp_path: Path) -> None:
    t = _export(tiny_profile(), tmp_path, show_flows=True)
    by_id = {s.args["id"]: s for s in t.slices}
    # deps: 2 <- 1, 3 <- 2, 4 <- 3: each edge is one flow id leaving the dependency and ending at the dependent
    edges = {}
    for s in t.slices:
        for f in s.flow_ids:
            edges.setdefault(f, [None, None])[0] = s.args["id"]
        for f in s.terminating_flow_ids:
            edges.setdefault(f, [None, None])[1] = s.args["id"]
    assert sorted(tuple(v) for v in edges.values()) == [(1, 2), (2, 3), (3, 4)]
    assert by_id[1].terminating_flow_ids == []


def test_dangling_deps_make_no_flow(tmp_path: Path) -> None:
    p = make({"ts": [0, 10], "duration": [5, 5], "deps": [[999], [1]]})
    t = _export(p, tmp_path, show_flows=True)
    assert sum(len(s.terminating_flow_ids) for s in t.slices) == 1


@pytest.mark.parametrize("chunk_rows", [65_536, 2])
def test_overlapping_events_get_lanes_and_nesting_is_kept(tmp_path: Path, chunk_rows: int) -> None:
    p = Profile.build(
        ProfileInfo(device="cpu"),
        instructions={"id": [1, 2, 3, 4, 5], "ts": [0, 10, 50, 60, 70], "duration": [100, 20, 30, 0, 50],
                      "engine": ["other"] * 5, "track": ["cpu:1"] * 4 + ["cpu:2"], "opcode": list("ABCDE")},
    )  # fmt: skip
    t = _export(p, tmp_path, chunk_rows=chunk_rows)
    # A [0,100) holds B [10,30) and C [50,80) properly nested; D is an instant: one lane
    assert {s.name: (s.ts, s.dur) for s in t.track_slices("cpu:1")} == {
        "A": (0, 100), "B": (10, 20), "C": (50, 30), "D": (60, 0)}  # fmt: skip
    p2 = make({"ts": [0, 50, 120], "duration": [100, 100, 10]})  # partial overlap on one track
    t2 = _export(p2, tmp_path, chunk_rows=chunk_rows)
    assert [s.name for s in t2.track_slices("Vector (lane 2)")] == ["TENSOR_TENSOR"]
    assert len(t2.track_slices("Vector")) == 2


def test_chunks_and_intern_reset_give_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 50
    p = make({"ts": [i * 10 for i in range(n)], "duration": [5] * n, "opcode": [f"OP{i % 7}" for i in range(n)],
              "layer": [f"l{i}" for i in range(n)], "operands": [None if i % 3 else f"o{i}" for i in range(n)],
              "deps": [[i] if i else [] for i in range(n)]})  # fmt: skip
    whole = _export(p, tmp_path, show_flows=True)
    monkeypatch.setattr(pe, "INTERN_LIMIT", 5)
    small = _export(p, tmp_path, show_flows=True, chunk_rows=4)
    assert [(s.name, s.ts, s.dur, s.args, s.flow_ids, s.terminating_flow_ids) for s in small.slices] == [
        (s.name, s.ts, s.dur, s.args, s.flow_ids, s.terminating_flow_ids) for s in whole.slices
    ]
    assert whole.slices[3].args == {"id": 4, "layer": "l3", "operands": "o3"}
    assert whole.slices[1].args == {"id": 2, "layer": "l1"}


def test_spill_flags_and_sampled_counters(tmp_path: Path) -> None:
    p = make(dma={"ts": [0, 100], "duration": [10, 10], "bytes": [64, 64], "is_spill": [True, False],
                  "is_reload": [False, True], "direction": ["sbuf->hbm", "hbm->sbuf"]})  # fmt: skip
    t = _export(p, tmp_path)
    args = [s.args for s in t.track_slices("DMA q0")]
    assert args[0].get("spill") is True and "reload" not in args[0]
    assert args[1].get("reload") is True


def test_bulk_interning_of_distinct_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nprof.export import perfetto_intern

    n = 40
    p = make({"ts": [i * 10 for i in range(n)], "duration": [5] * n, "operands": [f"op {i % 13}" for i in range(n)]})
    looked_up = _export(p, tmp_path)
    from nprof.export import perfetto_columns

    monkeypatch.setattr(perfetto_intern, "LOOKUP_MAX", 2)  # every chunk takes the bulk path
    monkeypatch.setattr(perfetto_columns, "SMALL_DICTIONARY", 2)
    bulk = _export(p, tmp_path, chunk_rows=7)
    assert [s.args for s in bulk.slices] == [s.args for s in looked_up.slices]
    assert bulk.slices[14].args["operands"] == "op 1"


def test_padded_varints_mixed_widths(tmp_path: Path) -> None:
    # ids and timestamps of very different sizes in one chunk: every value must survive padding
    p = make({"ts": [0, 5, 1 << 40], "duration": [1, 1, 1], "id": [1, 1 << 35, 7], "flops": [0, 3, 1 << 50]})
    t = _export(p, tmp_path)
    assert [(s.ts, s.args["id"], s.args["flops"]) for s in t.slices] == [(0, 1, 0), (5, 1 << 35, 3),
                                                                         (1 << 40, 7, 1 << 50)]  # fmt: skip


def test_sampled_counters(tmp_path: Path) -> None:
    p = Profile.build(
        ProfileInfo(device="cpu"),
        instructions={"id": [1], "ts": [0], "duration": [10], "engine": ["other"], "track": ["cpu:1"], "opcode": ["x"]},
        counters={"ts": [5, 0, 3], "name": ["temp", "cpu_percent", "cpu_percent"], "value": [40.0, 10.0, 90.0]},
    )
    t = _export(p, tmp_path)
    assert t.counters["cpu_percent"] == [(0, 10.0), (3, 90.0)]
    assert t.counters["temp"] == [(5, 40.0)]
    assert "Pending DMA count" not in t.counters  # no DMA: no DMA series


def test_unsorted_table_takes_the_sorted_path(tmp_path: Path) -> None:
    # events of one track stored out of time order: not streamable, sorted per row instead
    p = make({"ts": [300, 0, 100], "duration": [50, 50, 50], "opcode": ["C", "A", "B"]})
    t = _export(p, tmp_path, chunk_rows=1)
    assert [(s.name, s.ts) for s in t.track_slices("Vector")] == [("A", 0), ("B", 100), ("C", 300)]


def test_collectives_track(tmp_path: Path) -> None:
    p = Profile.build(
        ProfileInfo(device="virtual-neuroncore", rank=1, world_size=2),
        collectives={"id": [7, 7, 8], "kind": ["all-reduce", "all-reduce", "all-gather"], "bytes": [64, 64, 32],
                     "rank": [0, 1, 1], "ranks": [[0, 1]] * 3, "ts": [0, 10, 100], "duration": [50, 40, 20],
                     "wait_ns": [0, 15, 5], "algorithm": ["ring", "ring", None]},
    )  # fmt: skip
    t = _export(p, tmp_path)
    cc = t.track_slices("Collectives")
    got = [(s.name, s.ts, s.dur, s.category) for s in cc]
    assert got == [("all-reduce", 10, 40, "cc"), ("all-gather", 100, 20, "cc")]
    assert cc[0].args == {"id": 7, "bytes": 64, "wait_ns": 15, "ranks": "0,1", "algorithm": "ring"}
    assert "algorithm" not in cc[1].args
