"""summary_metrics checked against hand calculations on tiny_profile() and small profiles."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from nprof.analysis import describe, summary_metrics
from nprof.profile import Profile, ProfileInfo
from tests.analysis.helpers import make
from tests.conftest import tiny_profile

MM_FLOPS = 2 * 128 * 128 * 512


def test_tiny_hand_numbers() -> None:
    m = summary_metrics(tiny_profile())
    assert list(m)[:4] == ["total_time", "event_count", "nc_idx", "nd_idx"]
    assert m["total_time"] == pytest.approx(450e-9)
    assert m["event_count"] == 4
    assert m["tensor_engine_active_time"] == pytest.approx(200e-9)
    assert m["tensor_engine_instruction_time"] == pytest.approx(200e-9)
    assert m["tensor_engine_active_time_percent"] == pytest.approx(200 / 450 * 100)
    assert m["vector_engine_instruction_count"] == 1
    assert m["scalar_engine_instruction_count"] == 0
    assert m["dma_transfer_total_bytes"] == 5120
    assert m["dma_transfer_count"] == 2
    assert m["dma_transfer_average_bytes"] == 2560
    assert m["dma_queue_count"] == 2
    assert m["dma_active_time"] == pytest.approx(150e-9)
    assert m["model_flops"] == MM_FLOPS
    # MFU = model FLOPs / (peak 1e12 FLOP/s * 450 ns)
    assert m["mfu_estimated_percent"] == pytest.approx(100 * MM_FLOPS / (1e12 * 450e-9))
    # HBM: 4096 read by the hbm->sbuf DMA, 1024 written by the sbuf->hbm DMA
    assert (m["hbm_read_bytes"], m["hbm_write_bytes"]) == (4096, 1024)
    assert m["mbu_estimated_percent"] == pytest.approx(100 * 5120 / 450e-9 / 1e11)
    assert m["sbuf_read_bytes"] == 131072 + 65536 + 1024
    assert m["sbuf_write_bytes"] == 4096
    assert m["psum_write_bytes"] == 262144
    assert m["mm_arithmetic_intensity"] == pytest.approx(MM_FLOPS / 5120)
    assert m["peak_flops_bandwidth_ratio"] == pytest.approx(10.0)
    assert m["bound"] == "compute"
    assert "cc_op_time" not in m  # no collectives: not invented


def test_memory_bound_verdict_and_transpose() -> None:
    p = make(
        {"ts": [0, 100], "duration": [100, 100], "engine": ["tensor", "tensor"], "hw_flops": [1000, 600],
         "flops": [1000, 0], "is_transpose": [False, True]},
        {"ts": [0], "duration": [200], "bytes": [1000]},
        peak_flops=1e12, hbm_bandwidth=1e10,
    )  # fmt: skip
    m = summary_metrics(p)
    assert m["mbu_estimated_percent"] == pytest.approx(50.0)  # not low utilisation: the roofline decides
    assert m["transpose_flops"] == 600
    assert m["hardware_flops"] == 1600
    assert m["mm_arithmetic_intensity"] == pytest.approx(1.0)  # (1600 - 600) / 1000
    assert m["bound"] == "memory"


def test_active_time_is_union_and_instruction_time_is_sum() -> None:
    p = make({"ts": [0, 50, 300], "duration": [100, 100, 10], "engine": ["scalar"] * 3})
    m = summary_metrics(p)
    assert m["scalar_engine_instruction_time"] == pytest.approx(210e-9)
    assert m["scalar_engine_active_time"] == pytest.approx(160e-9)


def test_cpu_profile_has_no_invented_fields() -> None:
    info = ProfileInfo(device="cpu", name="cpu run")
    p = Profile.build(
        info,
        instructions={"id": [1, 2], "ts": [0, 10], "duration": [5, 5], "engine": ["other", "tensor"],
                      "track": ["cpu:1", "cpu:1"], "opcode": ["aten::relu", "aten::mm"]},
    )  # fmt: skip
    m = summary_metrics(p)
    assert "psum_read_bytes" not in m and "sbuf_read_bytes" not in m
    assert "dma_transfer_count" not in m
    assert "mfu_estimated_percent" not in m  # no peak known
    assert "bound" not in m
    assert "scalar_engine_active_time" not in m  # engines that did not run on a CPU profile are not listed
    assert m["other_engine_instruction_count"] == 1
    assert m["tensor_engine_instruction_count"] == 1


def test_collective_fields() -> None:
    info = ProfileInfo(device="virtual-neuroncore", rank=1, world_size=2)
    p = Profile.build(
        info,
        collectives={"id": [7, 7, 8], "kind": ["all-reduce"] * 3, "bytes": [64] * 3, "rank": [0, 1, 1],
                     "ts": [0, 10, 100], "duration": [50, 40, 20], "wait_ns": [0, 15, 5]},
    )  # fmt: skip
    m = summary_metrics(p)
    assert m["cc_op_count"] == 2  # rank 1's ops only
    assert m["cc_op_time"] == pytest.approx(60e-9)
    assert m["cc_wait_time"] == pytest.approx(20e-9)


def test_every_field_is_described() -> None:
    for name in summary_metrics(tiny_profile()):
        group, unit, text = describe(name)
        assert group and text and isinstance(unit, str)


def test_empty_profile() -> None:
    m = summary_metrics(Profile.build(ProfileInfo(device="virtual-neuroncore")))
    assert m["total_time"] == 0 and m["event_count"] == 0
    assert all(not isinstance(v, float) or math.isfinite(v) for v in m.values())


def test_a_trace_that_records_no_writes_shows_no_write_bytes() -> None:
    """A Chrome import estimates reads only: no `hbm_write_bytes: 0` presented as a figure."""
    from pathlib import Path

    from nprof.capture.chrome import import_chrome_trace

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "kineto_cuda_small.json"
    m = summary_metrics(import_chrome_trace(fixture))
    assert m["hbm_read_bytes"] > 0 and "hbm_write_bytes" not in m
    assert "mbu_estimated_percent" in m


@pytest.mark.parametrize("seed", range(8))
def test_memory_bytes_match_a_per_event_sum(seed: int) -> None:
    """The summary's <mem>_read/write_bytes held to plain sums over the instructions and DMA transfers."""
    rng = np.random.default_rng(seed)
    n_i, n_d = int(rng.integers(1, 40)), int(rng.integers(1, 60))
    cols = {
        f"{m}_{w}_bytes": rng.integers(0, 1000, n_i).tolist()
        for m in ("hbm", "sbuf", "psum")
        for w in ("read", "write")
    }
    directions = ["hbm->sbuf", "sbuf -> hbm", "sbuf->sbuf", "psum->sbuf", None]
    p = make(
        {"ts": list(range(n_i)), "duration": [1] * n_i, **cols},
        {"ts": list(range(n_d)), "duration": [1] * n_d, "bytes": rng.integers(0, 5000, n_d).tolist(),
         "direction": [directions[int(k)] for k in rng.integers(0, len(directions), n_d)]},
    )  # fmt: skip
    m = summary_metrics(p)
    for mem in ("hbm", "sbuf", "psum"):
        for way, side in (("read", 0), ("write", 1)):
            want = sum(cols[f"{mem}_{way}_bytes"]) + sum(
                e["bytes"] for e in p.dma.to_pylist()
                if e["direction"] and e["direction"].split("->")[side].strip() == mem
            )  # fmt: skip
            assert m[f"{mem}_{way}_bytes"] == want, (mem, way)


def test_repeat_string_is_n_copies() -> None:
    counters = importlib.import_module("nprof.analysis.counters")
    for value, n in (("pending_dma", 5), ("", 3), ("x", 0), ("é", 2)):
        arr = counters.repeat_string(value, n)
        arr.validate(full=True)
        assert arr.to_pylist() == [value] * n
