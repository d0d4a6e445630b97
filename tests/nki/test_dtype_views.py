"""`tile.view(dtype)` on chip across item sizes (bytes reinterpreted, last axis rescaled), held to numpy's
`ndarray.view`; the neuronxcc-internal names nki-samples imports (`language.constants.sizeinbytes`,
`compiler.backends.neuron`)."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from tests.nki.helpers import rand


def _roundtrip(x: np.ndarray, dtype: object, out_shape: tuple[int, ...]) -> np.ndarray:
    """Load x into SBUF, view the tile as `dtype`, copy the view to a fresh tile of that dtype, store it."""

    def kernel(a):
        t = nl.load(a)
        v = t.view(dtype)
        assert v.shape == out_shape
        c = nl.ndarray(out_shape, dtype=dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=v)
        out = nl.ndarray(out_shape, dtype=dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=c)
        return out

    return nki.simulate_kernel(kernel, x)


@pytest.mark.parametrize(
    ("src_dtype", "dst_dtype"),
    [(np.float32, np.uint8), (np.float32, ml_dtypes.bfloat16), (np.float32, np.int32), (np.uint8, np.float32),
     (ml_dtypes.bfloat16, np.float32), (np.float32, ml_dtypes.float8_e4m3fn)],
)  # fmt: skip
def test_view_reinterprets_bytes_like_numpy(src_dtype: object, dst_dtype: object) -> None:
    rng = np.random.default_rng(1)
    if np.dtype(src_dtype) == np.uint8:
        x = rng.integers(0, 256, (16, 32), dtype=np.uint8)
    else:
        x = rand((16, 8), 1).astype(src_dtype)
    expect = x.view(dst_dtype)
    if np.dtype(dst_dtype) == np.dtype(ml_dtypes.float8_e4m3fn):  # compare bits (fp8 NaN bytes are not == NaN)
        got = _roundtrip(x, dst_dtype, expect.shape)
        np.testing.assert_array_equal(got.view(np.uint8), expect.view(np.uint8))
        return
    if np.dtype(dst_dtype) == np.float32:  # bytes read as fp32 may be NaN patterns: compare bits
        np.testing.assert_array_equal(_roundtrip(x, dst_dtype, expect.shape).view(np.uint32), expect.view(np.uint32))
        return
    np.testing.assert_array_equal(_roundtrip(x, dst_dtype, expect.shape), expect)


def test_view_of_a_column_scales_the_last_axis() -> None:
    """A [P, 1] fp32 column viewed as fp8 is [P, 4]: each value's 4 bytes (how rmsnorm_quant stores scales)."""
    x = rand((32, 6), 2, 0.1, 3.0)

    def kernel(a):
        t = nl.load(a)
        col = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=col, op=nl.max, data=t, axis=1)
        out = nl.ndarray((32, 4), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=col.view(nl.uint8))
        return out

    got = nki.simulate_kernel(kernel, x)
    np.testing.assert_array_equal(got, x.max(axis=1, keepdims=True).view(np.uint8))


def test_write_through_a_view_lands_in_the_tile() -> None:
    """Writing bf16 pairs through a view of an fp32 tile sets the fp32 bit patterns."""
    halves = rand((8, 16), 3).astype(ml_dtypes.bfloat16)

    def kernel(h):
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t.view(nl.bfloat16), src=h)
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    got = nki.simulate_kernel(kernel, halves)
    np.testing.assert_array_equal(got.view(np.uint32), halves.view(np.uint32))


def test_view_of_a_slice_keeps_its_offset() -> None:
    x = rand((4, 12), 4)

    def kernel(a):
        t = nl.load(a)
        out = nl.ndarray((4, 16), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t[:, 5:9].view(nl.uint8))
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), np.ascontiguousarray(x[:, 5:9]).view(np.uint8))


def test_views_that_cannot_be_reinterpreted_are_refused() -> None:
    def strided(a):
        t = nl.load(a)
        return t[:, 0:8:2].view(nl.uint8)

    def ragged(a):
        t = nl.load(a)
        return t[:, 0:6].view(nl.float32)  # 6 bytes are not whole fp32 items

    def hbm(a):
        return a.view(nl.uint8)

    with pytest.raises(KernelError, match="contiguous"):
        nki.simulate_kernel(strided, rand((4, 8), 5))
    with pytest.raises(KernelError, match="multiples of 4"):
        nki.simulate_kernel(ragged, np.zeros((4, 8), np.uint8))
    with pytest.raises(KernelError, match="same item size"):
        nki.simulate_kernel(hbm, rand((4, 8), 6))


def test_view_signature_and_unknown_keyword() -> None:
    def kernel(a):
        t = nl.load(a)
        assert list(inspect.signature(t.view).parameters) == ["dtype"]
        t.view(dtyp=nl.uint8)

    with pytest.raises(TypeError, match="dtyp"):
        nki.simulate_kernel(kernel, rand((2, 2), 7))


