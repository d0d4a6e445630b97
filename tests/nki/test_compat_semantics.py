"""Semantics settled by AWS's public kernels and tests (the compatibility run): float -> integer conversion,
DMA transposes of SBUF tiles, drop probabilities of 1 and above; each against a plain numpy reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.arch import cost
from nprof.arch.isa import Opcode
from nprof.arch.presets import get_preset
from nprof.errors import KernelError
from nprof.nki.calls import NkiCompatWarning
from tests.nki.helpers import rand, run_tiles


def test_float_results_stored_as_integers_truncate_toward_zero():
    """An int32 tile divided by an int is int32 (NKI's promotion rules), computed in fp32, truncated: 2224 / 38
    (58.5) is 58, and floor of it is 58 too, so a nearest-neighbour source row stays in range."""

    def kernel(dummy):
        out = nl.ndarray((128, 2), dtype=nl.int32, buffer=nl.shared_hbm)
        pos = nisa.iota(2176 + nl.arange(128)[:, None], dtype=nl.int32)
        quotient = pos / 38
        nl.store(out[:, 0:1], value=quotient)
        nl.store(out[:, 1:2], value=nl.floor(quotient, dtype=nl.int32))
        return out

    got = nki.simulate_kernel(kernel, np.zeros((1, 1), np.float32))
    pos = 2176 + np.arange(128)
    np.testing.assert_array_equal(got[:, 0], np.trunc(pos / np.float32(38)))
    np.testing.assert_array_equal(got[:, 1], pos // 38)
    x = rand((16, 8), 3, lo=-9.0, hi=9.0)
    y = run_tiles(lambda a: nisa.tensor_copy(a, dtype=nl.int32), x)
    np.testing.assert_array_equal(y, np.trunc(x).astype(np.int32))


@pytest.mark.parametrize("dtype", [nl.float32, nl.bfloat16])
def test_dma_transpose_of_an_sbuf_tile(dtype):
    """nisa.dma_transpose reads HBM or SBUF: an SBUF [P, F] tile becomes [F, P], dtype converted."""

    def kernel(a):
        return nisa.dma_transpose(nl.load(a), dtype=dtype)

    a = rand((32, 96), 4)
    with pytest.warns(NkiCompatWarning, match="on-chip tile"):
        got = nki.simulate_kernel(kernel, a)
    want = a.T if dtype is nl.float32 else a.T.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got, want)


def test_dma_transpose_costs_one_chunk_per_element():
    """The cost rule of nprof.arch.cost: a DMA transpose moves each element as its own chunk, so it takes
    longer than a straight SBUF-to-SBUF copy of the same bytes."""

    def kernel(a):
        out = nl.ndarray((64, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nisa.dma_transpose(nl.load(a))
        nl.store(out, value=t)
        return out

    traced = nki.jit(kernel).trace(rand((32, 64), 5))
    dmas = [i for i in traced.program.instructions if i.opcode is Opcode.DMA_DIRECT2D]
    (tr,) = [i for i in dmas if i.attr("transpose")]
    assert tr.ins[0].shape == (32, 64) and tr.outs[0].shape == (64, 32)
    assert cost.dma_chunks(tr.ins[0], tr.outs[0], True) == 32 * 64
    preset = get_preset("trn1")
    straight = cost.dma_transfer_ns(tr.outs[0].nbytes, cost.dma_chunks(tr.ins[0], tr.ins[0]), preset,
                                    partitions=32)  # fmt: skip
    assert cost.instruction_ns(tr, preset) - preset.dma_latency_ns > straight


def test_dma_transpose_refuses_what_it_cannot_move():
    def psum_source(a):
        return nisa.dma_transpose(nisa.nc_transpose(nl.load(a)))

    with pytest.raises(KernelError, match="HBM or SBUF"):
        nki.simulate_kernel(psum_source, rand((32, 32), 6))

    def too_wide(a):
        return nisa.dma_transpose(nl.load(a))

    with pytest.raises(KernelError, match="partitions"):
        nki.simulate_kernel(too_wide, rand((8, 256), 7))


def test_drop_probability_of_one_or_more_drops_the_whole_partition():
    """prob is a probability: 1.0 drops every element (NKI API reference), and so does anything above it;
    partitions with prob < 1 keep about 1 - prob of their elements, unchanged."""
    x = rand((128, 512), 8, lo=1.0, hi=2.0)
    p = np.where(np.arange(128) % 2 == 0, 0.25, 1.0 + np.arange(128)).astype(np.float32).reshape(128, 1)
    y = run_tiles(lambda a, b: nisa.dropout(a, prob=b), x, p)
    assert not y[1::2].any()
    kept = y[0::2] != 0
    np.testing.assert_array_equal(y[0::2][kept], x[0::2][kept])
    assert abs(kept.mean() - 0.75) < 0.02


def test_tensor_tensor_broadcasts_a_free_axis_of_size_one():
    """nisa.tensor_tensor([P, F], [P, 1]): the column is read F times (a stride-0 operand), as
    nki-samples' double-row matmul dequantizes by a per-row scale; other shape mismatches are refused."""
    x, col = rand((64, 40), 9), rand((64, 1), 10)
    got = run_tiles(lambda a, b: nisa.tensor_tensor(a, b, nl.multiply), x, col)
    np.testing.assert_allclose(got, x * col, rtol=1e-6)
    got = run_tiles(lambda a, b: nisa.tensor_tensor(b, a, nl.subtract), x, col)
    np.testing.assert_allclose(got, col - x, rtol=1e-6)
    with pytest.raises(KernelError, match="differ in shape"):
        run_tiles(lambda a, b: nisa.tensor_tensor(a, b, nl.add), x, rand((64, 8), 11))


def test_a_returned_reshaped_view_comes_back_in_its_shape():
    """A kernel returning `out.reshape(shape)` of its HBM output gets the array in that shape."""

    def kernel(a):
        out = nl.ndarray((8, 24), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), 1.0))
        return out.reshape((2, 4, 24))

    a = rand((8, 24), 12)
    got = nki.simulate_kernel(kernel, a)
    assert got.shape == (2, 4, 24)
    np.testing.assert_allclose(got, (a + 1).reshape(2, 4, 24), rtol=1e-6)


def test_dma_transpose_in_the_dst_first_style():
    """Beta 2: nisa.dma_transpose(dst, src) writes src.T into dst."""

    def kernel(a):
        out = nl.ndarray((48, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((48, 16), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(t, nl.load(a))
        nl.store(out, value=t)
        return out

    a = rand((16, 48), 13)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a.T)
