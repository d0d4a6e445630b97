"""`analyze_table` (one table, column arithmetic) equals `analyze_group` (the plain per-rank pass) on random jobs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nprof.analysis.collectives import RankFacts, analyze_group
from nprof.analysis.group_table import analyze_table


def _job(seed: int) -> tuple[pa.Table, list[dict]]:
    """Random ranks (some without any collective), ops over random subsets, arrivals with many ties."""
    rng = np.random.default_rng(seed)
    n_ranks = int(rng.integers(1, 40))
    ranks = [{"rank": r, "profile_id": f"g.rank{r}", "nd_idx": r // 4, "nc_idx": r % 4,
              "total_time_ns": int(rng.integers(0, 5) * 1000)} for r in range(n_ranks)]  # fmt: skip
    rows: dict[str, list] = {k: [] for k in ("id", "kind", "bytes", "rank", "ts", "duration", "wait_ns", "algorithm")}
    for op in range(int(rng.integers(0, 12))):
        members = sorted(rng.choice(n_ranks, int(rng.integers(1, n_ranks + 1)), replace=False).tolist())
        arrivals = {r: int(rng.integers(0, 4)) * 100 + op * 1000 for r in members}
        last, ring = max(arrivals.values()), int(rng.integers(1, 500))
        skewed = rng.random() < 0.4  # ranks placed at their own launches: waits not last - arrival
        for r in members:
            rows["id"].append(op)
            rows["kind"].append(str(rng.choice(["all-reduce", "all-gather"])))
            rows["bytes"].append(int(rng.integers(1, 10**6)))
            rows["rank"].append(r)
            rows["ts"].append(arrivals[r])
            rows["duration"].append(last + ring - arrivals[r])
            rows["wait_ns"].append(int(rng.integers(0, 3)) * 50 if skewed else last - arrivals[r])
            rows["algorithm"].append(None if rng.random() < 0.2 else "ring/efa")
    table = pa.table(rows, schema=pa.schema([("id", pa.int64()), ("kind", pa.string()), ("bytes", pa.int64()),
                                              ("rank", pa.int64()), ("ts", pa.int64()), ("duration", pa.int64()),
                                              ("wait_ns", pa.int64()), ("algorithm", pa.string())]))  # fmt: skip
    return table, ranks


@pytest.mark.parametrize("seed", range(12))
def test_analyze_table_equals_analyze_group(seed: int) -> None:
    table, ranks = _job(seed)
    facts = {}
    for info in ranks:
        mine = table.filter(pc.equal(table.column("rank"), info["rank"]))
        facts[info["rank"]] = RankFacts(mine, info["total_time_ns"], info["nd_idx"], info["nc_idx"], info["profile_id"])
    assert analyze_table(table, ranks) == analyze_group(facts).to_json()


def test_host_measured_rows_are_left_to_analyze_group() -> None:
    table, ranks = _job(3)
    assert table.num_rows
    algo = ["gloo (host, measured)", *table.column("algorithm").to_pylist()[1:]]
    table = table.set_column(table.schema.get_field_index("algorithm"), "algorithm", pa.array(algo, pa.string()))
    assert analyze_table(table, ranks) is None
