"""MX (OCP Microscaling) on the trn3 preset: nisa.nc_matmul_mx and nisa.quantize_mx against plain numpy
references written from the format definitions (E8M0 scale 2**(e - 127) per 8 partitions x 4 packed values)."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import dst_matmul

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # OCP FP4 E2M1 magnitudes by the low 3 bits; bit 3 is the sign


def _scale_row(p: int) -> int:
    """Scale partition of data partition p: 4 scale rows at the top of each 32-partition quadrant."""
    return 32 * (p // 32) + (p % 32) // 8


def _decode(items: np.ndarray, scales: np.ndarray, kind: str) -> np.ndarray:
    """Dequantized values [K, F, 4] of packed items [K, F] with their scattered scale tile, element by element."""
    k, f = items.shape
    out = np.zeros((k, f, 4))
    for p in range(k):
        for c in range(f):
            scale = 2.0 ** (int(scales[_scale_row(p), c]) - 127)
            for j in range(4):
                if kind == "fp4":
                    code = (int(items[p, c]) >> (4 * j)) & 0xF
                    value = (-1 if code & 8 else 1) * E2M1[code & 7]
                else:
                    byte = np.uint8((int(items[p, c]) >> (8 * j)) & 0xFF)
                    value = float(byte.view(ml_dtypes.float8_e4m3fn if kind == "e4m3" else ml_dtypes.float8_e5m2))
                out[p, c, j] = value * scale
    return out


def _random_items(rng: np.random.Generator, k: int, f: int, kind: str) -> np.ndarray:
    if kind == "fp4":
        return rng.integers(0, 1 << 16, (k, f), dtype=np.uint16)
    elem = ml_dtypes.float8_e4m3fn if kind == "e4m3" else ml_dtypes.float8_e5m2
    return rng.uniform(-3, 3, (k, 4 * f)).astype(elem).view(np.uint8).view(np.uint32)


def _random_scales(rng: np.random.Generator, k: int, f: int) -> np.ndarray:
    scales = np.zeros((k, f), np.uint8)  # rows outside the quadrant layout stay 0 (unused)
    for p in range(0, k, 8):
        scales[_scale_row(p)] = rng.integers(118, 134, f)
    return scales


X4 = {"e4m3": nl.float8_e4m3fn_x4, "e5m2": nl.float8_e5m2_x4, "fp4": nl.float4_e2m1fn_x4}


def _mx_kernel(x4: object, out_dtype: object, twice: bool = False):
    def kernel(st_items, st_scale, mv_items, mv_scale):
        m = st_items.shape[1]
        n = mv_items.shape[1]
        tiles = []
        for items, scale in ((st_items, st_scale), (mv_items, mv_scale)):
            data = nl.ndarray(items.shape, dtype=x4, buffer=nl.sbuf)
            nisa.dma_copy(dst=data, src=items.view(x4))
            s = nl.ndarray(scale.shape, dtype=nl.uint8, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=scale)
            tiles += [data, s]
        acc = nl.ndarray((m, n), dtype=out_dtype, buffer=nl.psum)
        for _ in range(2 if twice else 1):  # the second call accumulates (accumulate=None: inferred)
            nisa.nc_matmul_mx(dst=acc, stationary=tiles[0], moving=tiles[2], stationary_scale=tiles[1],
                              moving_scale=tiles[3])  # fmt: skip
        res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    return nki.jit(kernel, platform_target="trn3")


@pytest.mark.parametrize(("kind", "k"), [("e4m3", 64), ("e5m2", 32), ("fp4", 96)])
def test_nc_matmul_mx_matches_the_dequantized_product(kind: str, k: int) -> None:
    rng = np.random.default_rng(k)
    st, mv = _random_items(rng, k, 16, kind), _random_items(rng, k, 24, kind)
    sts, mvs = _random_scales(rng, k, 16), _random_scales(rng, k, 24)
    got = _mx_kernel(X4[kind], nl.float32)(st, sts, mv, mvs)
    expect = np.einsum("pmj,pnj->mn", _decode(st, sts, kind), _decode(mv, mvs, kind))
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5 * np.abs(expect).max())


def test_nc_matmul_mx_accumulates_and_rounds_to_bf16() -> None:
    rng = np.random.default_rng(5)
    st, mv = _random_items(rng, 32, 8, "e4m3"), _random_items(rng, 32, 8, "e4m3")
    sts, mvs = _random_scales(rng, 32, 8), _random_scales(rng, 32, 8)
    once = np.einsum("pmj,pnj->mn", _decode(st, sts, "e4m3"), _decode(mv, mvs, "e4m3"))
    got = _mx_kernel(X4["e4m3"], nl.bfloat16, twice=True)(st, sts, mv, mvs)
    bf16 = once.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    twice = (bf16 + once.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got, twice, rtol=1e-2)


def test_quantize_mx_scales_and_values() -> None:
    """Per group of 8 partitions x 4 values: X = 2**(floor(log2(amax)) - 7) for e4m3fn (Emax 8), an all-zero
    group 2**-127; each value / X rounded to e4m3fn."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-50, 50, (64, 32)).astype(ml_dtypes.bfloat16)
    x[8:16, 0:4] = 0  # one all-zero group

    def kernel(src):
        t = nl.ndarray(src.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src)
        data = nl.ndarray((64, 8), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        scale = nl.ndarray((64, 8), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=scale, value=0)
        nisa.quantize_mx(dst=data, src=t, dst_scale=scale)
        out_d = nl.ndarray((64, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        out_s = nl.ndarray((64, 8), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out_d.view(nl.float8_e4m3fn_x4), src=data)
        nisa.dma_copy(dst=out_s, src=scale)
        return out_d, out_s

    items, scales = nki.jit(kernel, platform_target="trn3")(x)
    xf = x.astype(np.float64)
    for p in range(0, 64, 8):
        for c in range(8):
            group = xf[p : p + 8, 4 * c : 4 * c + 4]
            amax = np.abs(group).max()
            e = int(np.floor(np.log2(amax))) - 7 if amax > 0 else -127
            assert scales[_scale_row(p), c] == e + 127
            expect = (group / 2.0**e).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0**e
            np.testing.assert_array_equal(_decode(items, scales, "e4m3")[p : p + 8, c], expect)


def test_mx_needs_the_trn3_preset_and_x4_types() -> None:
    def on_trn2(a):
        t = nl.load(a)
        nisa.nc_matmul_mx(dst=t, stationary=t, moving=t, stationary_scale=t, moving_scale=t)

    with pytest.raises(KernelError, match="NeuronCore-v4"):
        nki.jit(on_trn2, platform_target="trn2")(np.zeros((32, 4), np.float32))

    def plain_fp32(a):
        t = nl.load(a)
        p = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=p, stationary=t, moving=t, stationary_scale=t, moving_scale=t)

    with pytest.raises(KernelError, match="float8_e4m3fn_x4"):
        nki.jit(plain_fp32, platform_target="trn3")(np.zeros((32, 4), np.float32))


def test_mx_signatures_and_dtypes() -> None:
    assert list(inspect.signature(nisa.nc_matmul_mx).parameters) == [
        "dst", "stationary", "moving", "stationary_scale", "moving_scale", "tile_position", "tile_size", "accumulate",
        "name",
    ]  # fmt: skip
    assert list(inspect.signature(nisa.quantize_mx).parameters) == ["dst", "src", "dst_scale", "name"]
    with pytest.raises(TypeError, match="scales"):
        nisa.quantize_mx(None, None, None, scales=1)  # type: ignore[call-arg]
    from nprof.nki.language.constants import sizeinbytes

    kinds = (nl.float8_e4m3fn_x4, nl.float8_e5m2_x4, nl.float4_e2m1fn_x4, nl.float8_e8m0fnu)
    assert [sizeinbytes(d) for d in kinds] == [4, 4, 2, 1]
    assert len({np.dtype(d) for d in kinds} | {np.dtype(np.uint32)}) == 5  # all distinct from plain integers
    assert nisa.get_nc_version is not None


def test_packed_mx_data_is_refused_where_values_are_computed() -> None:
    def exp_of_packed(a):
        t = nl.ndarray((4, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.view(nl.float8_e4m3fn_x4))
        return nl.exp(t)

    def cast_packed(a):
        t = nl.ndarray((4, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.view(nl.float8_e4m3fn_x4))
        return nisa.tensor_copy(t, dtype=nl.float32)

    for kernel in (exp_of_packed, cast_packed):
        with pytest.raises(KernelError, match="packed MX data \\(float8_e4m3fn_x4\\)"):
            nki.jit(kernel, platform_target="trn3")(np.zeros((4, 4), np.uint32))


def test_benchmark_and_profile_keep_the_jit_platform_target(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """nki.benchmark / nki.profile around `nki.jit(k, platform_target="trn3")` run an MX kernel on trn3 (they
    used to fall back to trn1 and refuse it); an explicit preset= still wins."""

    from tests.nki.helpers import quantize_scales as quantize

    x = np.ones((32, 16), np.float32)
    jitted = nki.jit(quantize, platform_target="trn3")
    bench = nki.benchmark(warmup=0, iters=1, save_trace_name=str(tmp_path / "b.ntff"))(jitted)
    assert bench.preset == "trn3"
    bench(x)
    prof = nki.profile(working_directory=tmp_path / "p")(jitted)
    assert prof.preset == "trn3"
    prof(x)
    assert (tmp_path / "p" / "profile.ntff").exists()
    assert nki.benchmark(preset="trn2")(jitted).preset == "trn2"
    assert nki.benchmark(lambda a: a).preset == "trn1"
    capsys.readouterr()


def _decode_e4m3(items: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """`_decode` for e4m3 data without the element loop: byte j of each 32-bit item is value j."""
    k, f = items.shape
    values = items.astype("<u4").view(np.uint8).reshape(k, f, 4).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    rows = [_scale_row(p) for p in range(k)]
    return values * np.exp2(scales[rows].astype(np.float64) - 127)[:, :, None]


@pytest.mark.parametrize(("out_dtype", "n"), [(nl.float32, 4096), (nl.bfloat16, 8192)])
def test_nc_matmul_mx_moving_may_fill_the_whole_psum(out_dtype: object, n: int) -> None:
    """NKI API reference (nc_matmul_mx, tile size): the moving free size goes up to 4096 for an fp32 dst and 8192
    for bf16, the 8 PSUM banks of a partition; the dst is one PSUM tile spanning them."""
    rng = np.random.default_rng(n)
    st, mv = _random_items(rng, 32, 8, "e4m3"), _random_items(rng, 32, n, "e4m3")
    sts, mvs = _random_scales(rng, 32, 8), _random_scales(rng, 32, n)
    got = _mx_kernel(X4["e4m3"], out_dtype)(st, sts, mv, mvs)
    expect = np.einsum("pmj,pnj->mn", _decode_e4m3(st, sts), _decode_e4m3(mv, mvs))
    if out_dtype is nl.bfloat16:
        expect = expect.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(got, expect, rtol=1e-2 if out_dtype is nl.bfloat16 else 1e-5,
                               atol=1e-5 * np.abs(expect).max())  # fmt: skip


def test_nc_matmul_mx_moving_beyond_the_psum_is_refused() -> None:
    rng = np.random.default_rng(1)
    st, mv = _random_items(rng, 32, 8, "e4m3"), _random_items(rng, 32, 4160, "e4m3")
    sts, mvs = _random_scales(rng, 32, 8), _random_scales(rng, 32, 4160)
    with pytest.raises(KernelError, match="bytes per partition"):  # the [8, 4160] fp32 dst does not fit in PSUM
        _mx_kernel(X4["e4m3"], nl.float32)(st, sts, mv, mvs)


@pytest.mark.parametrize(("target", "n", "fits"), [("trn3", 2048, True), ("trn2", 1024, False)])
def test_nc_matmul_moving_limit_by_core(target: str, n: int, fits: bool) -> None:
    """NKI API reference (nc_matmul, tile size): moving free size <= 512 (one fp32 PSUM bank) on NeuronCore-v2/-v3;
    from NeuronCore-v4 up to the whole PSUM (4096 fp32)."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((64, 16)).astype(np.float32), rng.standard_normal((64, n)).astype(np.float32)
    run = nki.jit(dst_matmul(), platform_target=target)
    if not fits:
        with pytest.raises(KernelError, match="PSUM bank holds"):
            run(a, b)
        return
    np.testing.assert_allclose(run(a, b), a.T @ b, rtol=1e-4, atol=1e-4)
