"""Runtime indices: indirect DMA (row gathers/scatters), dynamic on-chip offsets, gathers and shuffles, against
numpy, and the constructs NKI refuses."""

import re

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.arch import cost
from nprof.arch.isa import Opcode
from nprof.arch.presets import get_preset
from nprof.errors import DeviceIndexError, KernelError
from tests.nki.helpers import rand


def _rows(seed: int, n: int, hi: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, hi, n).astype(np.int32)


def test_load_gathers_rows_by_a_tile_of_indices():
    data, idx = rand((96, 40), 1), _rows(2, 50, 96)  # duplicates included

    def kernel(d, ix):
        i_p, i_f = nl.arange(50)[:, None], nl.arange(40)[None, :]
        it = nl.load(ix[i_p])
        a = nl.load(d[it[i_p, 0], i_f])  # the index tile sliced with an arange
        b = nl.load(d[it, i_f])  # the whole [P, 1] index tile
        out = nl.ndarray((50, 80), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(out[i_p, i_f], a)
        nl.store(out[i_p, 40 + i_f], b)
        return out

    out = nki.simulate_kernel(kernel, data, idx)
    np.testing.assert_array_equal(out, np.concatenate([data[idx], data[idx]], axis=1))


def test_gather_with_slices_on_the_other_axes():
    data, idx = rand((30, 6, 5), 24), _rows(25, 12, 30)

    def kernel(d, ix):
        it = nl.load(ix[nl.arange(12)[:, None]])
        a = nl.load(d[it])  # every other axis whole
        b = nl.load(d[it, 1:5:2, 3])
        out = nl.ndarray((12, 32), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(out[:, 0:30], a)  # [12, 6, 5] into [12, 30]: same partitions and elements
        nl.store(out[:, 30:32], b)
        return out

    expect = np.concatenate([data[idx].reshape(12, 30), data[idx][:, 1:5:2, 3]], axis=1)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data, idx), expect)


def test_gather_on_a_middle_axis_with_a_partition_mask():
    data = rand((3, 20, 16), 3)
    idx = _rows(4, 32, 20)
    valid = 27  # partitions past it are masked off, their indices never read

    def kernel(d, ix):
        i_p, i_f = nl.arange(32)[:, None], nl.arange(16)[None, :]
        it = nl.load(ix[i_p])
        out = nl.ndarray((3, 32, 16), dtype=d.dtype, buffer=nl.shared_hbm)
        for b in nl.affine_range(3):
            t = nl.load(d[b, it, i_f], mask=i_p < valid)
            nl.store(out[b, i_p, i_f], t, mask=i_p < valid)
        return out

    bad = idx.copy()
    bad[valid:] = 999  # out of range, but masked
    out = nki.simulate_kernel(kernel, data, bad)
    np.testing.assert_array_equal(out[:, :valid], data[:, idx[:valid]])


def test_store_scatters_rows():
    src, idx = rand((16, 8), 5), np.random.default_rng(6).permutation(40)[:16].astype(np.int32)

    def kernel(s, ix):
        out = nl.ndarray((40, 8), dtype=s.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((40, 8), dtype=s.dtype))
        i_p, i_f = nl.arange(16)[:, None], nl.arange(8)[None, :]
        nl.store(out[nl.load(ix[i_p]), i_f], value=nl.load(s))
        return out

    expect = np.zeros((40, 8), np.float32)
    expect[idx] = src
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, src, idx), expect)


def _oob_kernel(side: str, mode):
    def kernel(a):
        i_p, i_f = nl.arange(32)[:, None], nl.arange(8)[None, :]
        idx = nisa.iota(5 * nl.arange(32)[:, None], dtype=nl.int32)  # 0, 5, ..., 155: past row 63 from p=13
        if side == "src":
            out = nl.ndarray((32, 8), dtype=a.dtype, buffer=nl.shared_hbm)
            t = nisa.memset(shape=(32, 8), value=-1.0, dtype=a.dtype)
            nisa.dma_copy(dst=t[i_p, i_f], src=a[idx, i_f], oob_mode=mode)
            nl.store(out, t)
        else:
            out = nl.ndarray((64, 8), dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nisa.memset(shape=(64, 8), value=-1.0, dtype=a.dtype))
            nisa.dma_copy(dst=out[idx, i_f], src=nl.load(a[i_p, i_f]), oob_mode=mode)
        return out

    return kernel


