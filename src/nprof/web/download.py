"""Downloads: a stored profile written in another format through the exporters registry.

Contract: `download_formats()` lists the formats the page may offer (those of
`nprof.export.EXPORTERS` among json, perfetto, parquet, csv). `load_profile(store,
id)` rebuilds the `Profile` from the store's raw tables and manifest (the source
file may have moved since ingest). `export_profile(store, id, fmt, outdir)` runs the
exporter into `outdir` and returns the files or directories it produced.
`download_response(store, id, fmt)` streams the download from a temporary directory
(one file as is, several zipped into a file there) and removes it once sent: the server
never holds the export in memory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import orjson
import pyarrow as pa
from starlette.background import BackgroundTask
from starlette.responses import FileResponse

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
            t = cur.sql(f"SELECT * FROM {name}").to_arrow_table()
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


def download_response(store: Store, profile_id: str, fmt: str) -> FileResponse:
    """The export of `profile_id` in `fmt` as a streamed file response (see module doc)."""
    if fmt not in download_formats():
        raise NprofError(f"unknown format '{fmt}'; formats: {', '.join(download_formats())}")
    store.entry(profile_id)
    tmp = Path(tempfile.mkdtemp(prefix="nprof-dl-"))
    try:
        out = tmp / "out"
        out.mkdir()
        files = export_profile(store, profile_id, fmt, out)
        if len(files) == 1 and files[0].is_file():
            path, filename = files[0], f"{profile_id}{_suffix(files[0])}"
        else:
            path, filename = tmp / "download.zip", f"{profile_id}.{fmt}.zip"
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
                for f in files:
                    for p in sorted(f.rglob("*")) if f.is_dir() else [f]:
                        if p.is_file():
                            zf.write(p, os.path.relpath(p, out))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=filename,
        background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True),
    )


def _suffix(path: Path) -> str:
    name = path.name
    return name[name.index(".") :] if "." in name else ""
