"""The `simulate` contract: inputs, warnings, execution errors, executions, profile rows and manifest."""

from __future__ import annotations

import numpy as np
import pytest

from nprof.arch.isa import Access, Engine, Opcode, Space
from nprof.device import simulate
from nprof.errors import NprofError
from tests.device.kit import Kit, rows


def exp_kit(dtype: str = "float32") -> Kit:
    k = Kit("expk")
    x = k.load("x", np.zeros((8, 40), np.float32), dtype)
    y = k.sbuf("y", 8, 40, dtype)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (x,), source="k.py:7", func="exp", scale=0.5, bias=0.25)
    k.store("out", y)
    return k


def test_inputs_are_used_and_safe_float_dtypes_convert() -> None:
    k = exp_kit()
    x = np.linspace(-1, 1, 320).reshape(8, 40)  # float64 -> float32 silently
    res = simulate(k.program(), {"x": x})
    np.testing.assert_allclose(res.outputs["out"], np.exp(x * 0.5 + 0.25), rtol=1e-6)
    assert res.warnings == ()
    assert res.outputs["out"].dtype == np.float32


def test_missing_inputs_run_on_zeros_with_a_warning() -> None:
    res = simulate(exp_kit().program())
    assert res.warnings == ("no inputs given: running on all-zero inputs; results may be inf/NaN",)
    np.testing.assert_allclose(res.outputs["out"], np.full((8, 40), np.exp(0.25), np.float32))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.zeros((8, 41), np.float32), "input 'x' expects shape (8, 40) float32, got shape (8, 41)"),
        (np.zeros((8, 40), np.int64) > 0, "input 'x' expects shape (8, 40) float32, got bool"),
        (np.zeros((8, 40), np.complex64), "got complex64"),
    ],
)
def test_bad_inputs_name_the_tensor_and_expected_shape(value: np.ndarray, message: str) -> None:
    with pytest.raises(NprofError, match=message.replace("(", r"\(").replace(")", r"\)")):
        simulate(exp_kit().program(), {"x": value})


def test_unknown_input_lists_the_inputs() -> None:
    with pytest.raises(NprofError, match=r"has no input 'y'; its inputs are: x"):
        simulate(exp_kit().program(), {"y": np.zeros((8, 40))})


def test_float_input_for_an_int_tensor_is_refused_int_in_range_accepted() -> None:
    k = Kit()
    h = k.hbm("i", (2, 3), "int8")
    t = k.sbuf("t", 2, 3, "int8")
    k.dma(t, h)
    k.store("out", t)
    with pytest.raises(NprofError, match=r"got float32; convert the array to int8"):
        simulate(k.program(), {"i": np.zeros((2, 3), np.float32)})
    with pytest.raises(NprofError, match=r"values outside the int8 range"):
        simulate(k.program(), {"i": np.full((2, 3), 300)})
    out = simulate(k.program(), {"i": np.arange(6).reshape(2, 3)}).outputs["out"]
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))


def test_nan_outputs_are_an_execution_error_unless_ignored() -> None:
    k = Kit()
    x = k.load("x", np.zeros((2, 2), np.float32))
    y = k.sbuf("y", 2, 2)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (x,), func="log", bias=-1.0)  # log(-1) = NaN
    k.store("out", y)
    with pytest.raises(NprofError, match=r"output 'out' has 4 NaN/inf values of 4.*--ignore-exec-errors"):
        simulate(k.program(), {"x": np.zeros((2, 2))})
    res = simulate(k.program(), {"x": np.zeros((2, 2))}, ignore_exec_errors=True)
    assert res.warnings == ("output 'out' has 4 NaN/inf values of 4",)
    assert np.isnan(res.outputs["out"]).all()
    # with zero-filled inputs NaN is expected, so only a warning
    assert len(simulate(k.program()).warnings) == 2


def test_out_of_bounds_access_is_an_execution_error_naming_the_instruction() -> None:
    k = Kit()
    x = k.load("x", np.ones((4, 4), np.float32))
    past_end = Access(Space.SBUF, "bad", "float32", 192 * 1024 - 8, 4, ((1, 4),))
    k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (past_end,), (x,), source="k.py:9")
    k.store("out", x)
    with pytest.raises(NprofError, match=r"instruction 1 \(TENSOR_COPY, k.py:9\).*outside.*--ignore-exec-errors"):
        simulate(k.program(), k.inputs)
    res = simulate(k.program(), k.inputs, ignore_exec_errors=True)
    assert "instruction 1 (TENSOR_COPY, k.py:9) skipped" in res.warnings[0]
    np.testing.assert_array_equal(res.outputs["out"], np.ones((4, 4)))


def test_executions_and_profile_nth() -> None:
    prog = exp_kit().program()
    res = simulate(prog, executions=3, profile_nth=2, numerics=False)
    assert len(res.latencies_ns) == 3 and len(set(res.latencies_ns)) == 1
    assert res.profile.info.meta["profiled_execution"] == "2"
    assert res.latencies_ns[0] == res.profile.info.total_time_ns
    with pytest.raises(NprofError, match=r"profile_nth 4 is outside the executions 1..3"):
        simulate(prog, executions=3, profile_nth=4)
    with pytest.raises(NprofError, match=r"executions must be >= 1"):
        simulate(prog, executions=0)


def test_world_size_runs_the_multi_worker_job_and_returns_one_rank() -> None:
    prog = exp_kit().program()
    one = simulate(prog, numerics=False)
    res = simulate(prog, numerics=False, world_size=2, rank=1)
    assert (res.profile.info.rank, res.profile.info.world_size) == (1, 2)
    assert res.latencies_ns == one.latencies_ns  # no collectives: the workers do not interact
    with pytest.raises(NprofError, match="rank 2 is out of range for world_size 2"):
        simulate(prog, world_size=2, rank=2)


