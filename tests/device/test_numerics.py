"""Numerics of every opcode on hand-built programs, against numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nprof.arch.isa import ACTIVATION_FUNCS, ALU_OPS, Access, Engine, Opcode, Space
from tests.device.kit import Kit

RNG = np.random.default_rng(1234)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_matmul_accumulates_over_k_tiles_with_partial_tiles() -> None:
    k = Kit()
    a = rand(200, 64)  # stationary: K=200 split into 128 + 72 (a partial tile), M=64
    b = rand(200, 100)  # moving: K=200, N=100
    a0 = k.load("a0", a[:128])
    a1 = k.load("a1", a[128:])
    b0 = k.load("b0", b[:128])
    b1 = k.load("b1", b[128:])
    acc = k.psum("acc", 64, 100)
    k.emit(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(a0,))
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (a0, b0), accumulate=False)
    k.emit(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(a1,))
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (a1, b1), accumulate=True)
    out = k.sbuf("o", 64, 100)
    k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (out,), (acc,))
    k.store("out", out)
    res = k.run()
    np.testing.assert_allclose(res.outputs["out"], a.T @ b, rtol=1e-5, atol=1e-4)


def test_matmul_without_accumulate_overwrites() -> None:
    k = Kit()
    a, b = rand(16, 8), rand(16, 4)
    a_sb, b_sb = k.load("a", a), k.load("b", b)
    acc = k.psum("acc", 8, 4)
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (a_sb, b_sb), accumulate=False)
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (a_sb, b_sb), accumulate=False)
    k.store("out", acc)
    np.testing.assert_allclose(k.run().outputs["out"], a.T @ b, rtol=1e-5, atol=1e-5)


def test_transpose() -> None:
    k = Kit()
    x = rand(32, 48)
    t = k.load("x", x)
    out = k.psum("t", 48, 32)
    k.emit(Engine.TENSOR, Opcode.TRANSPOSE, (out,), (t,))
    k.store("out", out)
    np.testing.assert_array_equal(k.run().outputs["out"], x.T)


def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf)(x.astype(np.float64))


REFERENCE = {
    "copy": lambda x: x,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "square": np.square,
    "abs": np.abs,
    "negative": np.negative,
    "sign": np.sign,
    "erf": _erf,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arctan": np.arctan,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "gelu_apprx_sigmoid": lambda x: x / (1 + np.exp(-1.702 * x)),
    "silu_dx": lambda x: 1 / (1 + np.exp(-x)) + x * np.exp(-x) / (1 + np.exp(-x)) ** 2,
    "gelu_dx": lambda x: 0.5 * (1 + _erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi),
    "erf_dx": lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x),
}


@pytest.mark.parametrize("func", ACTIVATION_FUNCS)
def test_activate_every_function_with_scale_and_bias(func: str) -> None:
    positive = func in ("log", "sqrt", "rsqrt", "reciprocal")
    x = np.abs(rand(8, 40)) + 0.5 if positive else rand(8, 40)
    k = Kit()
    t = k.load("x", x)
    y = k.sbuf("y", 8, 40)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (t,), func=func, scale=0.5, bias=0.25)
    k.store("out", y)
    expect = REFERENCE[func]((x * 0.5 + 0.25).astype(np.float64))
    np.testing.assert_allclose(k.run().outputs["out"], expect, rtol=2e-5, atol=2e-6)


def test_activate_per_partition_bias_scale_and_reduce() -> None:
    x, bias, scale = rand(16, 24), rand(16, 1), rand(16, 1)
    k = Kit()
    t, b, s = k.load("x", x), k.load("bias", bias), k.load("scale", scale)
    y = k.sbuf("y", 16, 24)
    r = k.sbuf("r", 16, 1)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y, r), (t, b, s), func="exp", reduce_op="add")
    k.store("out", y)
    k.store("sum", r)
    res = k.run()
    expect = np.exp(x * scale + bias)
    np.testing.assert_allclose(res.outputs["out"], expect, rtol=1e-5)
    np.testing.assert_allclose(res.outputs["sum"], expect.sum(axis=1, keepdims=True), rtol=1e-5)


ALU_REF = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": lambda a, b: np.power(np.abs(a), b),
    "bypass": lambda a, b: a,
    "is_equal": lambda a, b: (a == b).astype(np.float32),
    "not_equal": lambda a, b: (a != b).astype(np.float32),
    "is_ge": lambda a, b: (a >= b).astype(np.float32),
    "is_gt": lambda a, b: (a > b).astype(np.float32),
    "is_le": lambda a, b: (a <= b).astype(np.float32),
    "is_lt": lambda a, b: (a < b).astype(np.float32),
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).astype(np.float32),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).astype(np.float32),
    "bitwise_and": lambda a, b: (np.rint(a).astype(np.int64) & np.rint(b).astype(np.int64)).astype(np.float32),
    "bitwise_or": lambda a, b: (np.rint(a).astype(np.int64) | np.rint(b).astype(np.int64)).astype(np.float32),
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
    "mod": np.mod,
    "bitwise_xor": lambda a, b: (np.rint(a).astype(np.int64) ^ np.rint(b).astype(np.int64)).astype(np.float32),
    "logical_xor": lambda a, b: ((a != 0) != (b != 0)).astype(np.float32),
    "left_shift": lambda a, b: np.rint(a).astype(np.int64) * 2 ** np.rint(b).astype(np.int64),
    "right_shift": lambda a, b: np.floor(np.rint(a) / 2 ** np.rint(b)),
    "fmod": lambda a, b: a - b * np.trunc(a / b),
    "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b)),
}


@pytest.mark.parametrize("op", ALU_OPS)
def test_tensor_tensor_every_op(op: str) -> None:
    a = np.round(rand(8, 16) * 4)
    b = np.round(rand(8, 16) * 4)
    b[b == 0] = 3.0
    a[0, :4] = b[0, :4]  # some equal pairs for the comparisons
    if op == "power":
        a, b = np.abs(a) + 1, np.abs(b)
    if op.endswith("_shift"):  # shift counts are non-negative
        b = np.abs(b)
    k = Kit()
    ta, tb = k.load("a", a), k.load("b", b)
    out = k.sbuf("o", 8, 16)
    k.emit(Engine.VECTOR, Opcode.TENSOR_TENSOR, (out,), (ta, tb), op=op)
    k.store("out", out)
    np.testing.assert_allclose(k.run().outputs["out"], ALU_REF[op](a, b), rtol=1e-6)


def test_tensor_scalar_two_ops_reverse_and_per_partition_operand() -> None:
    x, col = rand(8, 10), rand(8, 1)
    k = Kit()
    t, c = k.load("x", x), k.load("c", col)
    o1, o2 = k.sbuf("o1", 8, 10), k.sbuf("o2", 8, 10)
    # (2 - x) * 3 with op0 reversed
    k.emit(Engine.VECTOR, Opcode.TENSOR_SCALAR, (o1,), (t,), op0="subtract", operand0=2.0, reverse0=True,
           op1="multiply", operand1=3.0)  # fmt: skip
    # max(x, col) with a per-partition operand
    k.emit(Engine.VECTOR, Opcode.TENSOR_SCALAR, (o2,), (t, c), op0="maximum")
    k.store("r1", o1)
    k.store("r2", o2)
    res = k.run()
    np.testing.assert_allclose(res.outputs["r1"], (2 - x) * 3, rtol=1e-6)
    np.testing.assert_allclose(res.outputs["r2"], np.maximum(x, col), rtol=1e-6)


@pytest.mark.parametrize(
    ("op", "axes", "negate"),
    [("add", (1,), False), ("max", (2,), False), ("min", (1, 2), False), ("multiply", (2,), True)],
)
def test_tensor_reduce_axes(op: str, axes: tuple[int, ...], negate: bool) -> None:
    x = rand(4, 6 * 5)
    k = Kit()
    t2 = k.load("x", x)
    t3 = Access(Space.SBUF, t2.tensor, "float32", t2.offset, 4, ((5, 6), (1, 5)))
    kept = [s for ax, s in ((1, 6), (2, 5)) if ax not in axes] or [1]
    out = k.sbuf("o", 4, int(np.prod(kept)))
    k.emit(Engine.VECTOR, Opcode.TENSOR_REDUCE, (out,), (t3,), op=op, axes=axes, negate=negate)
    k.store("out", out)
    fn = {"add": np.sum, "max": np.max, "min": np.min, "multiply": np.prod}[op]
    expect = fn(x.reshape(4, 6, 5), axis=axes).reshape(4, -1) * (-1 if negate else 1)
    np.testing.assert_allclose(k.run().outputs["out"], expect, rtol=1e-5)


def test_iota_int_and_float() -> None:
    k = Kit()
    i = k.sbuf("i", 4, (3, 5), "int32")
    k.emit(Engine.GPSIMD, Opcode.IOTA, (i,), (), base=7, channel_multiplier=100, steps=(10, 1))
    k.store("out", i)
    p, a, b = np.meshgrid(np.arange(4), np.arange(3), np.arange(5), indexing="ij")
    res = k.run().outputs["out"]
    assert res.dtype == np.int32
    np.testing.assert_array_equal(res, (7 + 100 * p + 10 * a + b).reshape(4, 15))


def test_affine_select_causal_mask() -> None:
    x = rand(8, 8)
    k = Kit()
    t = k.load("x", x)
    y = k.sbuf("y", 8, 8)
    # keep where p - j >= 0 (lower triangle), else -inf-like fill
    k.emit(Engine.GPSIMD, Opcode.AFFINE_SELECT, (y,), (t,), offset=0, channel_multiplier=1, steps=(-1,), cmp="ge",
           fill=-9984.0)  # fmt: skip
    k.store("out", y)
    expect = np.where(np.tril(np.ones((8, 8))) > 0, x, -9984.0)
    np.testing.assert_array_equal(k.run().outputs["out"], expect)


def test_select_reciprocal_memset() -> None:
    c, a, b = (rand(4, 6) > 0).astype(np.float32), rand(4, 6), rand(4, 6) + 3
    k = Kit()
    tc, ta, tb = k.load("c", c), k.load("a", a), k.load("b", b)
    s, r, m = k.sbuf("s", 4, 6), k.sbuf("r", 4, 6), k.sbuf("m", 4, 6, "bfloat16")
    k.emit(Engine.VECTOR, Opcode.SELECT, (s,), (tc, ta, tb))
    k.emit(Engine.VECTOR, Opcode.RECIPROCAL, (r,), (tb,))
    k.emit(Engine.GPSIMD, Opcode.MEMSET, (m,), (), value=1.5)
    k.store("sel", s)
    k.store("rec", r)
    k.store("mem", m)
    res = k.run()
    np.testing.assert_array_equal(res.outputs["sel"], np.where(c != 0, a, b))
    np.testing.assert_allclose(res.outputs["rec"], 1 / b, rtol=1e-6)
    assert res.outputs["mem"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(res.outputs["mem"].astype(np.float32), np.full((4, 6), 1.5))


def test_bn_stats_and_aggr_match_numpy_mean_var() -> None:
    x = rand(8, 30) * 3 + 1
    k = Kit()
    t = k.load("x", x)
    halves = [Access(Space.SBUF, t.tensor, "float32", t.offset + h * 4 * 12, 8, ((1, n),)) for h, n in ((0, 12),)]
    second = Access(Space.SBUF, t.tensor, "float32", t.offset + 12 * 4, 8, ((1, 18),))
    stats = k.sbuf("st", 8, 12)  # two hardware-layout [P, 6] results side by side
    st0 = Access(Space.SBUF, "st", "float32", stats.offset, 8, ((1, 6),))
    st1 = Access(Space.SBUF, "st", "float32", stats.offset + 24, 8, ((1, 6),))
    k.emit(Engine.VECTOR, Opcode.BN_STATS, (st0,), (halves[0],))
    k.emit(Engine.VECTOR, Opcode.BN_STATS, (st1,), (second,))
    agg = k.sbuf("agg", 8, 2)
    k.emit(Engine.VECTOR, Opcode.BN_AGGR, (agg,), (stats,))
    k.store("stats", stats)
    k.store("agg", agg)
    res = k.run()
    even, odd = x[:, 0:12:2], x[:, 1:12:2]  # (count, mean, variance*count) of even then odd elements
    expect = np.stack([np.full(8, 6), even.mean(1), even.var(1) * 6, np.full(8, 6), odd.mean(1), odd.var(1) * 6], 1)
    np.testing.assert_allclose(res.outputs["stats"][:, :6], expect, rtol=1e-5)
    np.testing.assert_allclose(res.outputs["agg"], np.stack([x.mean(1), x.var(1)], 1), rtol=1e-5)


def test_tensor_copy_casts_to_bf16_round_to_nearest_even() -> None:
    x = rand(4, 32) * 100
    k = Kit()
    t = k.load("x", x)
    y = k.sbuf("y", 4, 32, "bfloat16")
    k.emit(Engine.SCALAR, Opcode.TENSOR_COPY, (y,), (t,))
    k.store("out", y)
    out = k.run().outputs["out"]
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_float_to_int_truncates_toward_zero_and_saturates() -> None:
    """The rule of nprof.device.memory (evidence there): toward zero, clipped to the integer range."""
    x = np.array([[1.5, 2.5, -1.6, 1e6, -1e6, 127.4, 58.53, -0.99]], np.float32)
    k = Kit()
    t = k.load("x", x)
    y = k.sbuf("y", 1, 8, "int8")
    k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (y,), (t,))
    k.store("out", y)
    np.testing.assert_array_equal(k.run().outputs["out"], np.clip(np.trunc(x), -128, 127))
    np.testing.assert_array_equal(k.run().outputs["out"], [[1, 2, -1, 127, -128, 127, 58, 0]])


def test_dma_with_strided_hbm_access_transposes() -> None:
    x = rand(16, 8)  # HBM [16, 8]; load it transposed into SBUF [8 partitions, 16]
    k = Kit()
    h = k.input("x", x)
    t_view = Access(Space.HBM, "x", "float32", 0, 8, ((8, 16),), 0, 1)  # partition p -> column p
    tile = k.sbuf("t", 8, 16)
    k.dma(tile, t_view)
    k.store("out", tile)
    assert h.partitions == 16
    np.testing.assert_array_equal(k.run().outputs["out"], x.T)


def test_dma_converts_dtype_and_reaches_sub_rows() -> None:
    x = rand(6, 10)
    k = Kit()
    k.input("x", x)
    rows_2_4 = Access(Space.HBM, "x", "float32", 2 * 10 + 3, 3, ((1, 4),), 0, 10)  # x[2:5, 3:7]
    tile = k.sbuf("t", 3, 4, "bfloat16")
    k.dma(tile, rows_2_4)
    k.store("out", tile)
    out = k.run().outputs["out"]
    np.testing.assert_array_equal(out, x[2:5, 3:7].astype(ml_dtypes.bfloat16))


def test_weights_come_from_program_constants() -> None:
    w = rand(4, 4)
    k = Kit()
    h = k.hbm("w", (4, 4), kind="weight")
    k.constants["w"] = w
    tile = k.sbuf("t", 4, 4)
    k.dma(tile, h)
    k.store("out", tile)
    np.testing.assert_array_equal(k.run().outputs["out"], w)
