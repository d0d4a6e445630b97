"""Downloads: a stored profile written in another format through the exporters registry.

Contract: `download_formats()` lists the formats the page may offer (those of
`nprof.export.EXPORTERS` among json, perfetto, parquet, csv). `load_profile(store,
id)` rebuilds the `Profile` from the store's raw tables and manifest (the source
file may have moved since ingest). `export_profile(store, id, fmt, outdir)` runs the
exporter into `outdir` and returns the files or directories it produced.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa

from nprof.errors import NprofError
from nprof.export import EXPORTERS
from nprof.profile import TABLES, Profile, ProfileInfo
from nprof.store import Store

DOWNLOADABLE = ("json", "perfetto", "parquet", "csv")


def download_formats() -> list[str]:
    return [f for f in DOWNLOADABLE if f in EXPORTERS]


def load_profile(store: Store, profile_id: str) -> Profile:
    """The Profile as ingested, rebuilt from the store."""
    with store.session(profile_id) as (cur, meta):
        manifest = meta["manifest"]
        tables: dict[str, pa.Table] = {}
        for name, schema in TABLES.items():
            t = cur.execute(f"SELECT * FROM {name}").to_arrow_table()
            tables[name] = t.select(schema.names).cast(schema)
    info = ProfileInfo.from_json(orjson.loads(orjson.dumps(manifest)))
    return Profile(info, **tables)


def export_profile(store: Store, profile_id: str, fmt: str, outdir: Path) -> list[Path]:
    from nprof.export import EXPORTERS
    from nprof.export import export_profile as write_export

    if fmt not in download_formats():
        raise NprofError(f"format '{fmt}' is not available; formats: {', '.join(download_formats()) or 'none'}")
    profile = load_profile(store, profile_id)
    target = outdir / (EXPORTERS[fmt].default_output or f"{profile_id}.{fmt}")
    write_export(profile, fmt, target)
    produced = sorted(outdir.iterdir())
    if not produced:
        raise NprofError(f"the {fmt} exporter wrote nothing")
    return produced
