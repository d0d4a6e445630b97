"""Turn a scheduled Plan into Profile tables: one row per instruction and per DMA transfer.

Contract: `build_tables(program, plan, timing, iteration=0) -> (instructions,
dma)` returns column dicts for `Profile.build`. Times are rounded to the nearest
ns (ties to even) independently for start and end, so `duration = round(end) -
round(start)` and back-to-back events abut exactly. Event ids are program
indices (unique across both tables); `deps` are the instruction's dependency
indices. Operand text (built by `device.plan`, formatted by `device.accinfo`)
reads like `psum acc[0:128, 0:512] fp32 <- sbuf w[0:128, 0:128] bf16, sbuf
x[0:128, 0:512] bf16 ; accumulate=True`.

FLOPs: MATMUL model FLOPs are 2*K*M*N (K partitions of the stationary, M its
free size, N the moving free size); hardware FLOPs count the full
`pmax`-row array, 2*pmax*M*N. TRANSPOSE is a matmul against an identity:
0 model FLOPs, 2*pmax*F*P hardware FLOPs, `is_transpose` set.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from nprof.device.plan import Plan
from nprof.device.schedule import Timing
from nprof.program.model import Program


def _deps_column(plan: Plan, mask: np.ndarray) -> pa.ListArray:
    """list<int64> of the dependency lists of the instructions selected by `mask`."""
    offsets = plan.deps_offsets
    lengths = np.diff(offsets)[mask]
    sel = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=sel[1:])
    values = plan.deps_flat[np.repeat(mask, np.diff(offsets))]
    return pa.ListArray.from_arrays(pa.array(sel.astype(np.int32)), pa.array(values, pa.int64()))


def _names(names: pa.Array, codes: np.ndarray) -> pa.Array:
    """String column from small-int codes into `names`, without a per-row Python loop."""
    return names.take(pa.array(codes))


def build_tables(
    program: Program, plan: Plan, timing: Timing, iteration: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Column dicts (instructions, dma) of one execution."""
    start = np.rint(np.asarray(timing.start, np.float64)).astype(np.int64)
    end = np.rint(np.asarray(timing.end, np.float64)).astype(np.int64)
    dur = end - start
    wait = np.rint(np.asarray(timing.wait, np.float64)).astype(np.int64)
    is_dma = plan.is_dma
    is_ci = ~is_dma
    ci = np.flatnonzero(is_ci)
    di = np.flatnonzero(is_dma)
    sources, layers, hlos = plan.source, plan.layer, plan.hlo_name
    ci_mask, di_mask = pa.array(is_ci), pa.array(is_dma)
    slots = np.asarray(plan.slot, np.int32) if plan.n else np.zeros(0, np.int32)
    tracks = pa.array(list(plan.slot_tracks), pa.string())
    engines = pa.array(list(plan.slot_engines), pa.string())
    rw = plan.rw[ci]
    is_tr = plan.is_tr
    code = plan.code
    c_code, d_code = code[ci], code[di]
    instructions = {
        "id": ci.astype(np.int64),
        "ts": start[ci],
        "duration": dur[ci],
        "engine": _names(engines, slots[ci]),
        "track": _names(tracks, slots[ci]),
        "opcode": _names(pa.array(plan.sig_opcode, pa.string()), c_code),
        "operands": _names(plan.sig_operands, c_code),
        "layer": layers.filter(ci_mask),
        "hlo_name": hlos.filter(ci_mask),
        "nki_source_location": sources.filter(ci_mask),
        "flops": plan.flops[ci],
        "hw_flops": plan.hw_flops[ci],
        "is_transpose": is_tr[ci],
        "hbm_read_bytes": rw[:, 0],
        "sbuf_read_bytes": rw[:, 1],
        "psum_read_bytes": rw[:, 2],
        "hbm_write_bytes": rw[:, 3],
        "sbuf_write_bytes": rw[:, 4],
        "psum_write_bytes": rw[:, 5],
        "wait_ns": wait[ci],
        "deps": _deps_column(plan, is_ci),
        "iteration": np.full(len(ci), iteration, np.int32),
        "pc": ci.astype(np.int32),
    }
    nbytes = plan.rw[di, 3:].sum(axis=1)
    dma = {
        "id": di.astype(np.int64),
        "ts": start[di],
        "duration": dur[di],
        "queue": _names(tracks, slots[di]),
        "direction": _names(pa.array(plan.sig_direction, pa.string()), d_code),
        "bytes": nbytes,
        "partitions": plan.sig_partitions[d_code].astype(np.int32),
        "tensor": _names(pa.array(plan.sig_tensor, pa.string()), d_code),
        "is_spill": plan.sig_spill[d_code],
        "is_reload": plan.sig_reload[d_code],
        "layer": layers.filter(di_mask),
        "hlo_name": hlos.filter(di_mask),
        "nki_source_location": sources.filter(di_mask),
        "deps": _deps_column(plan, is_dma),
        "iteration": np.full(len(di), iteration, np.int32),
        "pc": di.astype(np.int32),
    }
    return instructions, dma