def test_dma_copy_skips_out_of_bounds_rows_when_asked():
    a = rand((64, 8), 7)
    rows = 5 * np.arange(32)
    keep = rows < 64
    got = nki.simulate_kernel(_oob_kernel("src", nisa.oob_mode.skip), a)
    expect = np.full((32, 8), -1.0, np.float32)
    expect[keep] = a[rows[keep]]
    np.testing.assert_array_equal(got, expect)
    got = nki.simulate_kernel(_oob_kernel("dst", nisa.oob_mode.skip), a[:32])
    expect = np.full((64, 8), -1.0, np.float32)
    expect[rows[keep]] = a[:32][keep]
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("side", ["src", "dst"])
def test_out_of_bounds_runtime_index_is_an_index_error_at_the_kernel_line(side):
    """NKI's simulator raises a plain IndexError naming the flat element (row 65 of a [64, 8] tensor: 65 * 8);
    nprof's line (kernel file:line, the fix) is its cause."""
    with pytest.raises(IndexError) as info:
        nki.simulate_kernel(_oob_kernel(side, nisa.oob_mode.error), rand((64 if side == "src" else 32, 8), 8))
    assert type(info.value) is IndexError
    assert str(info.value) == f"index {65 * 8} is out of bounds for axis 0 with size {64 * 8}"
    cause = info.value.__cause__
    assert isinstance(cause, DeviceIndexError) and issubclass(DeviceIndexError, IndexError)
    assert re.search(r"test_indirect\.py:\d+: index 65 \(partition 13\) is out of bounds", str(cause))


def test_read_modify_write_accumulates_duplicate_indices():
    base, val = rand((10, 6), 9), rand((24, 6), 10)
    idx = _rows(11, 24, 10)

    def kernel(b, v, ix):
        out = nl.ndarray((10, 6), dtype=b.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(b))
        i_p, i_f = nl.arange(24)[:, None], nl.arange(6)[None, :]
        it = nl.load(ix[i_p])
        vt = nl.load(v)
        nl.atomic_rmw(out[it, i_f], value=vt, op=np.add)
        nisa.dma_copy(dst=out[it, i_f], src=vt, dst_rmw_op=np.add)
        return out

    expect = base.astype(np.float64)
    np.add.at(expect, idx, 2 * val.astype(np.float64))
    np.testing.assert_allclose(nki.simulate_kernel(kernel, base, val, idx), expect, rtol=1e-5, atol=1e-6)


def test_tensor_copy_dynamic_src_and_dst_move_by_runtime_offsets():
    x, offs = rand((16, 30, 3), 12), np.array([[7, 0, 29, 12]], np.int32)

    def kernel(a, o):
        src, ot = nl.load(a), nl.load(o)
        gathered = nl.ndarray((16, 4, 3), dtype=a.dtype)
        scattered = nl.zeros((16, 30, 3), dtype=a.dtype)
        ix, _, iz = nl.mgrid[0:16, 0:1, 0:3]
        for k in nl.affine_range(4):
            gathered[ix, k, iz] = nisa.tensor_copy_dynamic_src(src[ix, ot[0, k], iz])
            nisa.tensor_copy_dynamic_dst(dst=scattered[ix, ot[0, k] + 0 * iz, iz], src=gathered[ix, k, iz])
        out = nl.ndarray((16, 34, 3), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out[:, 0:4, :], gathered)
        nl.store(out[:, 4:34, :], scattered)
        return out

    out = nki.simulate_kernel(kernel, x, offs)
    np.testing.assert_array_equal(out[:, :4], x[:, offs[0]])
    expect = np.zeros_like(x)
    expect[:, offs[0]] = x[:, offs[0]]
    np.testing.assert_array_equal(out[:, 4:], expect)


def test_ds_with_a_runtime_start_reads_a_window_of_rows():
    data, start = rand((50, 12), 13), np.array([[17]], np.int32)

    def kernel(d, s):
        st = nl.load(s)
        out = nl.ndarray((8, 12), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(d[nl.ds(st[0, 0], 8), :]))
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data, start), data[17:25])