def test_unknown_preset_lists_valid_ones() -> None:
    with pytest.raises(NprofError, match=r"unknown device preset 'trn9'; valid presets: trn1, trn2"):
        simulate(exp_kit().program(), preset="trn9")


def test_profile_rows_carry_source_operands_bytes_and_ids() -> None:
    res = simulate(exp_kit().program(), numerics=False)
    ev = rows(res)
    assert sorted(ev) == [0, 1, 2]
    act = ev[1]
    assert act["nki_source_location"] == "k.py:7"
    assert act["operands"] == "sbuf y[0:8, 48:88] fp32 <- sbuf x_sb[0:8, 0:40] fp32 ; bias=0.25 func=exp scale=0.5"
    assert (act["sbuf_read_bytes"], act["sbuf_write_bytes"], act["hbm_read_bytes"]) == (1280, 1280, 0)
    assert (act["deps"], act["pc"], act["iteration"]) == ([0], 1, 0)
    assert ev[2]["direction"] == "sbuf->hbm" and ev[2]["tensor"] == "out" and ev[2]["deps"] == [1]


def test_matmul_flops_and_bytes() -> None:
    k = Kit()
    w, x = k.sbuf("w", 72, 64, "bfloat16"), k.sbuf("x", 72, 100, "bfloat16")
    acc = k.psum("acc", 64, 100)
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w, x), deps=(), accumulate=True)
    r = rows(k.run(numerics=False))[0]
    assert r["flops"] == 2 * 72 * 64 * 100  # 2*K*M*N
    assert r["hw_flops"] == 2 * 128 * 64 * 100  # the full 128-row array
    assert r["sbuf_read_bytes"] == (72 * 64 + 72 * 100) * 2
    assert (r["psum_write_bytes"], r["psum_read_bytes"]) == (64 * 100 * 4, 64 * 100 * 4)  # accumulate reads PSUM


def test_manifest_describes_the_device_and_program() -> None:
    res = simulate(exp_kit().program(), numerics=False)
    info = res.profile.info
    assert (info.device, info.preset, info.name, info.rank, info.world_size) == (
        "virtual-neuroncore", "trn1", "expk", 0, 1,
    )  # fmt: skip
    assert info.total_time_ns == res.latencies_ns[0] == res.profile.total_time_ns
    ends = [r["ts"] + r["duration"] for r in rows(res).values()]
    assert info.total_time_ns == max(ends)
    assert info.peak_flops == 2 * 128 * 128 * 2.8e9  # no matmul: the BF16 peak
    assert info.hbm_bandwidth == 410e9
    assert [(t.name, t.kind) for t in info.tensors] == [("x", "input"), ("out", "output")]


def test_fp32_only_program_uses_the_fp32_peak() -> None:
    k = Kit()
    w, x = k.sbuf("w", 128, 128), k.sbuf("x", 128, 512)
    k.emit(Engine.TENSOR, Opcode.MATMUL, (k.psum("a", 128, 512),), (w, x), deps=())
    assert k.run(numerics=False).profile.info.peak_flops == 2 * 128 * 128 * 2.8e9 / 4


def test_program_too_big_for_preset_sbuf() -> None:
    k = exp_kit()
    k._sbuf = 300 * 1024
    with pytest.raises(NprofError, match=r"needs 307200 B SBUF"):
        k.run()


def test_malformed_instruction_is_reported() -> None:
    k = Kit()
    k.dma(k.sbuf("t", 4, 4), k.hbm("x", (4, 4)), queue=16)
    with pytest.raises(NprofError, match=r"uses DMA queue 16; valid queues are 0..15"):
        k.run()


def test_dependency_on_a_later_instruction_is_refused() -> None:
    k = Kit()
    k.emit(Engine.VECTOR, Opcode.MEMSET, (k.sbuf("a", 4, 4),), deps=(1,), value=0.0)
    k.emit(Engine.VECTOR, Opcode.MEMSET, (k.sbuf("b", 4, 4),), deps=(), value=0.0)
    with pytest.raises(NprofError, match=r"instruction 0 \(MEMSET\) waits for instruction 1, not an earlier one"):
        k.run()


@pytest.mark.parametrize(
    ("k_", "m", "n", "message"),
    [
        (128, 256, 64, "stationary free size 256 exceeds 128"),
        (128, 64, 1024, "moving free size 1024 exceeds 512"),
        (200, 64, 64, "contraction sizes 200 and 200 must be equal and <= 128"),
    ],
)
def test_matmul_tile_limits(k_: int, m: int, n: int, message: str) -> None:
    k = Kit()
    w, x = k.sbuf("w", k_, m, "bfloat16"), k.sbuf("x", k_, n, "bfloat16")
    k.emit(Engine.TENSOR, Opcode.MATMUL, (k.psum("acc", m, n),), (w, x), deps=())
    with pytest.raises(NprofError, match=message):
        k.run(numerics=False)


def test_float32_input_for_a_bf16_tensor_rounds_to_nearest_even() -> None:
    import ml_dtypes

    k = Kit()
    h = k.hbm("x", (4, 8), "bfloat16")
    t = k.sbuf("t", 4, 8, "bfloat16")
    k.dma(t, h)
    k.store("out", t)
    x = np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8) + np.float32(1e-3)
    out = simulate(k.program(), {"x": x}).outputs["out"]
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
