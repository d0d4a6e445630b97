"""The lean profile of an ingest (`nprof.store.lean`: the memory-traffic columns dropped, their sums and
per-instruction total preset) analyses and builds exactly like the whole profile: the whole profile is the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from nprof.analysis import run_all
from nprof.profile import Profile
from nprof.store import Store
from nprof.store.ingest_events import event_columns
from nprof.store.lean import SUMMED_ONLY, lean_profile
from nprof.store.synthetic import synthetic_profile
from tests.store.test_encoded_ingest import CASES
from tests.store.test_ingest_orders import _contents


def _random_bytes(p: Profile, seed: int) -> Profile:
    """`p` with random memory-traffic columns (zeros, small and large values; some columns all zero)."""
    rng = np.random.default_rng(seed)
    ins, n = p.instructions, p.instructions.num_rows
    for name in SUMMED_ONLY:
        kind = rng.integers(0, 3)
        values = np.zeros(n, np.int64) if kind == 0 else rng.integers(0, 10 ** int(rng.integers(1, 12)), n)
        ins = ins.set_column(ins.schema.get_field_index(name), ins.schema.field(name), pa.array(values, pa.int64()))
    return Profile(p.info, ins, p.dma, p.collectives, p.counters)


def _shuffled(p: Profile, seed: int) -> Profile:
    """`p` with its instructions out of id order (the store cannot copy the file's member: it writes it)."""
    order = np.random.default_rng(seed).permutation(p.instructions.num_rows)
    return Profile(p.info, p.instructions.take(pa.array(order)), p.dma, p.collectives, p.counters)


LEAN_CASES = {
    **CASES,
    "bytes-7": lambda: _random_bytes(synthetic_profile(2500, seed=7), 7),
    "bytes-8": lambda: _random_bytes(synthetic_profile(4, seed=8), 8),
    "shuffled-9": lambda: _shuffled(_random_bytes(synthetic_profile(3000, seed=9), 9), 9),
}


@pytest.mark.parametrize("case", sorted(LEAN_CASES))
def test_the_lean_profile_analyses_like_the_whole_one(case: str, tmp_path: Path) -> None:
    path = LEAN_CASES[case]().save(tmp_path / "p.ntff")
    want = run_all(Profile.load(path))
    lean = lean_profile(Profile.load(path, encoded=True))
    assert not set(SUMMED_ONLY) & set(lean.instructions.column_names)
    got = run_all(lean)
    assert list(got) == list(want)
    for name, table in want.items():
        assert got[name].schema == table.schema, name
        assert got[name].equals(table), name
    rows, cols, *names = event_columns(Profile.load(path))
    got_rows, got_cols, *got_names = event_columns(lean)
    assert (got_rows, got_names) == (rows, names)
    for name, col in cols.items():
        assert got_cols[name].dtype == col.dtype and np.array_equal(got_cols[name], col), name


@pytest.mark.parametrize("case", sorted(LEAN_CASES))
def test_ingesting_the_file_builds_the_database_of_the_whole_profile(case: str, tmp_path: Path) -> None:
    path = LEAN_CASES[case]().save(tmp_path / "p.ntff")
    store = Store(tmp_path / "s")
    store.ingest_file(path, profile_id="file")  # lean, encoded, handed over
    store.ingest(Profile.load(path), "whole")  # the reference: the whole plain profile, held by the caller
    store.close()
    file_db, whole_db = _contents(store.db_path("file")), _contents(store.db_path("whole"))
    assert set(file_db) == set(whole_db)
    for name in file_db:
        assert file_db[name] == whole_db[name], name


def test_a_lean_table_without_its_source_file_is_refused(tmp_path: Path) -> None:
    from nprof.store.raw_parts import write_parts

    lean = lean_profile(_shuffled(synthetic_profile(100, seed=1), 1))  # out of id order: must be written
    with pytest.raises(ValueError, match="lacks columns"):
        write_parts(lean, tmp_path / "x.parts")
