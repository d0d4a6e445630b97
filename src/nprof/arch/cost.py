"""The cost model of the virtual NeuronCore: how long each instruction and DMA takes.

Contract: small pure functions of an `Instruction` (or plain numbers) and a
`Preset`; no state, no I/O. Cycle counts follow the instruction cost table of
docs/hardware.md (from the public NKI performance guide); N is the number of
elements per partition of the operand named in each formula. Durations in ns are
`cycles * 1e9 / clock` of the executing engine, as floats (the simulator rounds
only when it writes a profile).

Choices where the table is silent (documented here, tested by hand):
* MIN_II is the floor of every compute instruction, including reductions.
* LDWEIGHTS takes ceil(K / 4) cycles (fast load: 128 rows / 4 = 32), FP32 x4.
* MATMUL with an FP32 operand takes 4x (`fp32_matmul_slowdown`); FP8 x FP8 is
  divided by `fp8_matmul_speedup` (2 on trn2, 1 on trn1).
* The SBUF/PSUM static access overhead (~60 cycles) is a *latency*, not
  occupancy: it is paid between a producer's end and a dependent instruction's
  start (`dependency_latency_ns`), and hidden for independent back-to-back work.
* The table's "~100 cycles extra when N << 128 or back-to-back dependent" is
  covered by those two rules: the MIN_II floor for small N and the 60-cycle
  dependency latency; no third surcharge is added.
* GpSimdE and ScalarE run the VectorE formulas at their own clocks.
* A DMA costs `dma_latency_ns` from its semaphore (deps done) to transfer start,
  then `(bytes + chunks * dma_chunk_overhead_bytes) / bandwidth`, where a chunk
  is one contiguous run of the transfer (at most one partition row): transfers
  of < 256 B per partition are overhead-bound, >= 2 KiB ones ~90% efficient.
  Engines per transfer (NKI DMA overview, "Performance Considerations": "each
  DMA engine is typically responsible for moving data for eight SBUF partitions
  (128 partitions / 16 DMA engines)"; its Example 1 moves A[4, 4096] on one
  engine): `ceil(partitions / 8)` engines, at most 16, so alone a transfer runs
  at that many engines' bandwidth, capped by the pool all transfers share:
  `min(16 engines, HBM share)`.
* DMA queues (NKI DMA overview, "DMA Queues": "DMA transfers within a queue ...
  are executed in order"; "Another key consideration ... is overhead to initiate
  a DMA transfer"): a queue's descriptor stage holds one DMA at a time for the
  fixed latency, so transfer starts on one queue are at least `dma_latency_ns`
  apart; the transfers themselves overlap and share the pool. The DMA
  throughput curve of that page (throughput proportional to bytes per
  partition up to ~2 KiB, flat from 4 KiB at p=128) is this rule: one
  transfer per ~1.2 us per queue until the bytes saturate the bandwidth.
  Queue assignment (same page: "The queue ID is typically tied to the trigger
  engine and the method of descriptor generation"): a DMA statement of a
  kernel is one static instruction with its descriptors, so every execution of
  it (every loop iteration) uses the same queue; distinct statements take the
  queues round-robin (`nprof.nki.trace`).
* Indirect DMAs (attrs `indirect`, a gather/scatter of rows by runtime
  indices): NKI DGE reference ("swdge ... the only mode that supports
  indirect (gather/scatter) operations"; descriptors generated at run time):
  each row is its own descriptor, so a row is at most one chunk (the
  pattern's partition stride is 0, so runs never merge across rows). The
  GpSimdE time spent generating the descriptors is not modelled (no
  published figure). A dynamic on-chip copy (`dynamic`) costs
  `dynamic_copy_cycles` (NKI API reference, tensor_copy_dynamic_src/dst:
  "MIN_II_DYNAMIC is roughly 600 engine cycles"). GATHER (nl.gather_flattened,
  run on GpSimdE like nisa.nc_n_gather) has no published cost: it is charged
  like iota, 150 + N cycles.
* Free bookkeeping instructions (attrs `inline` or `register`) take no engine time. `inline`: the per-column
  copies that carry tensor indirection (`.indirect`, NeuronCore-v4; `nprof.nki.indirection`): the NKI
  Trainium3 architecture guide ("SBUF/PSUM indirect access": "all compute engines can perform a gather access
  pattern to directly access those three vectors in a single instruction") puts the addressing inside the
  instruction, which is costed on the gathered operand's shape. `register`: virtual-register operations on
  immediates and registers only (`nisa.register_alloc(x)`, `register_move`; AWS API reference: "operates on
  virtual registers only and does not access SBUF, PSUM, or HBM", an engine-sequencer operation). A dependent
  instruction still pays the usual dependency latency after them.
* DMA transposes (attrs `transpose`, `nisa.dma_transpose` of an SBUF tile):
  stated assumption, AWS publishes no figure: every element is its own chunk,
  as for `nl.load_transpose2d`'s transposing HBM pattern (whose element
  stride makes every run one element long). AWS's NKI performance guide
  (Opt #10, "Minimize use of DMA transposes") says only that DMA transposes
  "can degrade DMA bandwidth significantly"; one chunk per element is that.
* DMA triggers (FITTED `dma_issue_gap_ns`): DMAs are triggered by instructions
  in an engine's in-order stream, so consecutive DMAs of the program (any
  queue) start at least `dma_issue_gap_ns` apart. Calibration set: the NKI
  matmul tutorial's tiled kernel (bench/fidelity.py, fit set).
"""

