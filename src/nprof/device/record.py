"""Turn a scheduled Plan into Profile tables: one row per instruction and per DMA transfer.

Contract: `build_tables(program, plan, timing, iteration=0) -> (instructions,
dma)` returns column dicts for `Profile.build`. Times are rounded to the nearest
ns (ties to even) independently for start and end, so `duration = round(end) -
round(start)` and back-to-back events abut exactly. Event ids are program
indices (unique across both tables); `deps` are the instruction's dependency
indices. Operand text reads like `psum acc[0:128, 0:512] fp32 <- sbuf
w[0:128, 0:128] bf16, sbuf x[0:128, 0:512] bf16 ; accumulate=True`.

FLOPs: MATMUL model FLOPs are 2*K*M*N (K partitions of the stationary, M its
free size, N the moving free size); hardware FLOPs count the full
`pmax`-row array, 2*pmax*M*N. TRANSPOSE is a matmul against an identity:
0 model FLOPs, 2*pmax*F*P hardware FLOPs, `is_transpose` set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Opcode, Space
from nprof.device.plan import Plan
from nprof.device.schedule import Timing
from nprof.program.model import Program

_SHORT = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3": "fp8e4",
    "float8_e5m2": "fp8e5",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "uint32": "u32",
}
_SPACE_INDEX = {Space.HBM: 0, Space.SBUF: 1, Space.PSUM: 2}
_ATTR_SKIP = frozenset({"spill", "reload"})


def _dims_text(offset: int, dims: list[tuple[int, int]]) -> str:
    """'a:b' per dim; a dim whose stride is not the contiguous one shows it as 'a:b:s'."""
    natural = []
    run = 1
    for _stride, size in reversed(dims):
        natural.append(run)
        run *= size
    natural.reverse()
    parts = []
    rest = offset
    for (stride, size), nat in zip(dims, natural, strict=True):
        start = rest // stride if stride > 0 else 0
        rest -= start * stride
        step = "" if stride == nat else f":{stride}"
        parts.append(f"{start}:{start + size}{step}")
    text = ", ".join(parts)
    return f"{text} +{rest}" if rest else text


def access_text(acc: Access) -> str:
    """Readable text of one Access, e.g. `sbuf x[0:128, 0:512] bf16`."""
    if acc.space is Space.HBM:
        dims = _dims_text(acc.offset, [(acc.partition_stride, acc.partitions), *acc.free])
    else:
        size = ITEMSIZE[acc.dtype]
        free = _dims_text(acc.offset // size, list(acc.free)) if acc.free else ""
        extra = f" +{acc.offset % size}B" if acc.offset % size else ""
        p0 = acc.partition_start
        dims = f"{p0}:{p0 + acc.partitions}" + (f", {free}" if free else "") + extra
    return f"{acc.space.value} {acc.tensor}[{dims}] {_SHORT.get(acc.dtype, acc.dtype)}"


def _attr_text(attrs: tuple) -> str:
    items = [f"{k}={v}" for k, v in attrs if k not in _ATTR_SKIP]
    return " ; " + " ".join(items) if items else ""


def build_tables(
    program: Program, plan: Plan, timing: Timing, iteration: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Column dicts (instructions, dma) of one execution."""
    start = np.rint(np.asarray(timing.start, np.float64)).astype(np.int64)
    end = np.rint(np.asarray(timing.end, np.float64)).astype(np.int64)
    dur = end - start
    wait = np.rint(np.asarray(timing.wait, np.float64)).astype(np.int64)
    pmax = plan.preset.pmax
    is_dma = np.asarray(plan.is_dma, bool) if plan.n else np.zeros(0, bool)
    comp_idx = np.flatnonzero(~is_dma)
    dma_idx = np.flatnonzero(is_dma)

    info: dict[Access, tuple[str, int, int]] = {}

    def acc_info(a: Access) -> tuple[str, int, int]:
        hit = info.get(a)
        if hit is None:
            hit = info[a] = (access_text(a), _SPACE_INDEX[a.space], a.nbytes)
        return hit

    instrs = program.instructions
    nc = len(comp_idx)
    operands: list[str] = [""] * nc
    layer: list[str | None] = [None] * nc
    hlo: list[str | None] = [None] * nc
    src: list[str | None] = [None] * nc
    opcode: list[str] = [""] * nc
    deps: list[list[int]] = [[]] * nc
    rw = np.zeros((nc, 6), np.int64)  # hbm r, sbuf r, psum r, hbm w, sbuf w, psum w
    flops = np.zeros(nc, np.int64)
    hw_flops = np.zeros(nc, np.int64)
    is_tr = np.zeros(nc, bool)
    slot = plan.slot
    track = [""] * nc
    engine = [""] * nc
    tracks, engines = plan.slot_tracks, plan.slot_engines
    for row, i in enumerate(comp_idx.tolist()):
        ins = instrs[i]
        outs_t = []
        for a in ins.outs:
            text, sp, nb = acc_info(a)
            outs_t.append(text)
            rw[row, 3 + sp] += nb
        ins_t = []
        for a in ins.ins:
            text, sp, nb = acc_info(a)
            ins_t.append(text)
            rw[row, sp] += nb
        op = ins.opcode
        opcode[row] = op.value
        operands[row] = ", ".join(outs_t) + " <- " + ", ".join(ins_t) + (_attr_text(ins.attrs) if ins.attrs else "")
        if op is Opcode.MATMUL:
            st, mv = ins.ins[0], ins.ins[1]
            m, n = st.free_elements, mv.free_elements
            flops[row] = 2 * st.partitions * m * n
            hw_flops[row] = 2 * pmax * m * n
            if ins.attr("accumulate", False):
                rw[row, _SPACE_INDEX[ins.outs[0].space]] += ins.outs[0].nbytes
        elif op is Opcode.TRANSPOSE:
            a = ins.ins[0]
            hw_flops[row] = 2 * pmax * a.free_elements * a.partitions
            is_tr[row] = True
        layer[row] = ins.layer
        hlo[row] = ins.hlo_name
        src[row] = ins.source
        deps[row] = list(ins.deps)
        s = slot[i]
        track[row] = tracks[s]
        engine[row] = engines[s]
    instructions = {
        "id": comp_idx.astype(np.int64),
        "ts": start[comp_idx],
        "duration": dur[comp_idx],
        "engine": engine,
        "track": track,
        "opcode": opcode,
        "operands": operands,
        "layer": layer,
        "hlo_name": hlo,
        "nki_source_location": src,
        "flops": flops,
        "hw_flops": hw_flops,
        "is_transpose": is_tr,
        "hbm_read_bytes": rw[:, 0],
        "sbuf_read_bytes": rw[:, 1],
        "psum_read_bytes": rw[:, 2],
        "hbm_write_bytes": rw[:, 3],
        "sbuf_write_bytes": rw[:, 4],
        "psum_write_bytes": rw[:, 5],
        "wait_ns": wait[comp_idx],
        "deps": deps,
        "iteration": np.full(nc, iteration, np.int32),
        "pc": comp_idx.astype(np.int32),
    }
    return instructions, _dma_columns(program, plan, dma_idx, start, dur, iteration)


