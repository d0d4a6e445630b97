"""Shared helpers for the nki tests: small kernels run on the virtual device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki


def rand(shape: tuple[int, ...], seed: int = 0, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def tile_kernel(fn: Callable[..., Any], out_dtype: Any = None) -> Callable[..., Any]:
    """A kernel loading each argument whole into one tile, applying `fn`, storing the result."""

    def kernel(*tensors):
        tiles = [nl.load(t) for t in tensors]
        res = fn(*tiles)
        out = nl.ndarray(res.shape, dtype=out_dtype or res.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=res)
        return out

    return kernel


def run_tiles(fn: Callable[..., Any], *arrays: np.ndarray, out_dtype: Any = None) -> np.ndarray:
    return nki.simulate_kernel(tile_kernel(fn, out_dtype), *arrays)


def quantize_scales(src: Any) -> Any:
    """A trn3 kernel: load a [32, 16] input, `nisa.quantize_mx` it to float8_e4m3fn_x4, return the [32, 4] uint8
    scales (a program with an MX instruction, for the tests of where MX may run)."""

    t = nl.ndarray(src.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    data = nl.ndarray((32, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    scale = nl.ndarray((32, 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(dst=data, src=t, dst_scale=scale)
    out = nl.ndarray((32, 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=scale)
    return out


def dst_matmul(tile_position: Any = (), tile_size: Any = ()) -> Callable[..., Any]:
    """A kernel in the beta-2 call style: a.T @ b by one `nc_matmul` into a PSUM `dst` (optionally in a tiling-mode
    tile), copied to SBUF and stored to a new HBM output."""

    def kernel(a, b):
        sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=sa, src=a)
        nisa.dma_copy(dst=sb, src=b)
        acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, sa, sb, tile_position=tile_position, tile_size=tile_size)
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    return kernel


def replayed_as_plain(kernel: Callable[..., Any], shapes: list[tuple[int, ...]], monkeypatch: Any,
                      dtype: Any = nl.float32, **kw: Any) -> int:  # fmt: skip
    """Trace `kernel` on tensors of `shapes` (`dtype`; `kw` to the trace) with loop replay off, then on; assert the
    two Programs are equal (every instruction, meta, SBUF/PSUM bytes, tensors); return the iterations replayed."""
    from nprof.nki import replay
    from nprof.nki.kernel import Kernel
    from nprof.nki.typing import tensor

    def traced() -> Any:
        return Kernel(kernel).trace(*(tensor[list(s), dtype] for s in shapes), **kw).program

    monkeypatch.setattr(replay, "ENABLED", False)
    plain = traced()
    monkeypatch.setattr(replay, "ENABLED", True)
    before = replay.STATS["iterations"]
    fast = traced()
    replayed = replay.STATS["iterations"] - before
    assert len(fast.instructions) == len(plain.instructions)
    for i, (a, b) in enumerate(zip(plain.instructions, fast.instructions, strict=True)):
        assert a == b, f"instruction {i}: plain {a}\nreplayed {b}"
    assert dict(fast.meta) == dict(plain.meta)
    assert (fast.sbuf_bytes, fast.psum_bytes, fast.tensors) == (plain.sbuf_bytes, plain.psum_bytes, plain.tensors)
    return int(replayed)
