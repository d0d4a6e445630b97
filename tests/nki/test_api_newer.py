"""Newer-NKI-API additions held to numpy: virtual registers, NkiTensor.select / vector_select / indirect, and the
2.26 nki.FrameworkKernel base class."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.device import simulate
from nprof.errors import KernelError

# -- virtual registers -------------------------------------------------------------------------------------------


def _registers(seed_hbm):
    out = nl.ndarray((1, 5), dtype=nl.int32, buffer=nl.shared_hbm)
    buf = nl.ndarray((1, 5), dtype=nl.int32, buffer=nl.sbuf)
    imm = nisa.register_alloc(-9)
    from_hbm = nisa.register_alloc()
    nisa.register_load(from_hbm, seed_hbm)
    copy = nisa.register_alloc(0)
    nisa.register_move(copy, from_hbm)
    nisa.register_store(buf[0:1, 0:1], imm)
    nisa.register_store(buf[0:1, 1:2], from_hbm)
    nisa.register_store(buf[0:1, 2:3], copy)
    nisa.register_move(copy, 123456)
    nisa.register_store(buf[0:1, 3:4], copy)
    staged = nisa.register_alloc()
    nisa.register_load(staged, buf[0:1, 3:4])  # from SBUF
    nisa.register_store(buf[0:1, 4:5], staged)
    nl.store(out, buf)
    return out


def test_registers_hold_what_was_moved_loaded_and_stored() -> None:
    kernel = nki.jit(_registers)
    got = kernel(np.array([[31]], np.int32))
    np.testing.assert_array_equal(got, [[-9, 31, 31, 123456, 123456]])
    # moves of immediates and registers are sequencer operations ("does not access SBUF, PSUM, or HBM"): no
    # engine time; loads and stores touch memory and cost their copy or DMA
    rows = simulate(kernel.trace(np.array([[31]], np.int32)).program, numerics=False).profile.instructions
    times = {r["operands"]: r["duration"] for r in rows.to_pylist()}
    moves = [d for text, d in times.items() if "register=True" in text]
    assert len(moves) == 4 and all(d == 0 for d in moves)  # alloc(-9), alloc(0), move(reg), move(123456)
    assert all(d > 0 for text, d in times.items() if "register=True" not in text)


def test_register_values_are_unknown_while_tracing_and_registers_hold_integers() -> None:
    def branch(x):
        reg = nisa.register_alloc(1)
        if reg:
            pass
        return x

    with pytest.raises(TypeError, match="not known while the kernel is traced"):
        nki.jit(branch)(np.zeros((1, 1), np.int32))

    def floats(x):
        nisa.register_load(nisa.register_alloc(), x)
        return x

    with pytest.raises(KernelError, match="registers hold integers"):
        nki.jit(floats)(np.zeros((1, 1), np.float32))

    def not_a_register(x):
        t = nl.load(x)
        nisa.register_move(t, 3)
        return x

    with pytest.raises(KernelError, match="must be a virtual register"):
        nki.jit(not_a_register)(np.zeros((1, 1), np.int32))


# -- select / vector_select ----------------------------------------------------------------------------------------


def _selects(h, pick, rows):
    a = nl.ndarray((128, 8), dtype=h.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray((128, 8), dtype=h.dtype, buffer=nl.shared_hbm)
    c = nl.ndarray((128, 128, 8), dtype=h.dtype, buffer=nl.shared_hbm)
    nl.store(a, nl.load(h.select(0, 5)))  # static
    nl.store(b, nl.load(h.select(0, nl.load(pick))))  # a runtime index
    nl.store(c, nl.load(h.vector_select(0, nl.load(rows))))  # one row per partition
    return a, b, c


def test_select_and_vector_select_match_numpy_indexing() -> None:
    rng = np.random.default_rng(3)
    h = rng.random((64, 128, 8), dtype=np.float32)
    pick = np.array([[41]], np.int32)
    rows = rng.integers(0, 64, (128, 1)).astype(np.int32)
    a, b, c = nki.jit(_selects)(h, pick, rows)
    np.testing.assert_array_equal(a, h[5])
    np.testing.assert_array_equal(b, h[41])
    np.testing.assert_array_equal(c, h[rows[:, 0]])


def test_select_rules() -> None:
    def on_chip_partition(x, i):
        nl.load(x).select(0, nl.load(i))

    with pytest.raises(KernelError, match="cannot address the partition dim"):
        nki.jit(on_chip_partition)(np.zeros((4, 8), np.float32), np.zeros((1, 1), np.int32))

    def vector_on_chip(x, i):
        nl.load(x).vector_select(0, nl.load(i))

    with pytest.raises(KernelError, match="HBM tensors only"):
        nki.jit(vector_on_chip)(np.zeros((4, 8), np.float32), np.zeros((4, 1), np.int32))


# -- tensor indirection ----------------------------------------------------------------------------------------------


def _snake(index: np.ndarray, n: int, group: int) -> list[int]:
    """Offset i of an indirect view, as the reference lays them out: index[i % G, i // G]."""
    return [int(index[i % group, i // group]) for i in range(n)]


def _gather(x, idx):
    out = nl.ndarray((64, 20), dtype=x.dtype, buffer=nl.shared_hbm)
    t, ix = nl.load(x), nl.load(idx)
    g = nl.ndarray((64, 20), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=g, src=t.indirect(ix, num_elem=20))
    nl.store(out, nl.exp(t.indirect(ix, num_elem=20)) - nl.exp(g))  # the nl path reads the same columns
    return out, g


def _gather_out(x, idx):
    out, g = _gather(x, idx)
    res = nl.ndarray((64, 20), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(res, g)
    return res, out


def test_indirect_gathers_columns_at_snake_offsets() -> None:
    rng = np.random.default_rng(5)
    x = rng.random((64, 40), dtype=np.float32)
    idx = rng.integers(0, 40, (64, 2)).astype(np.int32)
    kernel = nki.jit(_gather_out, platform_target="trn3")
    got, diff = kernel(x, idx)
    np.testing.assert_array_equal(got, x[:, _snake(idx, 20, 16)])
    np.testing.assert_array_equal(diff, np.zeros_like(diff))
    # the hardware indexes inside the one instruction (Trainium3 guide): the per-column copies carrying the
    # addressing take no time, so the kernel's VectorE time is that of its own instructions
    rows = simulate(kernel.trace(x, idx).program, numerics=False).profile.instructions.to_pylist()
    carriers = [r for r in rows if "inline=True" in r["operands"]]
    assert len(carriers) == 40 and all(r["duration"] == 0 for r in carriers)
    copy = next(r for r in rows if r["opcode"] == "TENSOR_COPY" and "inline" not in r["operands"])
    assert copy["duration"] > 0


def _scatter(x, idx, v):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nisa.tensor_scalar(dst=t.indirect(nl.load(idx), num_elem=20), data=nl.load(v), op0=nl.multiply, operand0=2.0)
    nl.store(out, t)
    return out


def test_indirect_destination_scatters_the_result() -> None:
    rng = np.random.default_rng(6)
    x = rng.random((64, 40), dtype=np.float32)
    cols = rng.permutation(40)[:20]
    idx = np.zeros((64, 2), np.int32)
    for i, c in enumerate(cols):
        idx[i % 16, i // 16] = c
    v = rng.random((64, 20), dtype=np.float32)
    got = nki.jit(_scatter, platform_target="trn3")(x, idx, v)
    want = x.copy()
    want[:, cols] = 2 * v
    np.testing.assert_array_equal(got, want)


def _matmul_moving(s, m, idx):
    out = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((16, 40), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, nl.load(s), nl.load(m).indirect(nl.load(idx), num_elem=40))
    nl.store(out, nl.copy(acc))
    return out


def test_tensor_engine_reads_offsets_in_groups_of_32() -> None:
    rng = np.random.default_rng(7)
    s = rng.random((32, 16), dtype=np.float32)
    m = rng.random((32, 64), dtype=np.float32)
    idx = rng.integers(0, 64, (32, 2)).astype(np.int32)
    got = nki.jit(_matmul_moving, platform_target="trn3")(s, m, idx)
    np.testing.assert_allclose(got, s.T @ m[:, _snake(idx, 40, 32)], rtol=1e-5)


def test_indirect_refusals() -> None:
    rng = np.random.default_rng(8)
    x = rng.random((64, 40), dtype=np.float32)
    idx = rng.integers(0, 40, (64, 2)).astype(np.int32)
    with pytest.raises(KernelError, match="needs NeuronCore-v4"):
        nki.jit(_gather_out)(x, idx)

    def too_many(x, idx):
        out = nl.ndarray((64, 40), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.load(x).indirect(nl.load(idx), num_elem=40)))
        return out

    with pytest.raises(KernelError, match=r"index\[i % 16, i // 16\]"):  # 40 offsets need more than 16 x 2
        nki.jit(too_many, platform_target="trn3")(x, idx)


# -- nki.FrameworkKernel ---------------------------------------------------------------------------------------------


class NumpyFramework(nki.FrameworkKernel):
    """A 'framework' whose tensors are numpy arrays."""

    def is_framework_tensor(self, t):
        return isinstance(t, np.ndarray)

    def map_framework_tensor(self, t):
        return t.shape, t.dtype

    def translate_to_neuron_dtype(self, _dtype):
        return _dtype


def _add_into(in1, in2, out):
    nl.store(out, nl.add(nl.load(in1), nl.load(in2)))


def _scaled(x, factor):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(x), factor))
    return out


def test_framework_kernel_config_names_inputs_and_outputs() -> None:
    k = NumpyFramework(func_name="_add_into", func=_add_into, grid=(2,))
    a = np.zeros((16, 8), np.float32)
    config, inputs, outputs = k.dump_config(a, a, a)
    assert (inputs, outputs) == (["in1", "in2"], ["out"])
    cfg = json.loads(config)
    assert cfg["grid"] == [2] and cfg["outputs"] == [{"name": "out", "shape": [16, 8], "dtype": "float32"}]
    assert k.dump_config(a, a, a) is k.dump_config(a, a, a)  # cached by shapes
    k2 = NumpyFramework(func_name="_scaled", func=_scaled, enable_cache=False)
    first = k2.dump_config(np.zeros((4, 6), np.float16), 3.0)
    assert first[1:] == (["x"], ["out"]) and json.loads(first[0])["inputs"][0]["dtype"] == "float16"
    assert k2.dump_config(np.zeros((4, 6), np.float16), 3.0) is not first


def test_framework_kernel_base_methods_must_be_implemented() -> None:
    base = nki.FrameworkKernel(func_name="f", func=_scaled)
    with pytest.raises(NotImplementedError, match="is_framework_tensor"):
        base.dump_config(np.zeros((2, 2), np.float32), 1.0)
    with pytest.raises(TypeError, match="gird"):
        nki.FrameworkKernel(func_name="f", func=_scaled, gird=(2,))
