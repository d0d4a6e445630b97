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


def _deps_array(plan: Plan) -> pa.LargeListArray:
    return pa.LargeListArray.from_arrays(pa.array(plan.deps_offsets), pa.array(plan.deps_flat))


def _select(full: pa.LargeListArray, idx: np.ndarray) -> pa.Array:
    return full.take(pa.array(idx)).cast(pa.list_(pa.int64()))


def _names(names: pa.Array, codes: np.ndarray) -> pa.Array:
    """String column from small-int codes into `names`, without a per-row Python loop."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), names).cast(pa.string())


def _take(values: list[Any], idx: list[int]) -> list[Any]:
    return [values[i] for i in idx]


def build_tables(
    program: Program, plan: Plan, timing: Timing, iteration: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Column dicts (instructions, dma) of one execution."""
    start = np.rint(np.asarray(timing.start, np.float64)).astype(np.int64)
    end = np.rint(np.asarray(timing.end, np.float64)).astype(np.int64)
    dur = end - start
    wait = np.rint(np.asarray(timing.wait, np.float64)).astype(np.int64)
    is_dma = plan.is_dma
    ci = np.flatnonzero(~is_dma)
    di = np.flatnonzero(is_dma)
    ci_l, di_l = ci.tolist(), di.tolist()
    instrs = program.instructions
    sources = [x.source for x in instrs]
    layers = [x.layer for x in instrs]
    hlos = [x.hlo_name for x in instrs]
    slots = np.asarray(plan.slot, np.int32) if plan.n else np.zeros(0, np.int32)
    tracks = pa.array(list(plan.slot_tracks), pa.string())
    engines = pa.array(list(plan.slot_engines), pa.string())
    rw = plan.rw[ci]
    flops, hw = plan.flops, plan.hw_flops
    is_tr = np.zeros(plan.n, bool)
    is_tr[list(plan.transposes)] = True
    opcodes = plan.opcodes
    deps = _deps_array(plan)
    instructions = {
        "id": ci.astype(np.int64),
        "ts": start[ci],
        "duration": dur[ci],
        "engine": _names(engines, slots[ci]),
        "track": _names(tracks, slots[ci]),
        "opcode": _take(opcodes, ci_l),
        "operands": _take(plan.operands, ci_l),
        "layer": _take(layers, ci_l),
        "hlo_name": _take(hlos, ci_l),
        "nki_source_location": _take(sources, ci_l),
        "flops": flops[ci],
        "hw_flops": hw[ci],
        "is_transpose": is_tr[ci],
        "hbm_read_bytes": rw[:, 0],
        "sbuf_read_bytes": rw[:, 1],
        "psum_read_bytes": rw[:, 2],
        "hbm_write_bytes": rw[:, 3],
        "sbuf_write_bytes": rw[:, 4],
        "psum_write_bytes": rw[:, 5],
        "wait_ns": wait[ci],
        "deps": _select(deps, ci),
        "iteration": np.full(len(ci), iteration, np.int32),
        "pc": ci.astype(np.int32),
    }
    rows = [plan.dma_rows[i] for i in di_l]
    nbytes = plan.rw[di, 3:].sum(axis=1)
    dma = {
        "id": di.astype(np.int64),
        "ts": start[di],
        "duration": dur[di],
        "queue": _names(tracks, slots[di]),
        "direction": [r[0] for r in rows],
        "bytes": nbytes,
        "partitions": np.asarray([r[1] for r in rows], np.int32),
        "tensor": [r[2] for r in rows],
        "is_spill": np.asarray([bool(instrs[i].attr("spill", False)) for i in di_l], bool),
        "is_reload": np.asarray([bool(instrs[i].attr("reload", False)) for i in di_l], bool),
        "layer": _take(layers, di_l),
        "hlo_name": _take(hlos, di_l),
        "nki_source_location": _take(sources, di_l),
        "deps": _select(deps, di),
        "iteration": np.full(len(di), iteration, np.int32),
        "pc": di.astype(np.int32),
    }
    return instructions, dma
