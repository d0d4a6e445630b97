"""Viewport level of detail, search, box select and event details, checked against numpy / hand numbers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.store import NotFound, Store, box_select, event_details, rows_answer, search, viewport
from nprof.store.lod import bucketize
from nprof.store.synthetic import synthetic_profile
from tests.conftest import tiny_profile

N = 100_000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Profile]]:
    store = Store(tmp_path_factory.mktemp("store"))
    p = synthetic_profile(N, seed=7)
    store.ingest(p, "big")
    store.ingest(tiny_profile(), "tiny")
    yield store, p
    store.close()


def _row_events(p: Profile) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for t, col in ((p.instructions, "track"), (p.dma, "queue")):
        keys = np.array(t[col].to_pylist())
        ts, dur = t["ts"].to_numpy(), t["duration"].to_numpy()
        for k in np.unique(keys):
            m = keys == k
            out[str(k)] = (ts[m], dur[m])
    return out


def _overlap(ts: np.ndarray, dur: np.ndarray, lo: int, hi: int) -> int:
    return int(np.clip(np.minimum(ts + dur, hi) - np.maximum(ts, lo), 0, None).sum())


def test_row_order(big: tuple[Store, Profile]) -> None:
    store, _ = big
    with store.session("big") as (_cur, meta):
        keys = [r["key"] for r in rows_answer(meta)["rows"]]
    assert keys[:16] == [f"q{i}" for i in range(16)]
    assert keys[16:22] == ["tensor.stationary", "tensor.moving", "vector", "scalar", "gpsimd", "sync"]
    assert keys[22:] == ["counter:tensor_util", "counter:pending_dma", "counter:dma_throughput"]


@pytest.mark.parametrize("frac", [1.0, 0.01, 0.0001, 0.000002])
@pytest.mark.parametrize("width", [50, 1500, 8192])
def test_viewport_items_are_capped(big: tuple[Store, Profile], frac: float, width: int) -> None:
    store, _ = big
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        t0 = int(t_max * 0.37)
        t1 = max(t0 + 1, t0 + int(t_max * frac))
        ans = viewport(cur, meta, t0, t1, width, max_items=500)
    for row in ans["rows"]:
        n = len(row["ts"])
        assert n <= max(width, 500), (row["key"], row["mode"], n)
        assert all(len(v) == n for k, v in row.items() if isinstance(v, list))
        if row["mode"] == "buckets":
            assert len(set(row["ts"])) == n and row["ts"] == sorted(row["ts"])


def test_overview_buckets_conserve_busy_time(big: tuple[Store, Profile]) -> None:
    store, p = big
    truth = _row_events(p)
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        ans = viewport(cur, meta, 0, t_max, 1000, max_items=100)
    seen = 0
    for row in ans["rows"]:
        if row["mode"] != "buckets":
            continue
        ts, dur = truth[row["key"]]
        assert sum(row["busy"]) == int(dur.sum())
        assert sum(row["count"]) == ts.size
        assert all(0 <= f <= 1 for f in row["busy_frac"])
        seen += 1
    assert seen == 22


@pytest.mark.parametrize("frac", [0.01, 0.0003])
def test_zoomed_buckets_conserve_busy_time(big: tuple[Store, Profile], frac: float) -> None:
    store, p = big
    truth = _row_events(p)
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        t0 = int(t_max * 0.5) + 3
        t1 = t0 + int(t_max * frac)
        ans = viewport(cur, meta, t0, t1, 200, max_items=1)
    checked = 0
    for row in ans["rows"]:
        if row["mode"] != "buckets" or not row["ts"]:
            continue
        ts, dur = truth[row["key"]]
        lo, hi = row["ts"][0], row["ts"][-1] + row["dur"][-1]
        if frac < 0.001:  # finer than the pyramid: aggregated from the events, clipped to the window
            lo, hi = max(lo, t0), min(hi, t1)
        assert sum(row["busy"]) == _overlap(ts, dur, lo, hi), row["key"]
        checked += 1
    assert checked >= 10


def test_events_mode_returns_exactly_the_overlapping_events(big: tuple[Store, Profile]) -> None:
    store, p = big
    truth = _row_events(p)
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        t0, t1 = int(t_max * 0.2), int(t_max * 0.2) + int(t_max * 0.002)
        ans = viewport(cur, meta, t0, t1, 1000, ["vector", "q3"])
    assert [r["key"] for r in ans["rows"]] == ["vector", "q3"]
    for row in ans["rows"]:
        assert row["mode"] == "events"
        ts, dur = truth[row["key"]]
        want = np.sort(ts[(ts < t1) & (ts + dur > t0)])
        assert row["ts"] == want.tolist()
        names = [ans["opcodes"][o] for o in row["op"]]
        assert all(isinstance(n, str) for n in names)
    vector = ans["rows"][0]
    t = p.instructions.filter(pc.equal(p.instructions["track"], "vector"))
    ts, dur = t["ts"].to_numpy(), t["duration"].to_numpy()
    m = (ts < t1) & (ts + dur > t0)
    want = [x for _, x in sorted(zip(ts[m], np.array(t["layer"].to_pylist())[m], strict=True))]
    assert [ans["layers"][i] for i in vector["layer"]] == want
    assert [ans["opcodes"][o] for o in vector["op"]] == [
        x for _, x in sorted(zip(ts[m], np.array(t["opcode"].to_pylist())[m], strict=True))
    ]


def test_counters_are_min_max_per_pixel(big: tuple[Store, Profile]) -> None:
    store, p = big
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        ans = viewport(cur, meta, 0, t_max, 400, ["counter:pending_dma", "counter:dma_throughput"])
    for row in ans["rows"]:
        assert row["mode"] == "counter" and 0 < len(row["ts"]) <= 400
        assert all(lo <= m <= hi for lo, m, hi in zip(row["min"], row["mean"], row["max"], strict=True))
    pending, throughput = ans["rows"]
    assert max(pending["max"]) <= 16  # 16 queues, one transfer in flight each
    # time integrals: pending count x time = total DMA time; GB/s x ns = total bytes
    integral = sum(m * d for m, d in zip(pending["mean"], pending["dur"], strict=True))
    assert integral == pytest.approx(int(p.dma["duration"].to_numpy().sum()), rel=1e-5)
    moved = sum(m * d for m, d in zip(throughput["mean"], throughput["dur"], strict=True))
    assert moved == pytest.approx(int(p.dma["bytes"].to_numpy().sum()), rel=1e-5)


def test_tensor_utilisation_is_busy_percent(big: tuple[Store, Profile]) -> None:
    store, p = big
    truth = _row_events(p)
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        util = viewport(cur, meta, 0, t_max, 300, ["counter:tensor_util"])["rows"][0]
    assert min(util["min"]) >= 0 and max(util["max"]) <= 100
    busy = sum(m / 100 * d for m, d in zip(util["mean"], util["dur"], strict=True))
    assert busy == pytest.approx(int(truth["tensor.moving"][1].sum()), rel=1e-5)


def test_viewport_rejects_bad_windows(big: tuple[Store, Profile]) -> None:
    store, _ = big
    with store.session("big") as (cur, meta):
        for args in ((10, 10, 100), (10, 5, 100), (0, 100, 0), (0, 100, 100_000)):
            with pytest.raises(NprofError):
                viewport(cur, meta, *args)
        with pytest.raises(NprofError, match="unknown row"):
            viewport(cur, meta, 0, 100, 10, ["nope"])


def test_bucketize_splits_long_events_exactly() -> None:
    ts = np.array([5, 30])
    dur = np.array([20, 0])
    b = bucketize(ts, dur, np.array([1, 2]), np.array([100, 7]), np.zeros(2), 0, 10, 4)
    assert b.busy.tolist() == [5, 10, 5, 0]
    assert b.count.tolist() == [1, 0, 0, 1]
    assert b.nbytes.tolist() == [25.0, 50.0, 25.0, 7.0]
    assert b.op.tolist() == [1, 1, 1, 2]


def test_search_matches_numpy(big: tuple[Store, Profile]) -> None:
    store, p = big
    ops = np.array(p.instructions["opcode"].to_pylist())
    layers = np.array(p.instructions["layer"].to_pylist())
    ts, dur = p.instructions["ts"].to_numpy(), p.instructions["duration"].to_numpy()
    with store.session("big") as (cur, _meta):
        res = search(cur, {"opcode": "/^MAT/"}, None, None, 50)
        assert res["total"] == int((ops == "MATMUL").sum())
        assert len(res["hits"]) == 50 and res["truncated"]
        assert [h["ts"] for h in res["hits"]] == sorted(h["ts"] for h in res["hits"])
        res = search(cur, {"nki_source_location": "/./"}, None, None, 10)
        assert res["total"] == p.instructions.num_rows  # every synthetic instruction has a source line
        mask = (ops == "MATMUL") & np.char.startswith(layers, "model.layers.3.")
        t0, t1 = int(ts.max() * 0.25), int(ts.max() * 0.5)
        res = search(cur, {"opcode": "MATMUL", "layer": r"/layers\.3\./"}, t0, t1, 20000)
        assert res["total"] == int(mask.sum())
        in_range = mask & (ts < t1) & (ts + dur > t0)
        assert res["in_range"] == int(in_range.sum()) == len(res["hits"])
        assert res["summary"]["by_opcode"] == [
            {"opcode": "MATMUL", "count": int(in_range.sum()), "duration": int(dur[in_range].sum())}
        ]
        assert res["summary"]["by_engine"][0]["engine"] == "tensor"
        dma = search(cur, {"track": "q3", "direction": "hbm->sbuf"}, None, None, 10)
        q = np.array(p.dma["queue"].to_pylist())
        d = np.array(p.dma["direction"].to_pylist())
        assert dma["total"] == int(((q == "q3") & (d == "hbm->sbuf")).sum())
        with pytest.raises(NprofError, match="regex"):
            search(cur, {"opcode": "/(/"}, None, None, 10)
        with pytest.raises(NprofError, match="unknown search field"):
            search(cur, {"bogus": "1"}, None, None, 10)
        with pytest.raises(NprofError):
            search(cur, {}, None, None, 10)


def test_box_select_by_hand(big: tuple[Store, Profile]) -> None:
    store, _ = big
    with store.session("tiny") as (cur, meta):
        res = box_select(cur, meta, 50, 350, ["q0", "tensor.moving", "vector"])
    assert res["count"] == 3
    assert res["total_duration"] == 100 + 200 + 100
    assert res["busy_in_window"] == 50 + 200 + 50
    assert (res["first_ts"], res["last_end"], res["dma_bytes"]) == (0, 400, 4096)
    assert res["by_opcode"] == [
        {"opcode": "MATMUL", "count": 1, "duration": 200},
        {"opcode": "TENSOR_TENSOR", "count": 1, "duration": 100},
        {"opcode": "hbm->sbuf", "count": 1, "duration": 100},
    ]
    assert res["by_transfer_size"] == [
        {"bucket": "4 KiB-16 KiB", "min_bytes": 4096, "max_bytes": 16383, "count": 1, "bytes": 4096, "duration": 100}
    ]
    assert res["by_source"] == [
        {"source": "kernel.py:10", "count": 1, "duration": 200},
        {"source": "(none)", "count": 1, "duration": 100},
        {"source": "kernel.py:12", "count": 1, "duration": 100},
    ]
    with store.session("tiny") as (cur, meta):
        assert box_select(cur, meta, 460, 500, None)["count"] == 0


def test_box_select_matches_numpy_on_big(big: tuple[Store, Profile]) -> None:
    store, p = big
    truth = _row_events(p)
    with store.session("big") as (cur, meta):
        t_max = meta["stats"]["t_max"]
        t0, t1 = int(t_max * 0.3), int(t_max * 0.35)
        res = box_select(cur, meta, t0, t1, ["vector", "q1", "q2"])
    count = busy = 0
    for key in ("vector", "q1", "q2"):
        ts, dur = truth[key]
        m = (ts < t1) & (ts + dur > t0)
        count += int(m.sum())
        busy += _overlap(ts[m], dur[m], t0, t1)
    assert res["count"] == count and res["busy_in_window"] == busy
    dma_count = sum(r["count"] for r in res["by_row"] if r["row"] in ("q1", "q2"))
    assert sum(r["count"] for r in res["by_transfer_size"]) == dma_count


def test_event_details_and_dependencies(big: tuple[Store, Profile]) -> None:
    store, _ = big
    with store.session("tiny") as (cur, _meta):
        d = event_details(cur, 2)
        assert (d["kind"], d["row"], d["opcode"], d["ts"], d["dur"]) == (
            "instruction",
            "tensor.moving",
            "MATMUL",
            100,
            200,
        )
        groups = {g["name"]: {f["key"]: f for f in g["fields"]} for g in d["groups"]}
        assert groups["Timing"]["end"]["value"] == 300 and groups["Timing"]["ts"]["unit"] == "ns"
        assert groups["Source"]["nki_source_location"]["value"] == "kernel.py:10"
        assert groups["Operands"]["opcode"]["help"]
        assert groups["Memory"]["psum_write_bytes"]["value"] == 262144
        assert [x["id"] for x in d["deps"]] == [1] and d["deps"][0]["row"] == "q0"
        assert [x["id"] for x in d["dependents"]] == [3]
        dma = event_details(cur, 4)
        assert dma["kind"] == "dma" and dma["row"] == "q1" and [x["id"] for x in dma["deps"]] == [3]
        with pytest.raises(NotFound):
            event_details(cur, 999)


def test_real_hardware_tracks_and_sampled_counters(tmp_path: Path) -> None:
    from nprof.profile import ProfileInfo

    p = Profile.build(
        ProfileInfo(device="cpu", name="cpu-run"),
        instructions={
            "id": [1, 2, 3],
            "ts": [0, 50, 10],
            "duration": [40, 40, 30],
            "engine": ["tensor", "vector", "other"],
            "track": ["cpu:11", "cpu:11", "cpu:7"],
            "opcode": ["aten::mm", "aten::add", "aten::copy_"],
        },
        dma={"id": [4], "ts": [5], "duration": [10], "queue": ["memcpy:0"], "direction": ["hbm->hbm"], "bytes": [64]},
        counters={"ts": [0, 20, 40, 60], "name": ["cpu_percent"] * 4, "value": [10.0, 90.0, 30.0, 50.0]},
    )
    store = Store(tmp_path / "s")
    store.ingest(p, "cpu")
    with store.session("cpu") as (cur, meta):
        keys = [(r["key"], r["kind"]) for r in rows_answer(meta)["rows"]]
        assert keys == [
            ("memcpy:0", "dma"),
            ("cpu:7", "track"),
            ("cpu:11", "track"),
            ("counter:pending_dma", "counter"),
            ("counter:dma_throughput", "counter"),
            ("counter:cpu_percent", "counter"),
        ]
        ans = viewport(cur, meta, 0, 100, 2, ["cpu:11", "counter:cpu_percent"])
        assert ans["rows"][0]["mode"] == "events" and ans["rows"][0]["ts"] == [0, 50]
        cpu = ans["rows"][1]
        assert (cpu["ts"], cpu["min"], cpu["max"]) == ([0, 60], [10.0, 50.0], [90.0, 50.0])  # pixels [0,50), [50,100)
        assert cpu["mean"] == pytest.approx([130 / 3, 50.0])
    store.close()


def test_a_row_with_one_huge_event_is_read_on_its_own(tmp_path: Path) -> None:
    from nprof.profile import ProfileInfo

    n = 5000
    short_ts = np.arange(n, dtype=np.int64) * 200
    p = Profile.build(
        ProfileInfo(device="cpu", name="nested"),
        instructions={
            "id": np.arange(n + 1),
            "ts": np.concatenate([[0], short_ts]),
            "duration": np.concatenate([[n * 200], np.full(n, 100)]),
            "engine": ["other"] * (n + 1),
            "track": ["cpu:1"] + ["cpu:2"] * n,
            "opcode": ["ProfilerStep#1"] + ["aten::add"] * n,
        },
    )
    store = Store(tmp_path / "s")
    store.ingest(p, "nested")
    with store.session("nested") as (cur, meta):
        ans = viewport(cur, meta, 500_000, 500_950, 100)
        rows = {r["key"]: r for r in ans["rows"]}
        assert rows["cpu:1"]["mode"] == "events" and rows["cpu:1"]["id"] == [0]
        assert rows["cpu:2"]["ts"] == [500_000, 500_200, 500_400, 500_600, 500_800]
    store.close()