def test_sizeinbytes_and_backend_names() -> None:
    from nprof.nki.language.constants import sizeinbytes

    from nprof.nki.compiler.backends.neuron.indexing import TileIndex
    from nprof.nki.compiler.backends.neuron.tensor import local_tile

    assert [sizeinbytes(d) for d in (np.float32, nl.bfloat16, nl.float8_e4m3, nl.int8, "int32")] == [4, 2, 1, 1, 4]
    assert list(inspect.signature(sizeinbytes).parameters) == ["dtype"]
    with pytest.raises(KernelError):
        sizeinbytes(np.complex64)
    i, j = nl.mgrid[0:4, 0:3]
    assert isinstance(i + 1, TileIndex) and isinstance(j, TileIndex)
    seen = []

    def kernel(a):
        t = nl.load(a)
        seen.append((isinstance(t, local_tile), isinstance(a, local_tile), isinstance(3, local_tile)))
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    nki.simulate_kernel(kernel, rand((2, 2), 8))
    assert seen == [(True, False, False)]
    with pytest.raises(TypeError, match="ndarray"):
        local_tile()


def test_same_item_size_view_keeps_any_layout() -> None:
    x = rand((4, 8), 9)

    def kernel(a):
        t = nl.load(a)
        out = nl.ndarray((4, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t[:, 0:8:2].view(nl.int32))
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x[:, 0:8:2].view(np.int32))


def test_view_of_a_pending_matmul_result_places_it_first() -> None:
    """nc_matmul's PSUM result is placed lazily; viewing its bytes commits and places it."""
    a = np.arange(16 * 8, dtype=np.float32).reshape(16, 8) % 5
    b = np.arange(16 * 6, dtype=np.float32).reshape(16, 6) % 3

    def kernel(x, y):
        res = nisa.nc_matmul(nl.load(x), nl.load(y))
        raw = nl.ndarray((8, 24), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.tensor_copy(dst=raw, src=res.view(nl.uint8))
        out = nl.ndarray((8, 24), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=raw)
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a, b), (a.T @ b).astype(np.float32).view(np.uint8))


def test_a_helper_returning_a_view_keeps_its_tile() -> None:
    x = rand((4, 2), 10)

    @nki.jit(mode="trace")
    def helper(a):
        t = nl.load(a)
        return t.view(nl.uint8)

    def kernel(a):
        v = helper(a)
        out = nl.ndarray((4, 8), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=v)
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), x.view(np.uint8))


def _block_view_kernel(buffer_kind: str):
    """fp32 data [B, P, F] loaded block by block into a (B, par_dim(P), F) tile, read back through a uint16 view
    of the whole tile (each block's last axis doubles), and a uint8 block tile written through its fp32 view."""
    import nprof.nki.compiler as ncc

    def kernel(a, raw):
        b, p, f = a.shape
        buffer = ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(b,)) if buffer_kind == "direct" else nl.sbuf
        t = nl.ndarray((b, nl.par_dim(p), f), dtype=nl.float32, buffer=buffer)
        for i in range(b):
            t[i] = nl.load(a[i])
        halves = t.view(nl.uint16)
        out = nl.ndarray((b, p, 2 * f), dtype=nl.uint16, buffer=nl.shared_hbm)
        for i in range(b):
            nl.store(out[i], value=halves[i])
        u = nl.ndarray((b, nl.par_dim(p), 4 * f), dtype=nl.uint8, buffer=nl.sbuf)
        words = u.view(nl.float32)
        for i in range(b):
            nisa.dma_copy(dst=words[i], src=raw[i])
        back = nl.ndarray((b, p, 4 * f), dtype=nl.uint8, buffer=nl.shared_hbm)
        for i in range(b):
            nl.store(back[i], value=u[i])
        return out, back

    return kernel


@pytest.mark.parametrize("buffer_kind", ["sbuf", "direct", "by_liveness"])
def test_view_of_a_tile_with_block_axes_changes_the_item_size(buffer_kind: str, monkeypatch) -> None:
    """numpy's `.view` of each block: the blocks stay where they are, whether the tile is placed whole, by direct
    allocation, or block by block (the liveness placement after an over-capacity trace)."""
    from nprof.nki.alloc import OverCapacity
    from nprof.nki.kernel import Kernel

    if buffer_kind == "by_liveness":
        record = Kernel._record

        def plain_trace_overflows(self, *args, **kwargs):
            if not kwargs.get("virtual") and kwargs.get("uses_total") is None:
                raise OverCapacity("forced: trace again with tiles placed by liveness")
            return record(self, *args, **kwargs)

        monkeypatch.setattr(Kernel, "_record", plain_trace_overflows)
    x, raw = rand((3, 32, 16), 11), rand((3, 32, 16), 12)
    out, back = nki.simulate_kernel(_block_view_kernel(buffer_kind), x, raw)
    np.testing.assert_array_equal(out, x.view(np.uint16))
    np.testing.assert_array_equal(back, raw.view(np.uint8))
