"""String columns decoded from their Parquet dictionaries: the same values as a plain read, and the same codes
as the analysis' own encoding (`facts.encode_arrow`, the reference) on random tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nprof import container
from nprof.analysis.facts import encode_arrow, facts
from nprof.container import open_container, write_container
from nprof.profile import FORMAT, SCHEMA_VERSION, TABLES, Profile
from nprof.profile.codes import decoded, read_strings, recall
from tests.conftest import tiny_profile


def _random_strings(rng: np.random.Generator, n: int) -> pa.Array:
    pool = [f"v{i}" for i in range(int(rng.integers(1, 40)))]
    values = [None if rng.random() < 0.1 else pool[int(rng.integers(0, len(pool)))] for _ in range(n)]
    return pa.array(values, pa.string())


def _save(path: Path, tables: dict[str, pa.Table], monkeypatch: pytest.MonkeyPatch, **options: Any) -> Path:
    plain = pq.write_table
    monkeypatch.setattr(container.pq, "write_table", lambda t, f, **kw: plain(t, f, **{**kw, **options}))
    p = tiny_profile()
    return write_container(path, FORMAT, SCHEMA_VERSION, p.info.to_json(), tables)


@pytest.mark.parametrize("seed", range(6))
def test_decoded_strings_match_a_plain_read_and_the_reference_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    table = pa.table({"queue": _random_strings(rng, n), "tensor": _random_strings(rng, n), "bytes": np.arange(n)})
    options = {"row_group_size": int(rng.integers(1, 50))}
    if seed % 2:
        options["dictionary_pagesize_limit"] = 16  # dictionary pages overflow: plain pages follow
    path = _save(tmp_path / "p.ntff", {"dma": table}, monkeypatch, **options)
    box = open_container(path, FORMAT, SCHEMA_VERSION, "profile")
    got, codes = read_strings(box, "dma", TABLES["dma"])
    plain = box.read_table("dma")
    box.close()
    assert got.equals(plain)
    for column in ("queue", "tensor"):
        if n == 0:
            continue
        want_codes, want_dict = encode_arrow(plain[column])
        np.testing.assert_array_equal(codes[column][0], want_codes)
        assert codes[column][1].equals(want_dict)


def test_a_loaded_profile_hands_its_codes_to_the_analysis_only_for_its_own_tables(tmp_path: Path) -> None:
    p = tiny_profile()
    p.save(tmp_path / "p.ntff")
    loaded = Profile.load(tmp_path / "p.ntff")
    kept = recall(loaded.instructions, "opcode")
    assert kept is not None
    assert facts(loaded).column("instructions", "opcode") is kept
    assert recall(p.instructions, "opcode") is None  # another table object: no codes
    assert all(loaded.table(n).equals(p.table(n)) for n in TABLES)


def test_a_dictionary_repeating_a_value_gives_no_codes() -> None:
    col = pa.chunked_array([pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int32()), ["a", "a"])])
    plain, codes = decoded(col)
    assert plain.to_pylist() == ["a", "a", None] and codes is None
