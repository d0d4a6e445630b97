"""The rest of the 2.26 API (scans, cross-partition and fused reductions, top-8, predicated copies, extra nl
math, constants, device_print, nki.compiler), each against a plain numpy reference."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nprof.nki.compiler as ncc
import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.errors import KernelError
from nprof.nki.calls import NkiCompatWarning
from tests.nki.helpers import rand, run_tiles


def test_tensor_tensor_scan_is_a_running_recurrence() -> None:
    a, b = rand((16, 20), 1, 0.5, 1.0), rand((16, 20), 2)

    def fn(x, y):
        return nisa.tensor_tensor_scan(x, y, 0.5, op0=nl.multiply, op1=nl.add)

    expect = np.empty_like(a)
    prev = np.full(16, 0.5, np.float32)
    for i in range(20):  # r[i] = a[i] * r[i-1] + b[i]
        prev = a[:, i] * prev + b[:, i]
        expect[:, i] = prev
    np.testing.assert_allclose(run_tiles(fn, a, b), expect, rtol=1e-5, atol=1e-6)


def test_partition_reduce_and_tensor_scalar_reduce() -> None:
    x = rand((32, 12), 3)

    def fn(t):
        col = nl.ndarray((32, 1), dtype=nl.float32)
        scaled = nisa.tensor_scalar_reduce(data=t, op0=nl.multiply, operand0=3.0, reduce_op=nl.add, reduce_res=col)
        across = nisa.tensor_partition_reduce(nl.maximum, scaled)
        out = nl.ndarray((33, 12), dtype=nl.float32)
        out[0:32, 0:1] = col
        out[0:32, 1:12] = scaled[:, 1:12]
        out[32:33, :] = across
        return out

    out = run_tiles(fn, x)
    np.testing.assert_allclose(out[:32, 0], (3 * x).sum(1), rtol=1e-5)
    np.testing.assert_allclose(out[:32, 1:], 3 * x[:, 1:], rtol=1e-6)
    np.testing.assert_allclose(out[32], (3 * x).max(0), rtol=1e-6)


def test_predicated_copy_and_select_reduce() -> None:
    x, y = rand((8, 16), 4), rand((8, 16), 5)

    def fn(a, b):
        pred = nl.greater(a, b, dtype=nl.float32)
        dst = nl.copy(b)
        nisa.tensor_copy_predicated(src=a, dst=dst, predicate=pred)  # max(a, b)
        best = nl.ndarray((8, 1), dtype=nl.float32)
        sel = nl.ndarray((8, 16), dtype=nl.float32)
        nisa.select_reduce(dst=sel, predicate=pred, on_true=a, on_false=0.0, reduce_res=best, reduce_op=nl.max)
        out = nl.ndarray((8, 33), dtype=nl.float32)
        out[:, 0:16] = dst
        out[:, 16:32] = sel
        out[:, 32:33] = best
        return out

    out = run_tiles(fn, x, y)
    sel = np.where(x > y, x, 0)
    np.testing.assert_array_equal(out[:, :16], np.maximum(x, y))
    np.testing.assert_array_equal(out[:, 16:32], sel)
    np.testing.assert_array_equal(out[:, 32], sel.max(1))


def test_max8_find_index8_match_replace8() -> None:
    x = np.random.default_rng(6).permutation(8 * 40).reshape(8, 40).astype(np.float32)

    def fn(t):
        top = nisa.max8(src=t)
        idx = nisa.nc_find_index8(data=t, vals=top, dtype=nl.float32)
        rep = nisa.nc_match_replace8(data=t, vals=top, imm=-1.0)
        out = nl.ndarray((8, 56), dtype=nl.float32)
        out[:, 0:8] = top
        out[:, 8:16] = idx
        out[:, 16:56] = rep
        return out

    out = run_tiles(fn, x)
    order = np.argsort(-x, axis=1)[:, :8]
    top = np.take_along_axis(x, order, 1)
    rep = x.copy()
    np.put_along_axis(rep, order, -1.0, 1)
    np.testing.assert_array_equal(out[:, :8], top)
    np.testing.assert_array_equal(out[:, 8:16], order)
    np.testing.assert_array_equal(out[:, 16:], rep)


def test_nl_math_reductions_and_casts() -> None:
    x, w = rand((16, 24), 7), rand((16, 24), 8)

    def fn(t, wt):
        out = nl.ndarray((16, 24 * 3 + 3), dtype=nl.float32)
        out[:, 0:24] = nl.floor(t)
        out[:, 24:48] = nl.rms_norm(t, wt, axis=1, n=24)
        out[:, 48:72] = nl.logical_not(nl.greater(t, 0.0), dtype=nl.float32)
        out[:, 72:73] = nl.var(t, axis=1)
        out[:, 73:74] = nl.expand_dims(nl.all(nl.greater(t, -3.0), axis=1, dtype=nl.float32), 1)
        out[:, 74:75] = nl.static_cast(nl.sum(t, axis=1, keepdims=True), nl.float32)
        return out

    out = run_tiles(fn, x, w)
    np.testing.assert_array_equal(out[:, :24], np.floor(x))
    rms = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out[:, 24:48], rms, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[:, 48:72], (x <= 0).astype(np.float32))
    np.testing.assert_allclose(out[:, 72], x.var(1), rtol=1e-4)
    np.testing.assert_array_equal(out[:, 73], np.ones(16))
    np.testing.assert_allclose(out[:, 74], x.sum(1), rtol=1e-5)


def test_var_keepdims_of_the_newer_api() -> None:
    x = rand((16, 24), 10)

    def fn(t):
        kept, dropped = nl.var(t, axis=1, keepdims=True), nl.var(t, axis=1, keepdims=False)
        assert kept.shape == (16, 1) and dropped.shape == (16,) and nl.var(t, axis=1).shape == (16, 1)  # 2.26
        out = nl.ndarray((16, 2), dtype=nl.float32)
        out[:, 0:1] = kept
        out[:, 1:2] = nl.expand_dims(dropped, 1)
        return out

    out = run_tiles(fn, x)
    np.testing.assert_allclose(out, np.stack([x.var(1), x.var(1)], axis=1), rtol=1e-4)


def test_buffer_predicates_of_the_newer_api() -> None:
    table = {nl.sbuf: (False, True, False, True), nl.psum: (False, True, True, False),
             nl.shared_hbm: (True, False, False, False), nl.private_hbm: (True, False, False, False),
             nl.hbm: (True, False, False, False), "sbuf": (False, True, False, True)}  # fmt: skip
    for buffer, want in table.items():
        assert (nl.is_hbm(buffer), nl.is_on_chip(buffer), nl.is_psum(buffer), nl.is_sbuf(buffer)) == want, buffer
    with pytest.raises(TypeError, match="takes a buffer"):
        nl.is_sbuf("dram")


def test_comparisons_default_to_bool_tiles() -> None:
    x = rand((4, 8), 9)
    out = run_tiles(lambda t: nl.less(t, 0.0), x)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, (x < 0).astype(np.uint8))


def test_shared_constant_invert_and_constants() -> None:
    table = np.arange(24, dtype=np.int32).reshape(4, 6)

    def kernel():
        c = nl.shared_constant(table)
        out = nl.ndarray((4, 6), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, nl.invert(nl.load(c)))
        return out

    np.testing.assert_array_equal(nki.simulate_kernel(kernel), ~table)
    assert nl.finfo(nl.bfloat16).bits == 16 and nl.fp32.min == np.finfo(np.float32).min
    assert nl.spmd_dim(nl.nc(2), 3) == 6 and nl.static_cast(2.7, nl.int32) == 2


def test_device_print_prints_values_after_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    x = np.array([[1.5, -2.0]], np.float32)

    def fn(t):
        nl.device_print("tile:", t)
        return nl.multiply(t, 2.0)

    run_tiles(fn, x)
    assert capsys.readouterr().out.strip() == "tile: [[ 1.5 -2. ]]"


def test_rand_is_uniform_and_seeded() -> None:
    def kernel():
        nl.random_seed(7)
        out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.rand((64, 32)))
        return out

    a, b = nki.simulate_kernel(kernel), nki.simulate_kernel(kernel)
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 0.0 and a.max() < 1.0 and abs(a.mean() - 0.5) < 0.05


def test_unsupported_functions_raise_a_kernel_error_naming_them() -> None:
    with pytest.raises(KernelError, match=r"nl\.all_reduce is not supported"):
        run_tiles(lambda t: nl.all_reduce(t, op=np.add, program_axes=[0]), rand((4, 4)))
    with pytest.raises(TypeError, match="probb"):
        run_tiles(lambda t: nisa.dropout(t, 0.5, probb=0.5), rand((4, 4)))


def test_compiler_direct_allocation_is_honoured_without_warning() -> None:
    x = rand((128, 64), 10)

    @ncc.skip_middle_end_transformations
    def kernel(a):
        t = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[0] = nl.load(a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(t[0]))
        return out

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = nki.simulate_kernel(kernel, x)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-5)
    assert not any(issubclass(w.category, NkiCompatWarning) and "mod_alloc" in str(w.message) for w in seen)
    assert ncc.sbuf.auto_alloc() is nl.sbuf and ncc.psum.auto_alloc() is nl.psum


def test_trace_is_an_alias_of_jit() -> None:
    @nki.trace
    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    x = rand((4, 4), 11)
    np.testing.assert_array_equal(kernel(x), x)


def test_lazy_initialization_accepted_with_a_warning_and_profile_num_execs(tmp_path) -> None:
    x = rand((128, 32), 12)

    def kernel(a):
        acc = nl.zeros((32, 32), dtype=nl.float32, buffer=nl.psum, lazy_initialization=True)
        t = nl.load(a)
        acc += nisa.nc_matmul(t, t)
        out = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, acc)
        return out

    with pytest.warns(NkiCompatWarning, match="lazy_initialization"):
        out = nki.profile(kernel, working_directory=tmp_path, num_execs=3, profile_nth=2)(x)
    np.testing.assert_allclose(out, x.T @ x, rtol=1e-4, atol=1e-3)
    assert (tmp_path / "profile_exec_2.ntff").exists()  # execution 2 of 3 (neuron-profile naming)


def test_loop_directives_are_accepted_with_a_warning() -> None:
    x = rand((8, 8), 13)

    def fn(t):
        out = nl.ndarray((8, 8), dtype=nl.float32)
        for i in nl.affine_range(2, directives=ncc.multi_buffer(2)):
            out[:, 4 * i : 4 * i + 4] = nl.add(t[:, 4 * i : 4 * i + 4], 1.0)
        return out

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(run_tiles(fn, x), x + 1)
    assert any(issubclass(w.category, NkiCompatWarning) and "directives" in str(w.message) for w in seen)


def test_loop_reduce_accumulates_into_the_assigned_tile() -> None:
    x = rand((8, 12), 14)

    def fn(t):
        acc = nl.zeros((8, 4), dtype=nl.float32)
        for i in nl.affine_range(3):
            acc[:, :] = nl.loop_reduce(t[:, 4 * i : 4 * i + 4], op=np.add, loop_indices=[i])
        return acc

    np.testing.assert_allclose(run_tiles(fn, x), x[:, 0:4] + x[:, 4:8] + x[:, 8:12], rtol=1e-6)


def test_compiler_decorators_keep_spmd_launches() -> None:
    """`@ncc.enable_stack_allocator` over `@nki.jit`: the kernel still launches over a grid (`kernel[2]`) and the
    unmodelled decorator warns."""

    @ncc.enable_stack_allocator(log_level=20)
    @nki.jit
    def add_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i * 4 : i * 4 + 4, :], value=nl.add(nl.load(x[i * 4 : i * 4 + 4, :]), 1.0))
        return out

    x = rand((8, 6), 11)
    with pytest.warns(NkiCompatWarning, match="enable_stack_allocator"):
        got = add_rows[2](x)
    np.testing.assert_allclose(got, x + 1.0)
    assert add_rows.__name__ == "add_rows"
