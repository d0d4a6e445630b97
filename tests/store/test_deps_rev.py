"""deps_rev built by DuckDB from the parts equals the numpy reference, row for row."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from nprof.profile import Profile, ProfileInfo
from nprof.store.deps_rev import deps_rev_table, write_deps_rev_sql
from nprof.store.raw_parts import create_views, search_path_config, write_parts


def _deps(rng: np.random.Generator, n: int, n_ids: int) -> pa.Array:
    """Random dependency lists: empty, null, repeated and null elements included."""
    out: list[list[int | None] | None] = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        if rng.random() < 0.1:
            out.append(None)
            continue
        row: list[int | None] = [int(v) for v in rng.integers(0, n_ids, k)]
        if row and rng.random() < 0.2:
            row.append(row[0])  # the same dependency twice
        if rng.random() < 0.05:
            row.append(None)
        out.append(row)
    return pa.array(out, pa.list_(pa.int64()))


def _profile(seed: int, shuffled: bool = False) -> Profile:
    rng = np.random.default_rng(seed)
    n_ins, n_dma = int(rng.integers(0, 300)), int(rng.integers(0, 200))
    ids = rng.permutation(n_ins + n_dma).astype(np.int64)  # instruction and DMA ids interleave
    ins_ids, dma_ids = np.sort(ids[:n_ins]), np.sort(ids[n_ins:])
    if shuffled:
        ins_ids, dma_ids = rng.permutation(ins_ids), rng.permutation(dma_ids)
    n_ids = n_ins + n_dma + 5
    zeros = np.zeros
    return Profile.build(
        ProfileInfo(device="virtual-neuroncore"),
        instructions={"id": ins_ids, "ts": zeros(n_ins, np.int64), "duration": zeros(n_ins, np.int64),
                      "engine": ["vector"] * n_ins, "track": ["vector"] * n_ins, "opcode": ["X"] * n_ins,
                      "deps": _deps(rng, n_ins, n_ids)},
        dma={"id": dma_ids, "ts": zeros(n_dma, np.int64), "duration": zeros(n_dma, np.int64),
             "queue": ["q0"] * n_dma, "direction": ["hbm->sbuf"] * n_dma, "deps": _deps(rng, n_dma, n_ids)},
    )  # fmt: skip


def _sql_rows(p: Profile, tmp: Path) -> list[tuple[int, int]] | None:
    write_parts(p, tmp / "x.parts")
    con = duckdb.connect(config=search_path_config(tmp))
    try:
        create_views(con, "x.parts")
        if not write_deps_rev_sql(con, p):
            return None
        assert [r[:2] for r in con.execute("DESCRIBE deps_rev").fetchall()] == [("dep", "BIGINT"), ("id", "BIGINT")]
        return [tuple(r) for r in con.execute("SELECT dep, id FROM deps_rev").fetchall()]  # stored order
    finally:
        con.close()


@pytest.mark.parametrize("seed", range(8))
def test_sql_deps_rev_equals_the_numpy_reference(tmp_path: Path, seed: int) -> None:
    p = _profile(seed)
    expected = deps_rev_table(p)
    got = _sql_rows(p, tmp_path)
    assert got == list(zip(expected["dep"].to_pylist(), expected["id"].to_pylist(), strict=True))


def test_reference_drops_nulls_and_keeps_table_order() -> None:
    p = Profile.build(
        ProfileInfo(device="virtual-neuroncore"),
        instructions={"id": [1, 2], "ts": [0, 0], "duration": [1, 1], "engine": ["vector"] * 2,
                      "track": ["vector"] * 2, "opcode": ["X"] * 2, "deps": [[5, None, 5], None]},
        dma={"id": [0, 5], "ts": [0, 0], "duration": [1, 1], "queue": ["q0"] * 2,
             "direction": ["hbm->sbuf"] * 2, "deps": [[5], [1]]},
    )  # fmt: skip
    t = deps_rev_table(p)
    assert list(zip(t["dep"].to_pylist(), t["id"].to_pylist(), strict=True)) == [(1, 5), (5, 1), (5, 1), (5, 0)]


def test_tables_out_of_id_order_are_left_to_numpy(tmp_path: Path) -> None:
    p = _profile(3, shuffled=True)
    assert p.instructions.num_rows > 1
    assert _sql_rows(p, tmp_path) is None
