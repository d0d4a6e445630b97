"""Tracing: instruction lowering, dependencies, source locations, the ProgramBuilder contract."""

import math

import numpy as np
import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.arch.isa import Engine, Opcode, Space
from nprof.errors import KernelError
from nprof.nki.trace import ProgramBuilder


def exp_kernel(in_tensor):
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    sz_p, sz_f = in_tensor.shape
    i_f = nl.arange(sz_f)[None, :]
    for p in nl.affine_range(math.ceil(sz_p / nl.tile_size.pmax)):
        i_p = p * nl.tile_size.pmax + nl.arange(nl.tile_size.pmax)[:, None]
        in_tile = nl.load(in_tensor[i_p, i_f], mask=(i_p < sz_p))  # LOAD_LINE
        out_tile = nl.exp(in_tile)  # EXP_LINE
        nl.store(out_tensor[i_p, i_f], value=out_tile, mask=(i_p < sz_p))  # STORE_LINE
    return out_tensor


def _line(marker: str) -> str:
    with open(__file__) as f:
        for no, text in enumerate(f, 1):
            if f"# {marker}" in text and "def " not in text:
                return f"test_trace.py:{no}"
    raise AssertionError(marker)


def trace_exp(rows=250, cols=512):
    b = ProgramBuilder("exp")
    x = b.hbm_tensor("x", (rows, cols), nl.float32)
    b.mark_output(b.call(exp_kernel, x))
    return b.build()


def test_exp_kernel_lowering_and_partial_tile():
    prog = trace_exp()
    ops = [(i.engine, i.opcode) for i in prog.instructions]
    assert (
        ops
        == [(Engine.DMA, Opcode.DMA_DIRECT2D), (Engine.SCALAR, Opcode.ACTIVATE), (Engine.DMA, Opcode.DMA_DIRECT2D)] * 2
    )
    last_load = prog.instructions[3]
    assert last_load.ins[0].partitions == 122 and last_load.ins[0].offset == 128 * 512
    assert last_load.outs[0].space is Space.SBUF and last_load.outs[0].partitions == 122
    assert prog.instructions[1].attr("func") == "exp"
    assert [t.kind for t in prog.tensors] == ["input", "output"]


def test_source_locations_point_at_kernel_lines():
    prog = trace_exp()
    sources = [i.source for i in prog.instructions[:3]]
    assert sources == [_line("LOAD_LINE"), _line("EXP_LINE"), _line("STORE_LINE")]


def test_deps_independent_tiles_and_load_store_chain():
    prog = trace_exp()
    ins = prog.instructions
    assert ins[0].deps == () and ins[3].deps == ()  # the two loads are independent
    assert ins[1].deps == (0,) and ins[2].deps == (1,)
    assert ins[4].deps == (3,) and ins[5].deps == (4,)  # second tile never waits on the first
    # one queue per DMA statement (nprof.arch.cost): both loads share one, both stores the next
    assert (ins[0].queue, ins[3].queue, ins[2].queue, ins[5].queue) == (0, 0, 1, 1)


def test_store_after_load_of_same_hbm_region_depends_on_it():
    def kernel(x):
        t = nl.load(x[0:128, 0:64])
        nl.store(x[0:128, 0:64], value=nl.exp(t))  # in place: WAR on x
        u = nl.load(x[0:128, 64:128])  # disjoint columns: no dependency on the store
        return u

    b = ProgramBuilder("inplace")
    x = b.hbm_tensor("x", (128, 128), nl.float32)
    b.call(kernel, x)
    ins = b.build().instructions
    assert ins[2].opcode is Opcode.DMA_DIRECT2D and ins[2].deps == (0, 1)  # WAR on the load, RAW on exp
    assert ins[3].deps == ()
    load2 = b.instructions[3]
    assert load2.ins[0].offset == 64


def test_sbuf_reuse_orders_after_previous_users():
    b = ProgramBuilder("reuse")
    x = b.hbm_tensor("x", (128, 512), nl.float32)

    def kernel(x):
        for _ in nl.affine_range(200):  # 200 x 2 KiB > 192 KiB: regions must be reused
            nl.exp(nl.load(x))

    b.call(kernel, x)
    prog = b.build()
    assert prog.sbuf_bytes <= b.preset.sbuf_partition_bytes
    loads = [i for i, ins in enumerate(prog.instructions) if ins.opcode is Opcode.DMA_DIRECT2D]
    # a later load into a recycled region waits for the ACTIVATE that read the old tile there
    assert any(prog.instructions[i].deps for i in loads[100:])
    prog.validate()


def test_ldweights_only_when_stationary_changes():
    def kernel(st, mv):
        s = nl.load(st)
        m = nl.load(mv)
        a = nisa.nc_matmul(s, m)
        b = nisa.nc_matmul(s, m)
        s2 = nl.exp(s)
        c = nisa.nc_matmul(s2, m)
        return a, b, c

    b = ProgramBuilder("mm")
    b.call(kernel, b.hbm_tensor("st", (128, 128), "float32"), b.hbm_tensor("mv", (128, 512), "float32"))
    ops = [i.opcode for i in b.build().instructions if i.engine is Engine.TENSOR]
    assert ops == [Opcode.LDWEIGHTS, Opcode.MATMUL, Opcode.MATMUL, Opcode.LDWEIGHTS, Opcode.MATMUL]


