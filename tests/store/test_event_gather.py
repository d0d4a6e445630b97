"""The event columns (`nprof.store.ingest_events.event_columns`), gathered GATHER_CHUNK rows at a time, are held
to a slow, obviously-correct reference built event by event from the plain profile (Python rows, sorted by
(row, ts, table, position)), and to the same gather done whole (one chunk), on random profiles: nulls in the
string columns, the tables out of (row, ts) order, a DMA queue named like an instruction track (the interleaved
path), chunks that do and do not divide the tables, tables of one Arrow chunk and of many."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import nprof.store.ingest_events as ev
from nprof.profile import Profile
from nprof.store.rows import order_event_rows
from nprof.store.synthetic import synthetic_profile
from tests.store.test_encoded_ingest import CASES, _with_holes


def _shuffled(seed: int) -> Profile:
    """A synthetic profile with both tables in a random row order (neither sorted by row nor by ts)."""
    p = _with_holes(seed)
    rng = np.random.default_rng(seed)
    ins, dma = (t.take(pa.array(rng.permutation(t.num_rows))) for t in (p.instructions, p.dma))
    return Profile(p.info, ins, dma, p.collectives, p.counters)


def _shared_name(seed: int) -> Profile:
    """A DMA queue named like an instruction track: one row holds events of both tables."""
    p = synthetic_profile(2500, seed=seed)
    q = pa.compute.if_else(pa.compute.equal(p.dma["queue"], "q3"), "vector", p.dma["queue"])
    dma = p.dma.set_column(p.dma.schema.get_field_index("queue"), p.dma.schema.field("queue"), q)
    return Profile(p.info, p.instructions, dma, p.collectives, p.counters)


RANDOM = {
    **{f"shuffled-{s}": (lambda s=s: _shuffled(s)) for s in (1, 2)},
    **{f"shared-{s}": (lambda s=s: _shared_name(s)) for s in (4, 5)},
    "synthetic-small": lambda: synthetic_profile(37, seed=9),
}


def _reference(p: Profile) -> tuple[list[str], dict[str, list[int]], list[str], list[str], list[str]]:
    """Row keys, columns (as lists) and code tables, one event at a time from the plain profile."""
    ins, dma = p.instructions.to_pylist(), p.dma.to_pylist()
    rows = order_event_rows({r["track"] for r in ins}, {r["queue"] for r in dma})
    row_of = {r.key: r.index for r in rows}
    opnames = sorted({r["opcode"] for r in ins} | {r["direction"] for r in dma} - {None})
    names = ("nki_source_location", "layer")
    srcnames = sorted({r[c] for r in ins + dma for c in names} - {None})
    tensornames = sorted({r["tensor"] for r in dma} - {None})
    src_of, op_of, tensor_of = ({n: i for i, n in enumerate(x)} for x in (srcnames, opnames, tensornames))
    events = []
    for table, recs in ((0, ins), (1, dma)):
        for k, r in enumerate(recs):
            src = src_of.get(r["nki_source_location"], src_of.get(r["layer"], -1))
            op = op_of.get(r["opcode"] if table == 0 else r["direction"], -1)
            amount = (r["flops"], 0) if table == 0 else (0, r["bytes"])
            tensor = -1 if table == 0 else tensor_of.get(r["tensor"], -1)
            row = row_of[r["track"] if table == 0 else r["queue"]]
            values = (row, r["ts"], r["duration"], r["id"], op, amount[1], amount[0], src)
            events.append(((row, r["ts"], table, k), (*values, src_of.get(r["layer"], -1), tensor)))
    events.sort(key=lambda e: e[0])
    cols = {name: [e[1][i] for e in events] for i, name in enumerate(ev.EVENT_DTYPES)}
    return [r.key for r in rows], cols, opnames, srcnames, tensornames


@pytest.mark.parametrize("case", sorted(CASES) + sorted(RANDOM))
@pytest.mark.parametrize("chunk", [1, 7, 1000, 1 << 30])
def test_gathered_columns_match_the_reference(
    case: str, chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = {**CASES, **RANDOM}[case]()
    path = p.save(tmp_path / "p.ntff")
    keys, want, opnames, srcnames, tensornames = _reference(Profile.load(path))
    monkeypatch.setattr(ev, "GATHER_CHUNK", chunk)
    loaded = Profile.load(path, encoded=True)
    if chunk == 7:  # the tables in many Arrow chunks too (a numeric column is joined when it is gathered)
        ins, dma = (
            pa.Table.from_batches(t.to_batches(max_chunksize=13), t.schema) for t in (loaded.instructions, loaded.dma)
        )
        loaded = Profile(loaded.info, ins, dma, loaded.collectives, loaded.counters)
    rows, cols, got_ops, got_srcs, got_tensors = ev.event_columns(loaded)
    assert ([r.key for r in rows], got_ops, got_srcs, got_tensors) == (keys, opnames, srcnames, tensornames)
    assert list(cols) == list(ev.EVENT_DTYPES)
    for name, dtype in ev.EVENT_DTYPES.items():
        assert cols[name].dtype == dtype, name
        assert cols[name].tolist() == want[name], name
