"""A Profile loaded with its string columns kept encoded (`Profile.load(encoded=True)`, what the store's ingest
reads) gives exactly the analysis tables, summary and validation of the plain load: the plain load is the reference."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from nprof.analysis import run_all
from nprof.capture import open_profile
from nprof.profile import Profile
from nprof.profile.codes import plain, plain_table
from nprof.store.synthetic import synthetic_profile
from tests.analysis.test_reference import _random_dma
from tests.analysis.test_system import _system_profile
from tests.conftest import tiny_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _with_holes(seed: int) -> Profile:
    """A synthetic profile whose source, layer and tensor columns are partly null (coalesce and codes of -1)."""
    p = synthetic_profile(4000, seed=seed)
    ins, dma = p.instructions, p.dma
    for col in ("nki_source_location", "layer", "hlo_name"):
        for name in ("ins", "dma"):
            t = ins if name == "ins" else dma
            keep = pa.array([(i * 7 + seed) % 3 != 0 for i in range(t.num_rows)])
            values = pa.compute.if_else(keep, t[col], pa.scalar(None, pa.string()))
            t = t.set_column(t.schema.get_field_index(col), t.schema.field(col), values)
            ins, dma = (t, dma) if name == "ins" else (ins, t)
    return Profile(p.info, ins, dma, p.collectives, p.counters)


CASES = {
    "tiny": tiny_profile,
    "synthetic-0": lambda: synthetic_profile(5000, seed=0),
    "synthetic-3": lambda: synthetic_profile(3001, seed=3),
    "holes-1": lambda: _with_holes(1),
    "holes-2": lambda: _with_holes(2),
    "random-dma": lambda: _random_dma(5)[0],
    "system": _system_profile,
    "kineto": lambda: open_profile(FIXTURES / "kineto_cuda_small.json"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_encoded_load_analyses_like_the_plain_load(case: str, tmp_path: Path) -> None:
    path = CASES[case]().save(tmp_path / "p.ntff")
    ref, enc = Profile.load(path), Profile.load(path, encoded=True)
    if ref.instructions.num_rows > 100:  # a real encoding happened (not a cast fallback)
        assert pa.types.is_dictionary(enc.instructions.schema.field("opcode").type)
    for name in ("instructions", "dma", "collectives", "counters"):
        assert plain_table(enc.table(name)).equals(ref.table(name)), name
    want, got = run_all(ref), run_all(enc)
    assert list(got) == list(want)
    for name, table in want.items():
        assert got[name].schema == table.schema, name
        assert got[name].equals(table), name


def test_plain_decodes_only_dictionaries() -> None:
    col = pa.chunked_array([pa.array(["a", None, "b"]).dictionary_encode()])
    assert plain(col).type == pa.string() and plain(col).to_pylist() == ["a", None, "b"]
    same = pa.chunked_array([pa.array(["x"])])
    assert plain(same) is same


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_events_only_profile_gives_the_full_profiles_event_columns(case: str, tmp_path: Path) -> None:
    import numpy as np

    from nprof.analysis.facts import release
    from nprof.store.ingest_events import event_columns, events_only

    path = CASES[case]().save(tmp_path / "p.ntff")
    p = Profile.load(path, encoded=True)
    run_all(p)  # as in ingest: the analysis made the string codes the slim profile inherits
    rows, cols, opnames, srcnames, tensors = event_columns(Profile.load(path))  # the reference: a plain full profile
    slim = events_only(p)
    release(p, keep_strings=True, into=slim)
    got_rows, got, got_ops, got_srcs, got_tensors = event_columns(slim)
    assert (got_rows, got_ops, got_srcs, got_tensors) == (rows, opnames, srcnames, tensors)
    assert list(got) == list(cols)
    for name, want in cols.items():
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want), name


@pytest.mark.parametrize("case", ["holes-1", "random-dma", "system", "synthetic-3"])
def test_ingesting_the_file_builds_the_database_of_the_plain_profile(case: str, tmp_path: Path) -> None:
    from nprof.store import Store
    from tests.store.test_ingest_orders import _contents

    path = CASES[case]().save(tmp_path / "p.ntff")
    store = Store(tmp_path / "s")
    store.ingest_file(path, profile_id="file")  # handed over, encoded, the profile freed mid-build
    store.ingest(Profile.load(path), "plain")  # held by the caller, plain strings
    store.close()
    file_db, plain_db = _contents(store.db_path("file")), _contents(store.db_path("plain"))
    assert set(file_db) == set(plain_db)
    for name in file_db:
        assert file_db[name] == plain_db[name], name
