"""Per-signature facts of the plan: what one distinct instruction costs and shows, computed once.

Contract: `signature_rows(program, preset, reps) -> list[SigRow]` gives, for each
representative instruction index in `reps` (the first instruction of each distinct signature, in program
order), its timeline slot, stand-alone duration, dependency latencies, bytes per memory, FLOPs, DMA facts and
operand text. The checks run in `reps` order, so the first malformed instruction of the program raises
`NprofError` naming it. Shape-dependent costs are memoised per operand-shape key (`AccessCache` signatures),
so loops over tiles of one shape pay `arch.cost` once.
"""

from __future__ import annotations

from operator import itemgetter
from typing import NamedTuple

from nprof.arch import cost
from nprof.arch.isa import COLLECTIVES, Engine, Instruction, Opcode
from nprof.arch.presets import Preset
from nprof.device.accinfo import VALUE_KEY, AccessCache, AccInfo
from nprof.errors import NprofError
from nprof.program.model import Program

SLOT_LD, SLOT_MM, SLOT_VECTOR, SLOT_SCALAR, SLOT_GPSIMD, SLOT_SYNC = range(6)
FIRST_DMA_SLOT = 6
_ENGINE_SLOT = {
    Engine.VECTOR: SLOT_VECTOR,
    Engine.SCALAR: SLOT_SCALAR,
    Engine.GPSIMD: SLOT_GPSIMD,
    Engine.SYNC: SLOT_SYNC,
}
_TENSOR_OPS = frozenset({Opcode.LDWEIGHTS, Opcode.MATMUL, Opcode.TRANSPOSE})
_ATTR_SKIP = frozenset({"spill", "reload"})


class Template(NamedTuple):
    """Everything about an instruction that depends only on its opcode, engine, attrs, queue and shapes."""

    slot: int
    dur: float
    lat: float
    lat0: float
    is_dma: bool
    rw: tuple[int, ...]  # six: HBM/SBUF/PSUM bytes read, then written
    flops: int
    hw_flops: int
    attr_text: str
    direction: str  # DMA: "hbm->sbuf" ...
    is_transpose: bool = False
    opcode: str = ""
    dma_rate: float = 0.0  # DMA: bytes/ns alone, counting chunk overhead as bytes


class SigRow(NamedTuple):
    """One distinct instruction: its template plus the value-dependent columns."""

    t: Template
    operands: str  # "" for DMAs
    partitions: int  # DMA: partitions of the SBUF side (or of the source)
    tensor: str | None  # DMA: the HBM tensor moved
    spill: bool
    reload: bool


def where(i: int, ins: Instruction) -> str:
    return f"instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"


def _attr_text(attrs: tuple) -> str:
    items = [f"{k}={v}" for k, v in attrs if k not in _ATTR_SKIP]
    return " ; " + " ".join(items) if items else ""