def _dma_columns(
    program: Program, plan: Plan, dma_idx: np.ndarray, start: np.ndarray, dur: np.ndarray, iteration: int
) -> dict[str, Any]:
    nd = len(dma_idx)
    queue, direction, tensor = [""] * nd, [""] * nd, [""] * nd
    layer: list[str | None] = [None] * nd
    hlo: list[str | None] = [None] * nd
    src_loc: list[str | None] = [None] * nd
    deps: list[list[int]] = [[]] * nd
    nbytes = np.zeros(nd, np.int64)
    parts = np.zeros(nd, np.int32)
    spill = np.zeros(nd, bool)
    reload = np.zeros(nd, bool)
    tracks = plan.slot_tracks
    for row, i in enumerate(dma_idx.tolist()):
        ins = program.instructions[i]
        s, d = ins.ins[0], ins.outs[0]
        queue[row] = tracks[plan.slot[i]]
        direction[row] = f"{s.space.value}->{d.space.value}"
        nbytes[row] = d.nbytes
        parts[row] = d.partitions if d.space is not Space.HBM else s.partitions
        tensor[row] = s.tensor if s.space is Space.HBM or d.space is not Space.HBM else d.tensor
        spill[row] = bool(ins.attr("spill", False))
        reload[row] = bool(ins.attr("reload", False))
        layer[row], hlo[row], src_loc[row] = ins.layer, ins.hlo_name, ins.source
        deps[row] = list(ins.deps)
    return {
        "id": dma_idx.astype(np.int64),
        "ts": start[dma_idx],
        "duration": dur[dma_idx],
        "queue": queue,
        "direction": direction,
        "bytes": nbytes,
        "partitions": parts,
        "tensor": tensor,
        "is_spill": spill,
        "is_reload": reload,
        "layer": layer,
        "hlo_name": hlo,
        "nki_source_location": src_loc,
        "deps": deps,
        "iteration": np.full(nd, iteration, np.int32),
        "pc": dma_idx.astype(np.int32),
    }