from __future__ import annotations

import math

from nprof.arch.isa import COLLECTIVES, ITEMSIZE, Access, Engine, Instruction, Opcode, Space
from nprof.arch.presets import Preset

_FAST_TT_OPS = frozenset({"add", "multiply", "subtract"})

# Version of the timing rules (this module + device.schedule + device.pe_tiles); a profile's manifest records it
# (`model_meta`). 3: TensorE tiling mode (matmuls on disjoint PE tiles overlap).
MODEL_VERSION = "3"


def model_meta(preset: Preset) -> dict[str, str]:
    """What a profile records about the model that produced it: cost-model version and the fitted constants."""
    fitted = ";".join(f"{k}={v:g}" for k, v in sorted(preset.fitted().items()))
    assumed = ";".join(f"{k}={v:g}" for k, v in sorted(preset.assumed().items()))
    meta = {"cost_model": MODEL_VERSION, "cost_model_fitted": fitted or "none", "cost_model_assumed": assumed or "none"}
    if preset.assumptions:  # a preset with unpublished figures (trn3) says which, in every profile
        meta["preset_assumptions"] = preset.assumptions
    return meta


def matmul_cycles(stationary_free: int, moving_free: int, dtype: str, preset: Preset, moving_dtype: str = "") -> float:
    """TensorE MATMUL back-to-back: max(min(64, N_stationary), N_moving); FP32 x4, FP8 / speedup."""
    cycles = float(max(min(64, stationary_free), moving_free))
    dtypes = (dtype, moving_dtype or dtype)
    if "float32" in dtypes:
        return cycles * preset.fp32_matmul_slowdown
    if all(d.startswith("float8") for d in dtypes):
        return math.ceil(cycles / preset.fp8_matmul_speedup)
    return cycles


def ldweights_cycles(rows: int, dtype: str, preset: Preset) -> float:
    """LoadStationary with fast weight load: ceil(rows / 4) (~32 for 128 rows); FP32 x4."""
    cycles = float(math.ceil(rows / preset.ldweights_rows_per_cycle))
    return cycles * (preset.fp32_matmul_slowdown if dtype == "float32" else 1)


def transpose_cycles(partitions: int, free: int) -> float:
    """TensorE transpose: max(P, min(64, F))."""
    return float(max(partitions, min(64, free)))


def activation_cycles(n: int, preset: Preset, reduce: bool = False) -> float:
    """ScalarE activation: max(MIN_II, N), plus MIN_II when it also reduces."""
    return float(max(preset.min_ii, n) + (preset.min_ii if reduce else 0))


def elementwise_cycles(n: int, preset: Preset) -> float:
    """tensor_scalar, tensor_copy, memset, select, bn_stats: max(MIN_II, N)."""
    return float(max(preset.min_ii, n))


def tensor_tensor_cycles(n: int, fast: bool, preset: Preset) -> float:
    """tensor_tensor: max(MIN_II, N) on the fast path, else max(MIN_II, 2N)."""
    return float(max(preset.min_ii, n if fast else 2 * n))


def tensor_reduce_cycles(n: int, dtype: str, op: str, preset: Preset) -> float:
    """tensor_reduce: N/2 for bf16 add/max, else N (floored at MIN_II)."""
    work = math.ceil(n / 2) if dtype == "bfloat16" and op in ("add", "max") else n
    return float(max(preset.min_ii, work))