def test_gather_flattened_is_take_along_the_flattened_free_axes():
    data = rand((8, 4, 5), 14)
    idx = np.random.default_rng(15).integers(0, 20, (8, 7)).astype(np.uint32)

    def kernel(d, ix):
        res = nl.gather_flattened(nl.load(d), nl.load(ix))
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out

    expect = np.take_along_axis(data.reshape(8, -1), idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data, idx), expect)


def test_local_gather_reads_each_group_of_16_partitions_with_its_own_indices():
    src = rand((32, 40), 16)
    index = np.random.default_rng(17).integers(0, 10, (32, 2)).astype(np.uint16) * 4  # element offsets
    elems, valid = 4, 27

    def kernel(s, ix):
        res = nisa.local_gather(nl.load(s), nl.load(ix), elems, valid)
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out

    expect = np.empty((32, valid * elems), np.float32)
    for g in (0, 16):
        offsets = [int(index[g + p, c]) for c in range(2) for p in range(16)][:valid]  # partition-major order
        for p in range(g, g + 16):
            expect[p] = np.concatenate([src[p, o : o + elems] for o in offsets])
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, src, index), expect)


def test_stream_shuffle_moves_rows_within_each_quadrant():
    x = rand((64, 10), 18)
    perm = [(3 * i + 1) % 32 for i in range(32)]
    perm[5] = 255  # row 5 of each quadrant keeps its value

    def kernel(a):
        t = nl.load(a)
        out_t = nl.zeros((64, 10), dtype=a.dtype)
        nisa.nc_stream_shuffle(src=t, dst=out_t, shuffle_mask=perm)
        out = nl.ndarray((64, 10), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, out_t)
        return out

    expect = np.zeros_like(x)
    for q in (0, 32):
        for i, k in enumerate(perm):
            if k != 255:
                expect[q + i] = x[q + k]
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, x), expect)


def test_indirect_dma_is_one_dma_with_a_descriptor_per_row_and_orders_after_the_tensor_writes():
    @nki.jit
    def kernel(d, ix):
        i_p, i_f = nl.arange(64)[:, None], nl.arange(256)[None, :]
        scratch = nl.ndarray((128, 256), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(scratch[nl.arange(128)[:, None], i_f], nl.load(d))
        t = nl.load(scratch[nl.load(ix[i_p]), i_f])
        out = nl.ndarray((64, 256), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    program = kernel.trace(rand((128, 256), 19), _rows(20, 64, 128)).program
    ins = program.instructions
    gather = next(i for i, x in enumerate(ins) if x.attr("indirect") == "src")
    store = next(i for i, x in enumerate(ins) if x.outs and x.outs[0].tensor == ins[gather].ins[0].tensor)
    assert store in ins[gather].deps  # the gather may read any row the store wrote
    g = ins[gather]
    assert g.opcode is Opcode.DMA_DIRECT2D and len(g.ins) == 2
    assert cost.dma_chunks(g.ins[0], g.outs[0]) == 64  # one descriptor (chunk) per gathered row
    assert cost.instruction_ns(g, get_preset("trn1")) > 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("t = nl.load(a); idx = nl.load(ix[nl.arange(4)[:, None]]); u = nl.ndarray((4, 8), dtype=a.dtype); "
         "u[...] = t[nl.arange(4)[:, None], idx]", "partition axis|err_copy_dynamic|tile of indices"),
        ("idx = nl.load(ix[nl.arange(4)[:, None]]); nl.load_transpose2d(a[idx, nl.arange(8)[None, :]])",
         "err_indirect_indices_are_not_supported_with_nki_api"),
        ("idx = nl.load(ix[nl.arange(4)[:, None]], dtype=nl.float32); nl.load(a[idx, nl.arange(8)[None, :]])",
         "must be integers"),
        ("idx = nl.load(ixr); nl.load(a[idx, nl.arange(8)[None, :]])", "err_indirect_indices_free_dim"),
        ("nl.atomic_rmw(a[0:4, 0:8], value=nl.load(a[0:4, 0:8]), op=np.add)", "indirect dynamic indexing"),
        ("t = nl.load(a); idx = nl.load(ix[nl.arange(4)[:, None]]); "
         "nisa.tensor_copy_dynamic_src(t[idx, nl.arange(8)[None, :]])", "tile of indices addresses HBM"),
        ("t = nl.load(a); o = nl.load(ixr); nisa.tensor_copy_dynamic_src(t[o[0, 0], nl.arange(8)[None, :]])",
         "partition axis of tile"),
    ],
)  # fmt: skip
def test_constructs_nki_rejects_are_refused_at_the_kernel_line(body, message):
    def kernel(a, ix, ixr):
        exec(body, {"nl": nl, "nisa": nisa, "np": np, "a": a, "ix": ix, "ixr": ixr})
        return a

    with pytest.raises(KernelError, match=message):
        nki.simulate_kernel(kernel, rand((16, 8), 21), _rows(22, 4, 16), _rows(23, 4, 16).reshape(1, 4))


