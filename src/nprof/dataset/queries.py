"""The cross-rank analysis as SQL that DuckDB and Spark SQL both run unchanged.

Contract: `queries(top=20) -> {name: (title, sql)}`, in print order. Every query reads only the
dataset's views `ranks`, `instructions`, `dma`, `collectives` (each with the partition column `rank`),
uses only SQL both engines define identically (GROUP BY, LEFT JOIN, ROW_NUMBER, CAST, FLOOR, POWER,
LOG2), and ends in an ORDER BY that makes its row order total, so both engines return the same rows.

Definitions (they match `nprof.analysis.collectives` for one job):
* rank_totals: per rank its window, instruction and DMA counts, DMA bytes, collective count and the
  time it waited in collectives for other ranks.
* collective_ops: per collective op id: kind, participants, first and last arrival, end, the largest
  and total wait, and the straggler (the last to arrive; ties: the lowest rank; null when no rank
  waited).
* stragglers: per rank the ops it was the only last arriver at and the wait it caused the others.
* engine_utilisation: per rank and engine the summed instruction time and its share of the window.
* top_ops: the `top` opcodes with the most instruction time over all ranks, with the slowest rank.
* wait_histogram: collective waits in power-of-two buckets [2^k, 2^(k+1)) ns; bucket -1 holds 0 ns.
"""

from __future__ import annotations

_RANK_TOTALS = """
SELECT r.rank, r.nd_idx, r.nc_idx, r.total_time_ns,
       COALESCE(i.n, 0) AS instructions, COALESCE(d.n, 0) AS dma_transfers,
       COALESCE(d.bytes, 0) AS dma_bytes, COALESCE(c.n, 0) AS cc_ops, COALESCE(c.wait, 0) AS cc_wait_ns
FROM ranks r
LEFT JOIN (SELECT rank, COUNT(*) AS n FROM instructions GROUP BY rank) i ON i.rank = r.rank
LEFT JOIN (SELECT rank, COUNT(*) AS n, CAST(SUM(bytes) AS BIGINT) AS bytes FROM dma GROUP BY rank) d
       ON d.rank = r.rank
LEFT JOIN (SELECT rank, COUNT(*) AS n, CAST(SUM(wait_ns) AS BIGINT) AS wait FROM collectives GROUP BY rank) c
       ON c.rank = r.rank
ORDER BY r.rank
"""

_ARRIVALS = """
SELECT id, kind, bytes, rank, ts, ts + duration AS finish, wait_ns,
       ROW_NUMBER() OVER (PARTITION BY id ORDER BY ts DESC, rank ASC) AS lateness,
       COUNT(*) OVER (PARTITION BY id, ts) AS same_arrival,
       MAX(ts) OVER (PARTITION BY id) AS last_arrival,
       CAST(SUM(wait_ns) OVER (PARTITION BY id) AS BIGINT) AS op_wait
FROM collectives
"""

_COLLECTIVE_OPS = f"""
SELECT id, MIN(kind) AS kind, MAX(bytes) AS bytes, COUNT(*) AS participants,
       MIN(ts) AS first_arrival, MAX(ts) AS last_arrival, MAX(finish) AS end_ns,
       MAX(wait_ns) AS max_wait_ns, CAST(SUM(wait_ns) AS BIGINT) AS total_wait_ns,
       MIN(CASE WHEN lateness = 1 AND op_wait > 0 THEN rank END) AS straggler
FROM ({_ARRIVALS}) a
GROUP BY id
ORDER BY id
"""

_STRAGGLERS = f"""
SELECT rank, COUNT(*) AS ops_last_at, CAST(SUM(op_wait) AS BIGINT) AS caused_wait_ns
FROM ({_ARRIVALS}) a
WHERE ts = last_arrival AND same_arrival = 1 AND op_wait > 0
GROUP BY rank
ORDER BY caused_wait_ns DESC, rank
"""

_ENGINE_UTILISATION = """
SELECT i.rank, i.engine, COUNT(*) AS instructions, CAST(SUM(i.duration) AS BIGINT) AS busy_ns,
       CAST(SUM(i.duration) AS DOUBLE) * 100 / MAX(r.total_time_ns) AS busy_percent
FROM instructions i JOIN ranks r ON r.rank = i.rank
GROUP BY i.rank, i.engine
ORDER BY i.rank, i.engine
"""

_TOP_OPS = """
SELECT opcode, engine, CAST(SUM(n) AS BIGINT) AS count, CAST(SUM(t) AS BIGINT) AS total_ns,
       COUNT(*) AS ranks, CAST(SUM(t) AS DOUBLE) / COUNT(*) AS mean_per_rank_ns, MAX(t) AS max_rank_ns,
       MIN(CASE WHEN slowest = 1 THEN rank END) AS slowest_rank
FROM (
  SELECT opcode, engine, rank, n, t,
         ROW_NUMBER() OVER (PARTITION BY opcode, engine ORDER BY t DESC, rank ASC) AS slowest
  FROM (SELECT opcode, engine, rank, COUNT(*) AS n, CAST(SUM(duration) AS BIGINT) AS t
        FROM instructions GROUP BY opcode, engine, rank) per_rank
) ranked
GROUP BY opcode, engine
ORDER BY total_ns DESC, opcode, engine
LIMIT {top}
"""

_WAIT_HISTOGRAM = """
SELECT kind, bucket, COUNT(*) AS waits,
       CASE WHEN bucket < 0 THEN 0 ELSE CAST(POWER(2, bucket) AS BIGINT) END AS from_ns
FROM (SELECT kind, CASE WHEN wait_ns <= 0 THEN -1 ELSE CAST(FLOOR(LOG2(wait_ns)) AS INT) END AS bucket
      FROM collectives) w
GROUP BY kind, bucket
ORDER BY kind, bucket
"""


def queries(top: int = 20) -> dict[str, tuple[str, str]]:
    """The cross-rank queries by name, in print order: (title, SQL)."""
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive whole number, got {top!r}")
    return {
        "rank_totals": ("Per-rank totals", _RANK_TOTALS),
        "collective_ops": ("Collective operations: waits and stragglers", _COLLECTIVE_OPS),
        "stragglers": ("Stragglers: who made the others wait", _STRAGGLERS),
        "engine_utilisation": ("Engine utilisation per rank", _ENGINE_UTILISATION),
        "top_ops": (f"Top {top} ops across ranks", _TOP_OPS.format(top=top)),
        "wait_histogram": ("Collective wait distribution (power-of-two buckets)", _WAIT_HISTOGRAM),
    }
