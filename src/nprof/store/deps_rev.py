"""The reverse dependency index of a profile database: `deps_rev(dep, id)`, who waits on whom.

Contract: one row per (dependency, event) pair of the instructions' and DMA transfers' `deps` lists
(null lists and null elements contribute nothing), sorted by `dep`; rows of one `dep` in table order
(instructions, then DMA, each in its table's row order; an event listing a dependency twice gives two rows).
* `write_deps_rev_sql(con, p)`: when both tables of `p` are in id order (the usual layout, and always
  the order of their Parquet parts, `nprof.store.raw_parts`), DuckDB builds the table from the parts'
  views `instructions` / `dma` (its own sort: no per-dependency array in Python); otherwise it returns
  False and the caller writes `deps_rev_table(p)` (numpy; the reference the tests hold the SQL to).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.profile import Profile
from nprof.store.raw_parts import in_id_order

SCHEMA = pa.schema([("dep", pa.int64()), ("id", pa.int64())])

_SQL = """CREATE TABLE deps_rev AS
SELECT dep, id FROM (
    SELECT unnest(deps) AS dep, id, 0 AS part FROM instructions
    UNION ALL
    SELECT unnest(deps) AS dep, id, 1 AS part FROM dma
) WHERE dep IS NOT NULL ORDER BY dep, part, id"""


def deps_rev_table(p: Profile) -> pa.Table:
    """The deps_rev rows of `p` (see module doc) as an Arrow table, built in numpy."""
    ids, deps = [], []
    for t in (p.instructions, p.dma):
        col = t["deps"].combine_chunks() if t.num_rows else None
        if col is None or len(col) == 0:
            continue
        lengths = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(col)
        owner = np.repeat(t["id"].to_numpy(), lengths)
        if flat.null_count:
            valid = flat.is_valid().to_numpy(zero_copy_only=False)
            flat, owner = flat.filter(pa.array(valid)), owner[valid]
        ids.append(owner.astype(np.int64, copy=False))
        deps.append(flat.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
    dep = np.concatenate(deps) if deps else np.zeros(0, dtype=np.int64)
    idv = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    order = np.argsort(dep, kind="stable")
    return pa.table({"dep": dep[order], "id": idv[order]}, schema=SCHEMA)


def write_deps_rev_sql(con: duckdb.DuckDBPyConnection, p: Profile) -> bool:
    """Create `deps_rev` in `con`'s current database from the views `instructions` and `dma` (over the
    parts) when both tables of `p` are in id order, and return True; False (nothing done) otherwise."""
    if not (in_id_order(p.instructions) and in_id_order(p.dma)):
        return False
    con.execute(_SQL)
    return True