def template(program: Program, preset: Preset, i: int, ins: Instruction, ii: list, oo: list) -> Template:
    """Check one instruction and compute its shape-dependent columns (NprofError when malformed)."""
    op, eng, name = ins.opcode, ins.engine, program.name
    rw = [0] * 6
    for x in ii:
        rw[x.mem] += x.nbytes
    for x in oo:
        rw[3 + x.mem] += x.nbytes
    if op is Opcode.DMA_DIRECT2D:
        if eng is not Engine.DMA:
            raise NprofError(f"program {name!r}: {where(i, ins)} must run on a DMA queue, not {eng}")
        if not 0 <= ins.queue < preset.dma_queues:
            raise NprofError(
                f"program {name!r}: {where(i, ins)} uses DMA queue {ins.queue}; "
                f"valid queues are 0..{preset.dma_queues - 1}"
            )
        if len(ii) != (2 if ins.attr("indirect") else 1) or len(oo) != 1:  # indirect: + the offsets
            raise NprofError(f"program {name!r}: {where(i, ins)} needs one input and one output")
        src, dst = ins.ins[0], ins.outs[0]
        chunks = cost.dma_chunks(src, dst, bool(ins.attr("transpose")))
        transfer = cost.dma_transfer_ns(oo[0].nbytes, chunks, preset, partitions=cost.dma_partitions(src, dst))
        direction = f"{src.space.value}->{dst.space.value}"
        lat = preset.dma_latency_ns
        rate = (oo[0].nbytes + chunks * preset.dma_chunk_overhead_bytes) / transfer if transfer > 0 else 0.0
        return Template(
            FIRST_DMA_SLOT + ins.queue, transfer, lat, lat, True, tuple(rw), 0, 0, "", direction, dma_rate=rate
        )
    attr_text = _attr_text(ins.attrs) if ins.attrs else ""
    if eng is Engine.CC or op in COLLECTIVES:
        first_cc = FIRST_DMA_SLOT + preset.dma_queues
        s = first_cc + (ins.queue if ins.queue >= 0 else 0) % preset.cc_cores
        lat = preset.dma_latency_ns
        dur = cost.instruction_ns(ins, preset) - lat
        return Template(s, dur, lat, lat, False, tuple(rw), 0, 0, attr_text, "")
    flops = hw = 0
    if op in _TENSOR_OPS:
        if eng is not Engine.TENSOR:
            raise NprofError(f"program {name!r}: {where(i, ins)} must run on TensorE, not {eng}")
        s = SLOT_LD if op is Opcode.LDWEIGHTS else SLOT_MM
        if op is Opcode.MATMUL and len(ii) >= 2:
            m, n = ii[0].free_elements, ii[1].free_elements
            _check_matmul(name, i, ins, ii, oo, preset)
            flops, hw = 2 * ii[0].partitions * m * n, 2 * preset.pmax * m * n
            if oo and ins.attr("accumulate", False):
                rw[oo[0].mem] += oo[0].nbytes
        elif op is Opcode.TRANSPOSE and ii:
            hw = 2 * preset.pmax * ii[0].free_elements * ii[0].partitions
    else:
        found = _ENGINE_SLOT.get(eng)
        if found is None:
            raise NprofError(f"program {name!r}: {where(i, ins)} cannot run on engine {eng}")
        s = found
    try:
        cycles = cost.instruction_cycles(ins, preset)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise NprofError(f"program {name!r}: {where(i, ins)} is malformed ({exc})") from exc
    dur = cycles * 1e9 / preset.clock_hz(eng.value)
    lat = cost.dependency_latency_ns(eng, preset)
    return Template(s, dur, lat, 0.0, False, tuple(rw), flops, hw, attr_text, "", op is Opcode.TRANSPOSE)


def _check_matmul(name: str, i: int, ins: Instruction, ii: list, oo: list, preset: Preset) -> None:
    """The TensorE tile limits: K <= pmax, stationary free <= 128, moving free <= 512, result in PSUM."""
    k, m, n = ii[0].partitions, ii[0].free_elements, ii[1].free_elements
    problem = None
    if k > preset.pmax or ii[1].partitions != k:
        problem = f"contraction sizes {k} and {ii[1].partitions} must be equal and <= {preset.pmax}"
    elif m > preset.gemm_stationary_fmax:
        problem = f"stationary free size {m} exceeds {preset.gemm_stationary_fmax}"
    elif n > preset.gemm_moving_fmax:
        problem = f"moving free size {n} exceeds {preset.gemm_moving_fmax}"
    elif not oo or oo[0].mem != 2:
        problem = "its result must go to PSUM"
    if problem:
        raise NprofError(f"program {name!r}: {where(i, ins)}: {problem}; split the matmul into legal tiles")


def signature_rows(program: Program, preset: Preset, reps: list[int]) -> list[SigRow]:
    """One `SigRow` per representative instruction index (see module doc)."""
    instrs = program.instructions
    cache = AccessCache()
    get, hit = cache.get, cache.by_value.get
    memo: dict[tuple, Template] = {}
    sig, text = itemgetter(0), itemgetter(3)
    rows: list[SigRow] = []
    for i in reps:
        ins = instrs[i]
        a_in, a_out = ins.ins, ins.outs
        # the cache's fast path inline (an AccInfo is a non-empty tuple: true); `get` fills misses
        ii: list[AccInfo] = [hit(VALUE_KEY(a)) or get(a) for a in a_in]
        oo: list[AccInfo] = [hit(VALUE_KEY(a)) or get(a) for a in a_out]
        # enum members are singletons: their ids are as good a key as they are
        key = (id(ins.opcode), id(ins.engine), ins.attrs, ins.queue, *map(sig, ii), -1, *map(sig, oo))
        t = memo.get(key)
        if t is None:
            t = memo[key] = template(program, preset, i, ins, ii, oo)._replace(opcode=ins.opcode.value)
        if t.is_dma:
            d_hbm = oo[0].mem == 0
            tensor = a_in[0].tensor if ii[0].mem == 0 or not d_hbm else a_out[0].tensor
            spill, reload = bool(ins.attr("spill", False)), bool(ins.attr("reload", False))
            rows.append(SigRow(t, "", ii[0].partitions if d_hbm else oo[0].partitions, tensor, spill, reload))
        else:
            operands = ", ".join(map(text, oo)) + " <- " + ", ".join(map(text, ii)) + t.attr_text
            rows.append(SigRow(t, operands, 0, None, False, False))
    return rows
