"""Prepared numerics (`nprof.device.numerics_prepared`) give the same bits as `simulate(numerics=True)`.

Held on the programs the compiler emits for a small CNN's forward and backward (copies, transposing copies,
matmuls, elementwise chains, reductions) and on a hand-written program with overlapping, reshaping and
dtype-converting copies and fills of values each dtype rounds, clips or overflows, each run twice on
different random inputs (the kept Memory must not leak state).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nprof.arch.presets import get_preset  # noqa: E402
from nprof.compiler import CompileCache  # noqa: E402
from nprof.device import simulate  # noqa: E402
from nprof.device.numerics_prepared import PreparedNumerics  # noqa: E402
from nprof.nki.trace import ProgramBuilder  # noqa: E402
from nprof.program.file import load_program  # noqa: E402
from nprof.program.model import Program  # noqa: E402


def _random_inputs(program: Program, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for t in program.inputs:
        if t.dtype in ("int32", "uint8", "int16", "int8"):
            out[t.name] = rng.integers(0, 2, size=t.shape).astype(t.dtype)
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    return out


def _same_bits(program: Program) -> None:
    prepared = PreparedNumerics(program, get_preset(program.preset))
    rng = np.random.default_rng(0)
    for _ in range(2):
        inputs = _random_inputs(program, rng)
        want = simulate(program, inputs, numerics=True, allow_nonfinite=True).outputs
        got = prepared.run(inputs)
        assert set(got) == set(want)
        for name in want:
            assert got[name].dtype == want[name].dtype
            assert np.array_equal(got[name], want[name], equal_nan=True), name


def test_compiled_cnn_programs_run_bit_identical() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(128, 5),
    )  # fmt: skip
    x = torch.randn(2, 3, 8, 8)
    loss = torch.nn.functional.cross_entropy(torch.compile(model, backend="nprof")(x), torch.tensor([1, 3]))
    loss.backward()
    modules = [m for m in CompileCache().modules() if m.manifest.get("instructions", 0) > 0]
    kinds = set()
    for m in modules:
        program = load_program(m.program_path)
        if any(t.kind == "input" for t in program.tensors) and program.name.endswith(("_fw", "_bw")):
            kinds.add(program.name[-2:])
            _same_bits(program)
    assert kinds == {"fw", "bw"}


def _kernel_program() -> Program:
    from nprof.nki import isa as nisa
    from nprof.nki import language as nl

    b = ProgramBuilder("copies")
    x = b.hbm_tensor("x", (64, 48), "float32", "input")
    y = b.hbm_tensor("y", (64, 48), "float32", "input")
    out = b.hbm_tensor("out", (64, 48), "float32", "output")
    low = b.hbm_tensor("low", (64, 48), "bfloat16", "output")
    flat = b.hbm_tensor("flat", (48, 64), "float32", "output")
    sets = [b.hbm_tensor(f"set{k}", (64, 6), dtype, "output")
            for k, dtype in enumerate(("bfloat16", "int32", "float32", "bfloat16", "float16"))]  # fmt: skip

    def kernel() -> None:
        a, c = nl.load(x), nl.load(y)
        s = nisa.tensor_tensor(a, c, "subtract")
        s[:, 8:40] = nisa.tensor_copy(s[:, 0:32])  # overlapping source and destination
        m = nisa.tensor_tensor(s, a, "maximum")
        d = nisa.tensor_tensor(m, c, "divide")  # inf/NaN where c == 0 stay values
        nl.store(out, value=d)
        nl.store(low, value=d)  # a converting DMA (fp32 -> bf16)
        nl.store(flat, value=nisa.nc_transpose(a[:, 0:48]))
        for k, (value, dtype) in enumerate([(0.1, "bfloat16"), (-3.7, "int32"), (float("-inf"), "float32"),
                                            (1e39, "bfloat16"), (float("nan"), "float16")]):  # fmt: skip
            filled = nisa.memset((64, 6), value, getattr(nl, dtype))
            filled[:, 1:3] = nisa.memset((64, 2), 2.5, getattr(nl, dtype))  # a fill into part of a tile
            nl.store(sets[k], value=filled)

    b.call(kernel)
    return b.build()


def test_hand_written_copies_run_bit_identical() -> None:
    _same_bits(_kernel_program())


def test_timing_is_simulated_once_per_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Later executions reuse the first one's (data-independent) timing and profile; outputs follow the data."""
    import nprof.device as device
    from nprof.compiler import STATS

    calls: list[str] = []
    real = device.simulate

    def counting(program: Program, *args: object, **kwargs: object) -> object:
        calls.append(program.name)
        return real(program, *args, **kwargs)

    monkeypatch.setattr(device, "simulate", counting)
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    compiled = torch.compile(model, backend="nprof")
    STATS.reset()
    for step in range(3):
        x = torch.randn(4, 6)
        out = compiled(x)
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
        out.sum().backward()
        assert len(calls) == 2, f"step {step}: {calls}"  # forward and backward, simulated once each
    ns = [n for _, n in STATS.device_ns]
    assert len(ns) == 6 and len(set(ns[0::2])) == 1 and len(set(ns[1::2])) == 1
