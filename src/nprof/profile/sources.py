"""Source files a profile points at, stored inside the profile so it opens with its code elsewhere.

Contract:
* `source_files(profile)` -> the distinct file parts of the `nki_source_location` values
  (`file.py:LINE` -> `file.py`) of its instructions and DMA transfers, sorted.
* `embed_sources(profile, roots)` -> the profile with `info.meta["source:<file>"] = <text>` for
  every such file found (as given if absolute, else `<root>/<file>` for each root in order; the
  first hit wins); at most MAX_FILES files of at most MAX_BYTES each (larger ones are skipped),
  undecodable files skipped. Nothing is invented: a file not found is simply absent (the viewer
  then says so, or reads it from `nprof view --nki-source-root DIR`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc

from nprof.profile.model import Profile

PREFIX = "source:"
MAX_FILES = 64
MAX_BYTES = 1 << 20


def split_location(loc: str) -> tuple[str, int | None]:
    """`file.py:12` -> ("file.py", 12); a value without a line number -> (value, None)."""
    name, _, line = loc.rpartition(":")
    return (name, int(line)) if name and line.isdigit() else (loc, None)


def source_files(profile: Profile) -> list[str]:
    """Distinct file names of the profile's source locations (see module doc)."""
    names: set[str] = set()
    for table in (profile.instructions, profile.dma):
        if table.num_rows:
            for v in pc.unique(table["nki_source_location"]).to_pylist():
                if v:
                    name, line = split_location(v)
                    if line is not None:
                        names.add(name)
    return sorted(names)


def first_readable(candidates: Iterable[Path]) -> str | None:
    """The UTF-8 text of the first candidate that is a readable file of at most MAX_BYTES, else None."""
    for p in candidates:
        try:
            if p.is_file() and p.stat().st_size <= MAX_BYTES:
                return p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return None


def _read(name: str, roots: Sequence[str | os.PathLike[str]]) -> str | None:
    return first_readable([Path(name)] if os.path.isabs(name) else [Path(r) / name for r in roots])


def embed_sources(profile: Profile, roots: Sequence[str | os.PathLike[str]]) -> Profile:
    """The profile with the text of each source file it references in its meta (see module doc)."""
    meta = dict(profile.info.meta)
    for name in source_files(profile)[:MAX_FILES]:
        text = _read(name, roots)
        if text is not None:
            meta[PREFIX + name] = text
    return replace(profile, info=replace(profile.info, meta=meta))
