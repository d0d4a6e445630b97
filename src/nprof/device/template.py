"""Per-signature facts of the plan: what one distinct instruction costs and shows, computed once.

Contract: `template(name, preset, i, ins, ii, oo) -> Template` checks instruction `i` and gives its timeline
slot, stand-alone duration (`arch.cost`), dependency latencies, bytes per memory, FLOPs and DMA facts: all
that depends only on its opcode, engine, attrs, queue and operand *shapes* (`AccessCache` signatures), so
`device.plan` calls it once per distinct such key (loops over tiles of one shape pay `arch.cost` once).
"""

from __future__ import annotations

from typing import NamedTuple

from nprof.arch import cost
from nprof.arch.isa import COLLECTIVES, Engine, Instruction, Opcode
from nprof.arch.presets import Preset
from nprof.device.mx import moving_fmax
from nprof.device.pe_tiles import tile_mask
from nprof.errors import NprofError

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
    pe_mask: int = 0  # MATMUL in tiling mode: the PE quadrants of its tile (`device.pe_tiles`); 0: the whole array


def where(i: int, ins: Instruction) -> str:
    return f"instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"


def _attr_text(attrs: tuple) -> str:
    items = [f"{k}={v}" for k, v in attrs if k not in _ATTR_SKIP]
    return " ; " + " ".join(items) if items else ""


def template(name: str, preset: Preset, i: int, ins: Instruction, ii: list, oo: list) -> Template:
    """Check instruction `i` of program `name` and compute its shape-dependent columns (NprofError when
    malformed); `ii`/`oo` are the `AccInfo` of its operands."""
    op, eng = ins.opcode, ins.engine
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
            if len(ii) == 4:  # an MX matmul: each item packs 4 values of the contraction (nprof.device.mx)
                flops, hw = 4 * flops, 4 * hw
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
    pe = tile_mask(ins.attr("pe_tile")) if op is Opcode.MATMUL else 0
    return Template(s, dur, lat, 0.0, False, tuple(rw), flops, hw, attr_text, "", op is Opcode.TRANSPOSE, pe_mask=pe)


def _check_matmul(name: str, i: int, ins: Instruction, ii: list, oo: list, preset: Preset) -> None:
    """The TensorE tile limits: K <= pmax, stationary free <= 128, moving free <= 512 (NeuronCore-v4: the whole
    PSUM, `nprof.device.mx.moving_fmax`), result in PSUM."""
    k, m, n = ii[0].partitions, ii[0].free_elements, ii[1].free_elements
    nmax = moving_fmax(preset, ins.outs[0].dtype) if ins.outs else preset.gemm_moving_fmax
    problem = None
    if k > preset.pmax or ii[1].partitions != k:
        problem = f"contraction sizes {k} and {ii[1].partitions} must be equal and <= {preset.pmax}"
    elif m > preset.gemm_stationary_fmax:
        problem = f"stationary free size {m} exceeds {preset.gemm_stationary_fmax}"
    elif n > nmax:
        problem = f"moving free size {n} exceeds {nmax}"
    elif not oo or oo[0].mem != 2:
        problem = "its result must go to PSUM"
    if problem:
        raise NprofError(f"program {name!r}: {where(i, ins)}: {problem}; split the matmul into legal tiles")
