"""Device peaks: the GPU table, the CPU calibration cache and its environment override."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from nprof.capture import devices
from nprof.errors import NprofError


def test_gpu_table_matches_names_and_precision() -> None:
    fp32 = devices.gpu_peaks("NVIDIA A100-SXM4-80GB", "float")
    assert fp32 is not None and fp32[:2] == (19.5e12, 2.039e12)
    bf16 = devices.gpu_peaks("NVIDIA A100-SXM4-80GB", "c10::BFloat16")
    assert bf16 is not None and bf16[0] == 312e12 and "tensor-core" in bf16[2]
    h100 = devices.gpu_peaks("NVIDIA H100 80GB HBM3", "c10::Half")
    assert h100 is not None and h100[0] == 989e12
    assert devices.gpu_peaks("NVIDIA L4", None) == (30.3e12, 300e9, devices.gpu_peaks("NVIDIA L4")[2])  # type: ignore[index]
    assert devices.gpu_peaks("Tesla T4", "float")[0] == 8.1e12  # type: ignore[index]
    assert devices.gpu_peaks("NVIDIA A10G", "float")[2].startswith("device table: A10G")  # type: ignore[index]
    assert devices.gpu_peaks("Some Future GPU") is None


def test_env_override_and_disable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPROF_CPU_PEAKS", "1.5e12,6e10")
    assert devices.cpu_peaks() == (1.5e12, 6e10, "NPROF_CPU_PEAKS environment variable")
    monkeypatch.setenv("NPROF_CPU_PEAKS", "off")
    assert devices.cpu_peaks() is None
    monkeypatch.setenv("NPROF_CPU_PEAKS", "fast")
    with pytest.raises(NprofError, match="NPROF_CPU_PEAKS"):
        devices.cpu_peaks()


def test_calibration_is_measured_once_and_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []

    def fake_calibrate() -> tuple[float, float]:
        calls.append(1)
        return 3e11, 2e10

    monkeypatch.delenv("NPROF_CPU_PEAKS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(devices, "calibrate", fake_calibrate)
    first = devices.cpu_peaks()
    second = devices.cpu_peaks()
    assert first is not None and first[:2] == (3e11, 2e10) and second == first
    assert len(calls) == 1
    cached = orjson.loads((tmp_path / "nprof" / "calibration.json").read_bytes())
    assert cached[devices.cpu_model()]["flops"] == 3e11
    assert "calibration on" in first[2]


def test_real_calibration_gives_plausible_numbers() -> None:
    flops, bandwidth = devices.calibrate(copy_mib=32)
    assert 1e8 < flops < 1e15
    assert 1e8 < bandwidth < 1e13
