"""Presets: the public figures, their derived values, and lookup errors."""

from __future__ import annotations

import dataclasses

import pytest

from nprof.arch.presets import PRESETS, Preset, get_preset
from nprof.errors import NprofError


def test_three_generations_exist() -> None:
    assert set(PRESETS) == {"trn1", "trn2", "trn3"}
    assert get_preset("trn1").core == "NeuronCore-v2"
    assert get_preset("trn2").core == "NeuronCore-v3"
    assert get_preset("trn3").core == "NeuronCore-v4"


def test_trn3_published_figures_and_stated_assumptions() -> None:
    """NKI Trainium3 guide / NeuronCore-v4 page: 79 BF16, 315 MX, 20 FP32 TFLOPS per core, SBUF 32 MiB, PSUM
    2 MiB, 8 cores; what is not published is listed in `assumptions` and recorded in every profile."""
    from nprof.arch.cost import model_meta

    p = get_preset("trn3")
    assert p.peak("bfloat16") == pytest.approx(79e12, rel=0.01)
    assert p.peak("mxfp8_e4m3_x4") == pytest.approx(315e12, rel=0.01)
    assert p.peak("float32") == pytest.approx(20e12, rel=0.02)
    assert (p.sbuf_bytes, p.psum_bytes, p.cores_per_chip) == (32 * 1024 * 1024, 2 * 1024 * 1024, 8)
    assert "ASSUMED" in p.assumptions and "DMA fixed latency" in p.assumptions
    assert model_meta(p)["preset_assumptions"] == p.assumptions
    assert "preset_assumptions" not in model_meta(get_preset("trn2"))


def test_unknown_name_lists_valid_presets() -> None:
    with pytest.raises(NprofError, match="unknown device preset 'inf9'; valid presets: trn1, trn2, trn3"):
        get_preset("inf9")


def test_preset_passes_through_and_is_frozen() -> None:
    p = get_preset("trn1")
    assert get_preset(p) is p
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.min_ii = 1  # type: ignore[misc]


@pytest.mark.parametrize(("name", "bf16_tflops", "fp32_tflops"), [("trn1", 92, 23), ("trn2", 79, 20)])
def test_peaks_match_the_published_figures(name: str, bf16_tflops: float, fp32_tflops: float) -> None:
    p = get_preset(name)
    assert p.peak("bfloat16") == pytest.approx(bf16_tflops * 1e12, rel=0.01)
    assert p.peak("float32") == pytest.approx(fp32_tflops * 1e12, rel=0.02)
    # one moving column per TensorE cycle on a 128x128 array is the bf16 peak
    assert p.peak("bfloat16") == 2 * p.partitions * p.gemm_stationary_fmax * p.tensor_clock_hz


def test_trn2_fp8_is_twice_bf16() -> None:
    assert get_preset("trn2").peak("float8_e4m3") == 2 * get_preset("trn2").peak("bfloat16")
    assert get_preset("trn1").peak("float8_e5m2") == get_preset("trn1").peak("bfloat16")


def test_geometry_and_limits() -> None:
    assert get_preset("trn1").sbuf_bytes == 24 * 1024 * 1024  # 128 x 192 KiB
    assert get_preset("trn2").sbuf_bytes == 28 * 1024 * 1024  # 128 x 224 KiB
    assert (get_preset("trn1").cc_cores, get_preset("trn2").cc_cores) == (6, 20)
    for p in PRESETS.values():
        assert p.psum_bytes == 2 * 1024 * 1024
        assert p.psum_banks * p.psum_bank_bytes == p.psum_partition_bytes
        assert p.psum_fmax * 4 == p.psum_bank_bytes
        assert (p.pmax, p.gemm_stationary_fmax, p.gemm_moving_fmax) == (128, 128, 512)
        assert (p.dma_queues, p.min_ii, p.static_access_cycles) == (16, 64, 60)
        assert p.dma_latency_ns == 1300.0


def test_clocks_and_bandwidths() -> None:
    t1, t2 = get_preset("trn1"), get_preset("trn2")
    assert (t1.vector_clock_hz, t1.scalar_clock_hz, t1.gpsimd_clock_hz, t1.profiler_clock_hz) == (
        1.12e9, 1.4e9, 1.4e9, 1.4e9,
    )  # fmt: skip
    assert (t2.vector_clock_hz, t2.scalar_clock_hz, t2.tensor_clock_hz, t2.profiler_clock_hz) == (
        0.96e9, 1.2e9, 2.4e9, 1.2e9,
    )  # fmt: skip
    assert t1.dma_queue_bandwidth == 17e9 and t1.hbm_bandwidth == 410e9
    assert t2.dma_queue_bandwidth == 23e9 and t2.hbm_bandwidth == 362.5e9
    assert t1.clock_hz("dma") == t1.profiler_clock_hz


def test_every_field_is_documented_in_the_source() -> None:
    import inspect

    from nprof.arch import presets

    src = inspect.getsource(presets.Preset)
    for f in dataclasses.fields(Preset):
        line = next(ln for ln in src.splitlines() if ln.strip().startswith(f"{f.name}:"))
        assert "#" in line, f"field {f.name} has no comment"


def test_trn3_plain_fp8_peak_is_the_bf16_rate_and_mx_its_own() -> None:
    """On NeuronCore-v4 a plain FP8 matmul runs at the BF16 rate (fp8_matmul_speedup 1), so its MFU is against
    79 TFLOPS, not the 315 TFLOPS that only MX matmuls reach; trn1/trn2 have no MX rate of their own."""
    p = get_preset("trn3")
    assert p.peak("float8_e4m3") == p.peak("bfloat16") * p.fp8_matmul_speedup
    assert p.peak("mx") == p.peak("mxfp4_e2m1_x4") == 4 * p.peak("bfloat16")
    for name in ("trn1", "trn2"):
        q = get_preset(name)
        assert q.peak("float8_e4m3") == q.peak("bfloat16") * q.fp8_matmul_speedup


def test_clock_hz_is_the_engines_clock_and_the_profiler_clock_otherwise() -> None:
    for p in PRESETS.values():
        table = {"tensor": p.tensor_clock_hz, "vector": p.vector_clock_hz, "scalar": p.scalar_clock_hz,
                 "gpsimd": p.gpsimd_clock_hz, "sync": p.sync_clock_hz}  # fmt: skip
        for engine in (*table, "dma", "cc", "other"):
            assert p.clock_hz(engine) == table.get(engine, p.profiler_clock_hz), (p.name, engine)
