"""Python values a loop body rebinds: NKI traces an affine/sequential range body once, so every iteration sees
the values from before the loop (nprof.nki.scopes.restore_python_values)."""

import numpy as np

import nprof.nki.compiler as ncc
import nprof.nki.language as nl
from nprof import nki
from nprof.arch.isa import Opcode, Space
from nprof.nki.kernel import Kernel
from tests.nki.helpers import rand


def test_a_counter_advanced_in_the_body_is_seen_from_before_the_loop_by_every_iteration():
    seen: list[tuple[int, int]] = []
    after: list[int] = []

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        col, label = 0, "start"
        for i in nl.affine_range(3):
            seen.append((i, col))  # (a mutated list is not undone: it records what each iteration saw)
            col += 16
            label = f"iter{i}"
            nl.store(out[:, i * 16 : (i + 1) * 16], value=nl.load(a[:, i * 16 : (i + 1) * 16]))
        after.append(col)
        assert label == "iter2"  # the last iteration's bindings stay after the loop
        return out

    a = rand((8, 48))
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)
    assert seen == [(0, 0), (1, 0), (2, 0)] and after == [16]


def test_nested_loops_restore_each_level_and_sequential_range_too():
    seen: list[tuple[int, int, int]] = []

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        outer = 100
        for i in nl.sequential_range(2):
            inner = 0
            for j in nl.affine_range(3):
                seen.append((i, outer, inner))
                inner += 1 + j
            outer += 1
            nl.store(out[i], value=nl.load(a[i]))
        return out

    a = rand((2, 4, 4))
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)
    assert seen == [(0, 100, 0)] * 3 + [(1, 100, 0)] * 3


def test_direct_allocation_address_advanced_per_iteration_reuses_the_first_iterations_address():
    """An address counter advanced after each `mod_alloc` inside the body: every iteration's tile is at the
    address the body computed once (unrolled, the addresses would walk off the end of the partition)."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        addr = 4096
        for i in nl.affine_range(a.shape[0]):
            t = nl.ndarray((nl.par_dim(32), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
            addr += 64 * 1024  # three iterations of this would pass the 192 KiB partition
            t[...] = nl.load(a[i])
            nl.store(out[i], value=t)
        return out

    a = rand((6, 32, 64), 3)
    program = Kernel(kernel).trace(a).program
    loads = [acc.offset for ins in program.instructions if ins.opcode is Opcode.DMA_DIRECT2D
             for acc in ins.outs if acc.space is Space.SBUF]  # fmt: skip
    assert loads == [4096] * 6
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)


def test_a_tile_name_rebound_in_the_body_refers_to_the_tile_from_before_the_loop_in_every_iteration():
    """NKI traces the body once: `acc = nl.add(acc, 1)` reads the pre-loop tile in every iteration."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        acc = nl.load(a)
        for _ in nl.affine_range(3):
            acc = nl.add(acc, 1.0)
        nl.store(out, value=acc)
        return out

    a = rand((4, 8), 4)
    np.testing.assert_allclose(nki.simulate_kernel(kernel, a), a + 1.0, rtol=1e-6)


def test_outside_a_kernel_the_range_is_a_plain_loop():
    total = 0
    for i in nl.affine_range(4):
        total += i
    assert total == 6


def test_an_iterations_tiles_are_freed_when_the_next_iteration_starts(monkeypatch):
    """Two 112 KiB tiles never live together: the body's tile of iteration i is unbound before iteration i + 1
    allocates its own (unrolled Python would hold it until the name is rebound, after the new allocation)."""

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0]):
            big = nl.load(a[i])  # [128, 28672] fp32: 112 KiB of each 192 KiB partition
            nl.store(out[i], value=big)
        return out

    records = []
    record = Kernel._record
    monkeypatch.setattr(Kernel, "_record", lambda self, *args, **kw: records.append(kw) or record(self, *args, **kw))
    a = rand((3, 128, 28672), 5)
    traced = Kernel(kernel).trace(a)
    assert records == [{}]  # traced once: it fits as written, no lifetime-planning re-trace
    assert traced.program.sbuf_bytes == 28672 * 4
    np.testing.assert_array_equal(nki.simulate_kernel(kernel, a), a)