def reciprocal_cycles(n: int, preset: Preset) -> float:
    """reciprocal: max(MIN_II, 8N)."""
    return float(max(preset.min_ii, 8 * n))


def bn_aggr_cycles(n: int, preset: Preset) -> float:
    """bn_aggr over N input elements (N/3 triples): max(MIN_II, 13 * N / 3)."""
    return float(max(preset.min_ii, math.ceil(13 * n / 3)))


def gpsimd_index_cycles(n: int) -> float:
    """iota / affine_select on GpSimdE: 150 + N."""
    return float(150 + n)


def dynamic_copy_cycles(n: int) -> float:
    """A copy with a runtime-computed address: max(~600, N)."""
    return float(max(600, n))


def local_gather_cycles(indices: int, elems: int, itemsize: int) -> float:
    """nisa.local_gather on GpSimdE, AWS's estimate (NKI API reference, nki.isa.local_gather): 150 + n / C with
    n = indices * elems and C = ((28 + t * elems) / (t * elems)) / min(4 / itemsize, elems), t = 4."""
    t = 4
    c = ((28 + t * elems) / (t * elems)) / min(4 / itemsize, elems)
    return 150.0 + indices * elems / c


def contiguous_run(acc: Access) -> int:
    """Elements of the longest contiguous run an Access starts with (the DMA chunk length).

    SBUF/PSUM runs never cross a partition; an HBM run may span the partition dim.
    """
    dims = list(acc.free)
    if acc.space is Space.HBM:
        dims = [(acc.partition_stride, acc.partitions), *dims]
    run = 1
    for stride, size in reversed(dims):
        if size == 1:
            continue
        if stride != run:
            break
        run *= size
    return run


def is_contiguous(acc: Access) -> bool:
    """True when each partition's elements are one contiguous run."""
    return contiguous_run(acc) >= acc.free_elements


def dma_chunks(src: Access, dst: Access, transpose: bool = False) -> int:
    """Number of contiguous chunks a DMA from `src` to `dst` moves (`transpose`: a DMA transpose, one element
    per chunk, the same as a transposing HBM access pattern)."""
    elements = max(src.elements, 1)
    if transpose:
        return elements
    run = max(1, min(contiguous_run(src), contiguous_run(dst), elements))
    return math.ceil(elements / run)


