"""Peak FLOP/s and memory bandwidth of real devices, for MFU / MBU of real-hardware profiles.

Contract:
* `gpu_peaks(device_name, dtype)` -> (peak FLOP/s, bytes/s, source) from a small
  table of public datasheet figures (dense, no sparsity), matched by substring of
  ``torch.cuda.get_device_name()`` (longest key wins); the tensor-core peak is
  used when the profile's FLOP-carrying ops run in bf16/fp16, else the FP32 peak.
  None for an unknown GPU.
* `cpu_peaks()` -> (FLOP/s, bytes/s, source) or None for this machine's CPU: the
  env var ``NPROF_CPU_PEAKS="flops,bytes_per_s"`` overrides, ``NPROF_CPU_PEAKS=off``
  disables; otherwise a one-off calibration (best of a few float32 1024^3 numpy
  matmuls on all cores, and a 256 MiB array copy counting read + write bytes) is
  cached in ``$XDG_CACHE_HOME/nprof/calibration.json`` (default ``~/.cache``) keyed
  by CPU model and core count.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import orjson

from nprof.errors import NprofError

# name substring: (FP32 FLOP/s, BF16/FP16 tensor-core FLOP/s dense, memory bytes/s); NVIDIA datasheets
GPUS: dict[str, tuple[float, float, float]] = {
    "H100 SXM": (67e12, 989e12, 3.35e12),
    "H100 NVL": (60e12, 835e12, 3.9e12),
    "H100 PCIe": (51e12, 756e12, 2.0e12),
    "H100": (67e12, 989e12, 3.35e12),
    "H200": (67e12, 989e12, 4.8e12),
    "A100-SXM4-80GB": (19.5e12, 312e12, 2.039e12),
    "A100 80GB PCIe": (19.5e12, 312e12, 1.935e12),
    "A100-PCIE-40GB": (19.5e12, 312e12, 1.555e12),
    "A100": (19.5e12, 312e12, 1.555e12),
    "A10G": (31.2e12, 125e12, 600e9),
    "A10": (31.2e12, 125e12, 600e9),
    "L40S": (91.6e12, 362e12, 864e9),
    "L4": (30.3e12, 121e12, 300e9),
    "T4": (8.1e12, 65e12, 320e9),
    "V100-SXM2": (15.7e12, 125e12, 900e9),
    "V100": (14e12, 112e12, 900e9),
    "RTX 4090": (82.6e12, 165e12, 1.008e12),
    "RTX 3090": (35.6e12, 71e12, 936e9),
}
_LOW_PRECISION = ("bfloat16", "half", "float16", "bf16", "fp16")


def gpu_peaks(device_name: str, dtype: str | None = None) -> tuple[float, float, str] | None:
    """Datasheet peaks for a GPU name (see module doc); None if the GPU is not in the table."""
    matches = [key for key in GPUS if key.lower() in device_name.lower()]
    if not matches:
        return None
    key = max(matches, key=len)
    fp32, tensor, bandwidth = GPUS[key]
    low = dtype is not None and any(word in dtype.lower() for word in _LOW_PRECISION)
    which = "BF16/FP16 tensor-core" if low else "FP32"
    return (tensor if low else fp32), bandwidth, f"device table: {key} {which} peak, datasheet memory bandwidth"


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux) and logical core count."""
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name or platform.processor() or platform.machine()} x{os.cpu_count() or 1}"


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nprof" / "calibration.json"


def calibrate(copy_mib: int = 256) -> tuple[float, float]:
    """Measure (FLOP/s, bytes/s) of this CPU: best-of float32 matmul and a `copy_mib` MiB array copy."""
    import numpy as np

    n = 1024
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up (thread pool, pages)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    flops = 2.0 * n**3 / best
    src = np.ones(copy_mib * 1024 * 1024 // 8, dtype=np.float64)  # large enough to defeat the caches
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return flops, 2.0 * src.nbytes / best


def cpu_peaks() -> tuple[float, float, str] | None:
    """Peaks of this CPU (see module doc)."""
    env = os.environ.get("NPROF_CPU_PEAKS", "").strip()
    if env.lower() in ("off", "0", "none", "no"):
        return None
    if env:
        try:
            flops_text, bw_text = env.split(",")
            flops, bw = float(flops_text), float(bw_text)
            if flops <= 0 or bw <= 0:
                raise ValueError
        except ValueError:
            raise NprofError(
                f"NPROF_CPU_PEAKS={env!r}: expected 'FLOPS,BYTES_PER_S' (e.g. 1e12,5e10) or 'off'"
            ) from None
        return flops, bw, "NPROF_CPU_PEAKS environment variable"
    model = cpu_model()
    path = _cache_file()
    try:
        cached = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    entry = cached.get(model)
    if not (isinstance(entry, dict) and entry.get("flops", 0) > 0 and entry.get("bytes_per_s", 0) > 0):
        flops, bw = calibrate()
        entry = {"flops": flops, "bytes_per_s": bw, "measured": time.strftime("%Y-%m-%d")}
        cached[model] = entry
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(orjson.dumps(cached, option=orjson.OPT_INDENT_2))
            os.replace(tmp, path)
        except OSError:
            pass  # an unwritable cache only costs a re-calibration next time
    source = (
        f"calibration on {model} ({entry.get('measured', '?')}): float32 1024^3 matmul, 256 MiB copy "
        f"(read+write); cached in {path}"
    )
    return float(entry["flops"]), float(entry["bytes_per_s"]), source
