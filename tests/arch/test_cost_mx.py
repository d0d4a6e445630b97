"""Cost of the MX instructions on trn3: an MX matmul takes the cycles of a BF16 matmul of the same columns (each
PE multiplies the 4 values of an item per cycle) and counts 4x the FLOPs; QuantizeMX takes a quarter of an
elementwise pass (four input elements per partition per cycle, NKI Trainium3 guide)."""

from __future__ import annotations

from nprof.arch import cost
from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.arch.presets import get_preset


def _sbuf(dtype: str, parts: int, free: int, name: str = "t") -> Access:
    return Access(Space.SBUF, name, dtype, 0, parts, ((1, free),))


def test_mx_matmul_runs_at_the_bf16_column_rate() -> None:
    p = get_preset("trn3")
    out = Access(Space.PSUM, "o", "float32", 0, 128, ((1, 512),))
    ins = (_sbuf("mxfp8_e4m3_x4", 128, 128), _sbuf("mxfp8_e4m3_x4", 128, 512, "m"), _sbuf("uint8", 128, 128, "s"),
           _sbuf("uint8", 128, 512, "r"))  # fmt: skip
    mx = Instruction(Engine.TENSOR, Opcode.MATMUL, (out,), ins, attrs(accumulate=False))
    bf16 = Instruction(Engine.TENSOR, Opcode.MATMUL, (out,),
                       (_sbuf("bfloat16", 128, 128), _sbuf("bfloat16", 128, 512, "m")))  # fmt: skip
    assert cost.instruction_cycles(mx, p) == cost.instruction_cycles(bf16, p) == 512
    assert p.peak("mxfp8_e4m3_x4") == 4 * p.peak("bfloat16")


def test_quantize_mx_is_a_quarter_pass() -> None:
    p = get_preset("trn3")
    q = Instruction(Engine.VECTOR, Opcode.QUANTIZE_MX, (_sbuf("mxfp8_e4m3_x4", 128, 512), _sbuf("uint8", 128, 512)),
                    (_sbuf("bfloat16", 128, 2048, "x"),))  # fmt: skip
    assert cost.instruction_cycles(q, p) == 512 == cost.elementwise_cycles(2048, p) / 4


def test_mx_matmul_flops_count_all_four_values() -> None:
    import numpy as np

    import nprof.nki.isa as nisa
    import nprof.nki.language as nl
    from nprof import nki
    from nprof.device.simulate import simulate

    def kernel(a, s):
        d = nl.ndarray((32, 16), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=d, src=a.view(nl.float8_e4m3fn_x4))
        sc = nl.ndarray((4, 16), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=sc, src=s)
        ps = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(ps, d, d, sc, sc)
        r = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=r, src=ps)
        out = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out

    traced = nki.jit(kernel, platform_target="trn3").trace(np.zeros((32, 16), np.uint32), np.zeros((4, 16), np.uint8))
    flops = simulate(traced.program, numerics=False).profile.instructions.column("flops").to_pylist()
    assert sum(f or 0 for f in flops) == 2 * (32 * 4) * 16 * 16  # K = 32 partitions x 4 values, M = N = 16
