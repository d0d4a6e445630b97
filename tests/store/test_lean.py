"""The lean profile of an ingest (`nprof.store.lean`: the memory-traffic columns dropped, their sums and
per-instruction total preset) analyses and builds exactly like the whole profile: the whole profile is the reference."""

from __future__ import annotations

import re
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


def _small_groups(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """Profile files written from now on in this test have row groups of `rows` rows (several per table)."""
    import pyarrow.parquet as pq

    import nprof.container as container_mod

    write = pq.write_table
    monkeypatch.setattr(container_mod.pq, "write_table", lambda *a, **k: write(*a, **{**k, "row_group_size": rows}))


def _same_lean(got: Profile, want: Profile) -> None:
    """`got` (load_lean) holds the tables, string codes and presets of `want` (the lean profile of the whole load)."""
    from nprof.analysis.facts import facts
    from nprof.analysis.opcodes import instruction_bytes
    from nprof.profile.codes import recall

    for name in ("instructions", "dma", "collectives", "counters"):
        assert got.table(name).equals(want.table(name)), name
    for name in ("instructions", "dma"):
        for column in got.table(name).column_names:
            a, b = recall(got.table(name), column), recall(want.table(name), column)
            assert (a is None) == (b is None), (name, column)
            if a is not None and b is not None:
                assert np.array_equal(a[0], b[0]) and a[1].equals(b[1]), (name, column)
    for column in SUMMED_ONLY:
        assert facts(got).i_sum(column) == facts(want).i_sum(column), column
    assert np.array_equal(instruction_bytes(got), instruction_bytes(want))


@pytest.mark.parametrize("groups", [None, 700])
@pytest.mark.parametrize("case", sorted(LEAN_CASES))
def test_the_streamed_lean_load_is_the_lean_profile_of_the_whole_load(
    case: str, groups: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof.store.lean import load_lean

    if groups:
        _small_groups(monkeypatch, groups)
    path = LEAN_CASES[case]().save(tmp_path / "p.ntff")
    got = load_lean(path)
    assert not set(SUMMED_ONLY) & set(got.instructions.column_names)
    _same_lean(got, lean_profile(Profile.load(path, encoded=True)))
    want = run_all(Profile.load(path))  # (the per-instruction total is read once: a fresh load for the analysis)
    assert all(table.equals(want[name]) for name, table in run_all(load_lean(path)).items())


def _with_column(p: Profile, name: str, values: pa.Array) -> Profile:
    ins = p.instructions
    ins = ins.set_column(ins.schema.get_field_index(name), pa.field(name, values.type, values.null_count == 0), values)
    return Profile(p.info, ins, p.dma, p.collectives, p.counters)


@pytest.mark.parametrize(
    "values",
    [
        lambda n: np.r_[np.zeros(n - 1, np.int64), -5],  # a negative byte count, in the last row group
        lambda n: np.full(n, 2**62, np.int64),  # each value allowed, their total past MAX_VALUE
        lambda n: np.r_[np.zeros(n - 1, np.int64), 2**62 + 1],  # one value past MAX_VALUE
    ],
)
def test_the_streamed_lean_load_refuses_what_the_whole_load_refuses(
    values: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof.errors import FormatError
    from nprof.store.lean import load_lean

    _small_groups(monkeypatch, 700)
    p = synthetic_profile(2000, seed=3)
    bad = pa.array(values(p.instructions.num_rows), pa.int64())  # type: ignore[operator]
    path = _with_column(p, "sbuf_write_bytes", bad).save(tmp_path / "bad.ntff")
    with pytest.raises(FormatError) as whole:
        Profile.load(path, encoded=True)
    with pytest.raises(FormatError) as streamed:
        load_lean(path)
    assert "sbuf_write_bytes" in str(whole.value)
    cut = re.compile(r"(?<= sums to) .*|(?<= has values outside) .*")  # the figures are those of the rows read so far
    assert cut.sub("", str(streamed.value)) == cut.sub("", str(whole.value))