def test_matmul_accumulate_flag_and_psum_output():
    def kernel(st, mv):
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            acc += nisa.nc_matmul(nl.load(st[k * 128 : (k + 1) * 128, :]), nl.load(mv[k * 128 : (k + 1) * 128, :]))
        return acc

    b = ProgramBuilder("acc")
    b.call(kernel, b.hbm_tensor("st", (256, 128), "bfloat16"), b.hbm_tensor("mv", (256, 512), "bfloat16"))
    mms = [i for i in b.build().instructions if i.opcode is Opcode.MATMUL]
    assert [m.attr("accumulate") for m in mms] == [True, True]
    assert all(m.outs[0].space is Space.PSUM and m.outs[0].dtype == "float32" for m in mms)
    assert mms[0].outs[0] == mms[1].outs[0]


def test_builder_scope_weights_and_internal_tensors():
    b = ProgramBuilder("graph", preset="trn2")
    w_value = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    x = b.hbm_tensor("x", (128, 4), "float32")
    w = b.hbm_tensor("w", (128, 4), nl.float32, kind="weight", value=w_value)
    assert x.shape == (128, 4) and x.dtype == nl.float32

    def add_kernel(a, c):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(c)))
        return out

    with b.scope(layer="model.fc1", hlo_name="%add = add(x, w)", source="model.py:12"):
        y = b.call(add_kernel, x, w)
    z = b.call(add_kernel, y, w)
    b.mark_output(z)
    prog = b.build()
    kinds = {t.name: t.kind for t in prog.tensors}
    assert kinds[y.name] == "internal" and kinds[z.name] == "output" and kinds["w"] == "weight"
    np.testing.assert_array_equal(prog.constants["w"], w_value)
    first = prog.instructions[:4]
    assert all(i.layer == "model.fc1" and i.source == "model.py:12" for i in first)
    assert all(i.layer is None and i.source.startswith("test_trace.py:") for i in prog.instructions[4:])
    assert prog.preset == "trn2"

    from nprof.device import simulate

    xv = np.ones((128, 4), np.float32)
    out = simulate(prog, {"x": xv}).outputs[z.name]
    np.testing.assert_array_equal(out, xv + 2 * w_value)


def test_jit_kernel_inlines_inside_builder():
    @nki.jit
    def double(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), 2.0))
        return out

    b = ProgramBuilder("inline")
    x = b.hbm_tensor("x", (4, 4), "float32")
    y = double(x)
    b.mark_output(y)
    assert len(b.build().instructions) == 3


def test_program_validates_and_lists_tensors():
    prog = trace_exp(128, 64)
    prog.validate()
    assert prog.sbuf_bytes >= 2 * 64 * 4
    assert prog.tensor("x").shape == (128, 64)


def test_tiles_are_freed_when_unreferenced():
    def kernel(x):
        for _ in range(500):
            t = nl.load(x)  # 48 KiB per partition, replaced every iteration
            del t

    b = ProgramBuilder("free")
    b.call(kernel, b.hbm_tensor("x", (128, 12288), "float32"))
    assert b.build().sbuf_bytes == 12288 * 4


def test_language_outside_kernel_is_an_error():
    with pytest.raises(KernelError) as err:
        nl.zeros((2, 2), nl.float32)
    assert "test_trace.py:" in str(err.value) and "inside a traced kernel" in str(err.value)


def test_assigning_a_load_dmas_straight_into_the_tile():
    def kernel(x):
        buf = nl.ndarray((2, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        for b in nl.affine_range(2):
            buf[b] = nl.load(x[b * 128 : (b + 1) * 128, :])
        cast = nl.ndarray((128, 64), dtype=nl.bfloat16)
        cast[...] = nl.load(x[0:128, :])  # dtype differs: load, then a converting copy
        return buf, cast

    b = ProgramBuilder("direct")
    b.call(kernel, b.hbm_tensor("x", (256, 64), "float32"))
    prog = b.build()
    ops = [i.opcode for i in prog.instructions]
    assert ops == [Opcode.DMA_DIRECT2D] * 3 + [Opcode.TENSOR_COPY]
    first, second = prog.instructions[0].outs[0], prog.instructions[1].outs[0]
    assert first.tensor == second.tensor and second.offset - first.offset == 64 * 4


def test_tile_used_after_its_kernel_returned_is_an_error():
    def make(x):
        return nl.load(x)  # returns an on-chip tile: freed when the call returns

    def use(t):
        return nl.exp(t)

    b = ProgramBuilder("dangling")
    t = b.call(make, b.hbm_tensor("x", (4, 4), "float32"))
    with pytest.raises(KernelError, match="after the kernel that allocated it returned"):
        b.call(use, t)


def test_builder_dma_flags_and_spmd_calls():
    b = ProgramBuilder("flags")
    x = b.hbm_tensor("x", (256, 8), "float32")
    spill = b.hbm_tensor("spill", (256, 8), "float32", kind="internal")

    def body(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rows = nl.ds(nl.program_id(0) * 128, 128)
        t = nl.load(x[rows, :])
        b.dma(spill[rows, :], t, spill=True)
        nl.store(out[rows, :], value=t)
        return out

    out = b.call_spmd(body, (2,), x)
    b.mark_output(out)
    prog = b.build()
    flagged = [i for i in prog.instructions if i.attr("spill")]
    assert len(flagged) == 2 and all(i.outs[0].tensor == "spill" for i in flagged)
    assert [t.name for t in prog.outputs] == [out.name]
    from nprof.device import simulate

    xv = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    np.testing.assert_array_equal(simulate(prog, {"x": xv}).outputs[out.name], xv)