def test_a_later_read_of_a_scattered_tensor_waits_for_the_scatter():
    @nki.jit
    def kernel(s, ix):
        out = nl.ndarray((40, 8), dtype=s.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(16)[:, None], nl.arange(8)[None, :]
        nl.store(out[nl.load(ix[i_p]), i_f], value=nl.load(s))
        back = nl.load(out[30:34, :])  # rows the scatter may or may not have written
        res = nl.ndarray((4, 8), dtype=s.dtype, buffer=nl.shared_hbm)
        nl.store(res, back)
        return res

    ins = kernel.trace(rand((16, 8), 26), _rows(27, 16, 40)).program.instructions
    scatter = next(i for i, x in enumerate(ins) if x.attr("indirect") == "dst")
    reader = next(
        i for i, x in enumerate(ins) if i > scatter and x.ins and x.ins[0].tensor == ins[scatter].outs[0].tensor
    )
    assert scatter in ins[reader].deps


def test_dynamic_copy_runs_on_the_engine_asked_for():
    @nki.jit
    def kernel(a, o):
        t, ot = nl.load(a), nl.load(o)
        y = nisa.tensor_copy_dynamic_src(t[nl.arange(4)[:, None], ot[0, 0] + nl.arange(2)[None, :]],
                                         engine=nisa.vector_engine)  # fmt: skip
        out = nl.ndarray((4, 2), dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, y)
        return out

    ins = kernel.trace(rand((4, 9), 28), np.array([[3]], np.int32)).program.instructions
    (copy,) = [x for x in ins if x.attr("indirect")]
    assert copy.engine.value == "vector" and copy.attr("dynamic")


def test_nc_n_gather_writes_its_dst():
    data = rand((8, 20), 29)
    idx = np.random.default_rng(30).integers(0, 20, (8, 5)).astype(np.uint32)

    def kernel(d, ix):
        res = nl.ndarray((8, 5), dtype=d.dtype)
        nisa.nc_n_gather(res, nl.load(d), nl.load(ix))
        out = nl.ndarray((8, 5), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out

    expect = np.take_along_axis(data, idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, data, idx), expect)


def test_static_dma_copy_with_dst_rmw_op_adds():
    a, b = rand((8, 6), 31), rand((8, 6), 32)

    def kernel(x, y):
        out = nl.ndarray((8, 6), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        nisa.dma_copy(dst=out, src=nl.load(y), dst_rmw_op=np.add)
        return out

    np.testing.assert_allclose(nki.simulate_kernel(kernel, a, b), a + b, rtol=1e-6)


def test_prepared_numerics_run_indirect_instructions_like_simulate():
    from nprof.device import simulate
    from nprof.device.numerics_prepared import PreparedNumerics

    @nki.jit
    def kernel(d, ix):
        i_p, i_f = nl.arange(24)[:, None], nl.arange(8)[None, :]
        it = nl.load(ix[i_p])
        out = nl.ndarray((24, 8), dtype=d.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(d[it, i_f]))
        nisa.dma_copy(dst=out, src=nl.load(d[0:24, :]), dst_rmw_op=np.add)
        return out

    traced = kernel.trace(rand((30, 8), 33), _rows(34, 24, 30))
    want = simulate(traced.program, traced.inputs).outputs
    got = PreparedNumerics(traced.program, get_preset("trn1")).run(traced.inputs)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