def dma_engines(partitions: int, preset: Preset) -> int:
    """DMA engines one transfer spreads over: one per 8 partitions (pmax / engines), at most all of them."""
    per_engine = max(1, preset.pmax // preset.dma_queues)
    return max(1, min(preset.dma_queues, math.ceil(partitions / per_engine)))


def dma_partitions(src: Access, dst: Access) -> int:
    """Partitions a DMA spreads over: those of its on-chip side (the source's for HBM to HBM)."""
    return dst.partitions if dst.space is not Space.HBM else src.partitions


def dma_pool_bandwidth(preset: Preset) -> float:
    """bytes/s every transfer of a core shares: all its DMA engines together, capped by its HBM share."""
    return min(preset.dma_queues * preset.dma_queue_bandwidth, preset.hbm_bandwidth)


def dma_transfer_ns(
    nbytes: int, chunks: int, preset: Preset, bandwidth: float | None = None, partitions: int | None = None
) -> float:
    """Transfer time (after the fixed latency): (bytes + chunks * chunk overhead) / bandwidth.

    The default bandwidth is the transfer's alone: `dma_engines(partitions)` engines (partitions defaults
    to min(chunks, pmax)), at most the pool.
    """
    if bandwidth is None:
        parts = min(chunks, preset.pmax) if partitions is None else partitions
        bandwidth = min(dma_engines(parts, preset) * preset.dma_queue_bandwidth, dma_pool_bandwidth(preset))
    return (nbytes + chunks * preset.dma_chunk_overhead_bytes) * 1e9 / bandwidth


def dependency_latency_ns(engine: Engine, preset: Preset) -> float:
    """Time between a producer's end and a dependent instruction's start on `engine`."""
    if engine is Engine.DMA:
        return preset.dma_latency_ns
    if engine is Engine.CC:
        return preset.dma_latency_ns
    return preset.static_access_cycles * 1e9 / preset.clock_hz(engine.value)


def _n(acc: Access | None) -> int:
    return acc.free_elements if acc is not None else 1


def instruction_cycles(ins: Instruction, preset: Preset) -> float:
    """Engine cycles of a compute instruction (not DMA_DIRECT2D or collectives)."""
    op = ins.opcode
    a = ins.ins[0] if ins.ins else None
    o = ins.outs[0] if ins.outs else None
    if op is Opcode.MATMUL:
        st, mv = ins.ins[0], ins.ins[1]
        return matmul_cycles(st.free_elements, mv.free_elements, st.dtype, preset, mv.dtype)
    if op is Opcode.LDWEIGHTS:
        return ldweights_cycles(a.partitions if a else preset.pmax, a.dtype if a else "bfloat16", preset)
    if op is Opcode.TRANSPOSE:
        return transpose_cycles(a.partitions if a else 1, _n(a))
    if ins.attr("inline") or ins.attr("register"):  # bookkeeping of the model, no engine time (module doc)
        return 0.0
    n = max((x.free_elements for x in (*ins.ins, *ins.outs)), default=1)
    if op is Opcode.ACTIVATE:
        return activation_cycles(_n(a), preset, reduce=ins.attr("reduce_op") is not None and len(ins.outs) > 1)
    if op is Opcode.TENSOR_TENSOR:
        return tensor_tensor_cycles(n, _tensor_tensor_fast(ins), preset)
    if op is Opcode.TENSOR_REDUCE:
        return tensor_reduce_cycles(_n(a), a.dtype if a else "float32", str(ins.attr("op", "add")), preset)
    if op is Opcode.RECIPROCAL:
        return reciprocal_cycles(n, preset)
    if op is Opcode.BN_AGGR:
        return bn_aggr_cycles(_n(a), preset)
    if op in (Opcode.IOTA, Opcode.AFFINE_SELECT, Opcode.GATHER, Opcode.SEQUENCE_BOUNDS):  # GATHER, SEQUENCE_BOUNDS:
        # stated choice (like iota: 150 + N on GpSimdE), no published figure
        return gpsimd_index_cycles(_n(o))
    if op is Opcode.LOCAL_GATHER:
        return local_gather_cycles(int(ins.attr("valid", 1)), int(ins.attr("elems", 1)), ITEMSIZE[a.dtype] if a else 4)
    if op is Opcode.TENSOR_COPY and ins.attr("dynamic"):
        return dynamic_copy_cycles(n)
    if op is Opcode.MEMSET and o is not None and o.dtype == "bfloat16" and float(ins.attr("value", 0.0)) == 0.0:
        return float(max(preset.min_ii, math.ceil(_n(o) / 2)))
    if op is Opcode.EVENT_SEMAPHORE:
        return float(preset.min_ii)
    if op is Opcode.QUANTIZE_MX:  # NKI Trainium3 guide: four input elements per partition per cycle
        return elementwise_cycles(math.ceil(_n(a) / 4), preset)
    return elementwise_cycles(n, preset)


def _tensor_tensor_fast(ins: Instruction) -> bool:
    """One input in PSUM and one in SBUF, or a bf16 add/mul/sub on contiguous SBUF operands."""
    if len(ins.ins) < 2:
        return True
    spaces = {ins.ins[0].space, ins.ins[1].space}
    if spaces == {Space.PSUM, Space.SBUF}:
        return True
    operands = (*ins.ins, *ins.outs)
    return ins.attr("op") in _FAST_TT_OPS and all(
        x.dtype == "bfloat16" and x.space is Space.SBUF and is_contiguous(x) for x in operands
    )


def instruction_ns(ins: Instruction, preset: Preset) -> float:
    """Duration in ns of one instruction running alone (a DMA: latency + transfer alone on its engines)."""
    if ins.opcode is Opcode.DMA_DIRECT2D:
        src, dst = ins.ins[0], ins.outs[0]
        return preset.dma_latency_ns + dma_transfer_ns(
            dst.nbytes,
            dma_chunks(src, dst, bool(ins.attr("transpose"))),
            preset,
            partitions=dma_partitions(src, dst),
        )
    if ins.opcode in COLLECTIVES:
        acc = ins.ins[0] if ins.ins else None
        nbytes = acc.nbytes if acc is not None else 0
        return preset.dma_latency_ns + dma_transfer_ns(nbytes, 1, preset)
    return instruction_cycles(ins, preset) * 1e9 / preset.clock_hz(ins.engine.value)
