"""Arrow schemas of the Profile tables (our NTFF-like format), schema version 1.

Every timestamp is an integer number of nanoseconds since execution start.
Every event (a row of `instructions` or `dma`) has an `id` unique across both
tables, so `deps` (the ids an event waited for) may point at either table.

Engine categories (`engine` column): tensor, vector, scalar, gpsimd, sync, cc
(collective cores) for the virtual NeuronCore; real-hardware captures map their
ops onto the same categories (tensor: matmul/conv, vector: elementwise and
reductions, scalar: activations) and use `other` for the rest, so the same
summary and viewer apply; in a trace with device (GPU/MTIA) work, host rows use `host`, so
engine totals never mix CPU ops with device kernels. `track` is the timeline row the event belongs to:
  virtual device: "tensor.stationary" (LoadStationary), "tensor.moving"
  (MultiplyMoving / matmul), "vector", "scalar", "gpsimd", "sync", "cc.<k>";
  real hardware: "cpu:<thread id>", "cuda:<device>:<stream>" or "mtia:<device>:<stream>".
DMA `queue` names: "q0".."q15" on the virtual device; "memcpy:<device>:<stream>"
and "memset:<device>:<stream>" for real hardware, whose DMA `direction` is
host->device, device->host, device->device, host->host or memset.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1
FORMAT = "nprof-profile"

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync", "cc", "other", "host")

_str = pa.string()
_i64 = pa.int64()
_i32 = pa.int32()

INSTRUCTIONS = pa.schema(
    [
        pa.field("id", _i64, nullable=False),  # event id, unique across instructions and dma
        pa.field("ts", _i64, nullable=False),  # start, ns since execution start
        pa.field("duration", _i64, nullable=False),  # ns
        pa.field("engine", _str, nullable=False),  # one of ENGINES
        pa.field("track", _str, nullable=False),  # timeline row (see module doc)
        pa.field("opcode", _str, nullable=False),  # MATMUL, ACTIVATE, aten::addmm, ...
        pa.field("operands", _str),  # human-readable operand text
        pa.field("layer", _str),  # module path, e.g. model.fc1 (compiled graphs)
        pa.field("hlo_name", _str),  # graph node, e.g. %addmm_1 = addmm(...)
        pa.field("nki_source_location", _str),  # file.py:line of the kernel source
        pa.field("flops", _i64, nullable=False),  # model FLOPs (2 x useful MACs)
        pa.field("hw_flops", _i64, nullable=False),  # FLOPs the hardware spent (incl. padding)
        pa.field("is_transpose", pa.bool_(), nullable=False),  # TensorE transpose (counts as transpose_flops)
        pa.field("hbm_read_bytes", _i64, nullable=False),
        pa.field("hbm_write_bytes", _i64, nullable=False),
        pa.field("sbuf_read_bytes", _i64, nullable=False),
        pa.field("sbuf_write_bytes", _i64, nullable=False),
        pa.field("psum_read_bytes", _i64, nullable=False),
        pa.field("psum_write_bytes", _i64, nullable=False),
        pa.field("wait_ns", _i64, nullable=False),  # ns it was next in its queue but waited on semaphores
        pa.field("deps", pa.list_(_i64)),  # event ids this one waited for
        pa.field("iteration", _i32, nullable=False),  # execution index (0 = the profiled one)
        pa.field("pc", _i32, nullable=False),  # index in the program (-1 when not from a program)
    ]
)

DMA = pa.schema(
    [
        pa.field("id", _i64, nullable=False),
        pa.field("ts", _i64, nullable=False),
        pa.field("duration", _i64, nullable=False),
        pa.field("queue", _str, nullable=False),  # DMA queue (see module doc)
        pa.field("direction", _str, nullable=False),  # hbm->sbuf, sbuf->hbm, sbuf->sbuf, hbm->hbm, ...
        pa.field("bytes", _i64, nullable=False),
        pa.field("partitions", _i32, nullable=False),  # rows of the descriptor (1 when unknown)
        pa.field("tensor", _str),  # name of the HBM tensor moved
        pa.field("is_spill", pa.bool_(), nullable=False),  # a spill save (SBUF -> HBM of an intermediate)
        pa.field("is_reload", pa.bool_(), nullable=False),  # a spill reload (HBM -> SBUF of a saved intermediate)
        pa.field("layer", _str),
        pa.field("hlo_name", _str),
        pa.field("nki_source_location", _str),
        pa.field("deps", pa.list_(_i64)),
        pa.field("iteration", _i32, nullable=False),
        pa.field("pc", _i32, nullable=False),
    ]
)

COLLECTIVES = pa.schema(
    [
        pa.field("id", _i64, nullable=False),  # collective op id, shared by every rank taking part
        pa.field("kind", _str, nullable=False),  # all-reduce, all-gather, reduce-scatter, all-to-all
        pa.field("bytes", _i64, nullable=False),  # payload per rank
        pa.field("rank", _i32, nullable=False),  # the rank this row describes
        pa.field("ranks", pa.list_(_i32)),  # every participating rank
        pa.field("ts", _i64, nullable=False),  # when this rank arrived at the op
        pa.field("duration", _i64, nullable=False),  # arrival to completion on this rank
        pa.field("wait_ns", _i64, nullable=False),  # part of duration spent waiting for other ranks
        pa.field("algorithm", _str),  # ring, ...
    ]
)

COUNTERS = pa.schema(
    [
        pa.field("ts", _i64, nullable=False),
        pa.field("name", _str, nullable=False),  # e.g. "hbm_bandwidth_gbps", "cpu_percent"
        pa.field("value", pa.float64(), nullable=False),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "instructions": INSTRUCTIONS,
    "dma": DMA,
    "collectives": COLLECTIVES,
    "counters": COUNTERS,
}
