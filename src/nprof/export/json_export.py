"""`json`: the summary and every event as one JSON document, streamed (default file `ntff.json`).

Contract: `{"summary": [{...summary_metrics...}], "instruction": [...], "dma": [...],
"collective": [...], "warning": [...], "finding": [...]}` (collective only when the profile has
collectives). Instruction records use the real profiler's field names first —
timestamp (ns), duration (ns), label (timeline row), opcode, operands, hlo_name,
nki_source_location — then layer, engine, track, id, flops, hw_flops, the
memory byte counters, wait_ns, deps, iteration, pc. DMA records: timestamp,
duration, label, queue, direction, bytes, partitions, tensor, is_spill,
is_reload, layer, hlo_name, nki_source_location, id, deps, iteration, pc.
Missing values are null. One record per line; events are rendered in batches
of `chunk_rows` by DuckDB's `to_json` (same text as orjson would give), so
memory does not grow with the profile size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis import summary_metrics
from nprof.analysis.findings import findings
from nprof.analysis.warnings import warnings
from nprof.export.labels import queue_label, track_label
from nprof.export.options import ExportOptions
from nprof.profile import Profile
from nprof.progress import Progress, progress

INSTRUCTION_FIELDS = (
    "timestamp", "duration", "label", "opcode", "operands", "hlo_name", "nki_source_location", "layer", "engine",
    "track", "id", "flops", "hw_flops", "is_transpose", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes",
    "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes", "wait_ns", "deps", "iteration", "pc",
)  # fmt: skip
DMA_FIELDS = (
    "timestamp", "duration", "label", "queue", "direction", "bytes", "partitions", "tensor", "is_spill", "is_reload",
    "layer", "hlo_name", "nki_source_location", "id", "deps", "iteration", "pc",
)  # fmt: skip


def _labelled(batch: pa.RecordBatch, source: str, label: Callable[[str], str], fields: tuple[str, ...]) -> pa.Table:
    enc = pc.dictionary_encode(batch[source])
    labels = pa.array([label(v) for v in enc.dictionary.to_pylist()], pa.string()).take(enc.indices)
    cols = {name: batch[name] for name in batch.schema.names}
    cols["timestamp"] = cols.pop("ts")
    cols["label"] = labels
    return pa.table({name: cols[name] for name in fields})


def _records(
    out: BinaryIO, table: pa.Table, convert: Callable[[pa.RecordBatch], pa.Table], chunk: int, bar: Progress
) -> None:
    """Write the rows of `table` as JSON objects separated by ",\n"; DuckDB's to_json renders each batch."""
    first = True
    con = duckdb.connect()
    try:
        for batch in table.to_batches(max_chunksize=chunk):
            rows = convert(batch)
            if rows.num_rows:
                con.register("batch_rows", rows)
                text = con.sql("SELECT to_json(batch_rows) FROM batch_rows").to_arrow_table().column(0)
                con.unregister("batch_rows")
                out.write((b"" if first else b",\n") + ",\n".join(text.to_pylist()).encode())
                first = False
            bar.advance(batch.num_rows)
    finally:
        con.close()


def write(profile: Profile, out: BinaryIO, options: ExportOptions) -> None:
    """Stream `profile` as JSON to `out` (see module doc)."""
    chunk = options.chunk_rows
    out.write(b'{"summary": [' + orjson.dumps(summary_metrics(profile, thresholds=options.thresholds)) + b"],\n")
    with progress(profile.event_count, "Writing JSON") as bar:
        out.write(b'"instruction": [\n')
        _records(
            out,
            profile.instructions,
            lambda b: _labelled(b, "track", track_label, INSTRUCTION_FIELDS),
            chunk,
            bar,
        )
        out.write(b'\n],\n"dma": [\n')
        _records(out, profile.dma, lambda b: _labelled(b, "queue", queue_label, DMA_FIELDS), chunk, bar)
        out.write(b"\n],\n")
    if profile.collectives.num_rows:
        out.write(b'"collective": [\n')
        _records(out, profile.collectives, lambda b: pa.Table.from_batches([b]), chunk, _NoBar())
        out.write(b"\n],\n")
    th = options.thresholds
    for key, table in (("warning", warnings(profile, thresholds=th)), ("finding", findings(profile, thresholds=th))):
        out.write(f'"{key}": [\n'.encode())
        _records(out, table, lambda b: pa.Table.from_batches([b]), chunk, _NoBar())
        out.write(b"\n]" + (b",\n" if key == "warning" else b"\n"))
    out.write(b"}\n")


class _NoBar:
    def advance(self, n: int = 1) -> None:
        return None
