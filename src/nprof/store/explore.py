"""Explorer views' data (docs/api.md): the operator hierarchy, the tensor table and the roofline points.

Contract:
* `operators(cur, meta)` -> `{"peak_flops", "total_ns", "nodes": [...]}`: one node per (layer, op,
  opcode) of the instructions — op is the compiled graph node `hlo_name` — with `count`, `time_ns`
  (summed instruction time), `flops`, `hbm_bytes` (instruction HBM reads + writes), `start`, `end`; and
  one node per (layer, op) of the DMA transfers with `opcode: null`, `dma_count`, `hbm_bytes` (bytes of
  transfers touching HBM). Missing names are "(none)". The page sums nodes into the tree
  layer -> op -> instruction; active % = time / total_ns; MFU = flops / (peak FLOP/s x time).
* `tensors(cur, meta)` -> `{"tensors": [...]}`: every tensor of the program manifest plus every other
  tensor a DMA moved (kind "spill" when all its transfers are spill saves/reloads, else "internal"):
  `name, kind, shape, dtype, bytes` (null when unknown), `dma_count`, `loads` (transfers out of
  HBM), `bytes_moved`, `bytes_loaded`, `repeat` (bytes_loaded / bytes: how many times the whole
  tensor was read; null without a size).
* `roofline(cur, meta)` -> `{"peak_flops", "hbm_bandwidth", "run": point, "layers": [point...]}`, a point
  being `{name, flops, hbm_bytes, time_ns, intensity (FLOP/B), achieved (FLOP/s)}`; achieved uses the
  layer's span (first start to last end of its instructions and DMAs) and the run's total time.
"""

from __future__ import annotations

from typing import Any

import duckdb

from nprof.store.info import tensor_bytes

NONE = "(none)"
_HBM = "(direction LIKE 'hbm%' OR direction LIKE '%->hbm%')"


def operators(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> dict[str, Any]:
    """Instruction and DMA aggregates per (layer, op, opcode) (see module doc)."""
    ins = cur.execute(
        f"SELECT coalesce(layer, '{NONE}'), coalesce(hlo_name, '{NONE}'), opcode, count(*), sum(duration), "
        "coalesce(sum(flops), 0), coalesce(sum(coalesce(hbm_read_bytes, 0) + coalesce(hbm_write_bytes, 0)), 0), "
        "min(ts), max(ts + duration) FROM instructions GROUP BY ALL ORDER BY 8"
    ).fetchall()
    dma = cur.execute(
        f"SELECT coalesce(layer, '{NONE}'), coalesce(hlo_name, '{NONE}'), count(*), "
        f"coalesce(sum(bytes) FILTER (WHERE {_HBM}), 0), min(ts), max(ts + duration) FROM dma GROUP BY ALL ORDER BY 5"
    ).fetchall()
    nodes = [
        {"layer": a, "op": b, "opcode": c, "count": int(n), "time_ns": int(t), "flops": int(f), "hbm_bytes": int(h),
         "dma_count": 0, "start": int(s), "end": int(e)}
        for a, b, c, n, t, f, h, s, e in ins
    ] + [
        {"layer": a, "op": b, "opcode": None, "count": 0, "time_ns": 0, "flops": 0, "hbm_bytes": int(h),
         "dma_count": int(n), "start": int(s), "end": int(e)}
        for a, b, n, h, s, e in dma
    ]  # fmt: skip
    man = meta.get("manifest") or {}
    return {"peak_flops": man.get("peak_flops"), "total_ns": int(meta["stats"]["t_max"]), "nodes": nodes}


def tensors(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> dict[str, Any]:
    """Every program tensor and every other DMA-moved tensor with its transfer counts (see module doc)."""
    moved = {
        r[0]: r[1:]
        for r in cur.execute(
            "SELECT tensor, count(*), count(*) FILTER (WHERE direction LIKE 'hbm%'), sum(bytes), "
            "coalesce(sum(bytes) FILTER (WHERE direction LIKE 'hbm%'), 0), bool_and(is_spill OR is_reload) "
            "FROM dma WHERE tensor IS NOT NULL GROUP BY tensor"
        ).fetchall()
    }
    out = []
    listed = set()
    for t in (meta.get("manifest") or {}).get("tensors", []):
        shape = list(t["shape"])
        out.append(_tensor_row(t["name"], t["kind"], shape, t["dtype"], tensor_bytes(shape, t["dtype"]), moved))
        listed.add(t["name"])
    for name in sorted(set(moved) - listed):
        out.append(_tensor_row(name, "spill" if moved[name][4] else "internal", None, None, None, moved))
    return {"tensors": out}


def _tensor_row(name: str, kind: str, shape: Any, dtype: Any, nbytes: int | None, moved: dict) -> dict[str, Any]:
    n, loads, total, loaded, _spill = moved.get(name, (0, 0, 0, 0, False))
    return {
        "name": name, "kind": kind, "shape": shape, "dtype": dtype, "bytes": nbytes,
        "dma_count": int(n), "loads": int(loads), "bytes_moved": int(total or 0), "bytes_loaded": int(loaded or 0),
        "repeat": round(int(loaded or 0) / nbytes, 3) if nbytes else None,
    }  # fmt: skip


def _point(name: str, flops: int, hbm: int, time_ns: int) -> dict[str, Any]:
    return {
        "name": name, "flops": flops, "hbm_bytes": hbm, "time_ns": time_ns,
        "intensity": flops / hbm if hbm else None, "achieved": flops / (time_ns * 1e-9) if time_ns else None,
    }  # fmt: skip


def roofline(cur: duckdb.DuckDBPyConnection, meta: dict[str, Any]) -> dict[str, Any]:
    """The run and each layer as roofline points against the preset's roofs (see module doc)."""
    ops = operators(cur, meta)
    layers: dict[str, list[int]] = {}
    for n in ops["nodes"]:
        acc = layers.setdefault(n["layer"], [0, 0, n["start"], n["end"]])
        acc[0] += n["flops"]
        acc[1] += n["hbm_bytes"]
        acc[2], acc[3] = min(acc[2], n["start"]), max(acc[3], n["end"])
    run_f = sum(a[0] for a in layers.values())
    run_h = sum(a[1] for a in layers.values())
    man = meta.get("manifest") or {}
    return {
        "peak_flops": man.get("peak_flops"),
        "hbm_bandwidth": man.get("hbm_bandwidth"),
        "run": _point("run", run_f, run_h, ops["total_ns"]),
        "layers": [_point(k, f, h, e - s) for k, (f, h, s, e) in layers.items() if f > 0 and k != NONE],
    }
