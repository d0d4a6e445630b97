"""Find the per-rank profile files of a multi-worker capture directory.

Contract: `rank_files(dir) -> {rank: path}` sorted by rank, for every `profile_rank_<i>.ntff` in `dir`;
`NprofError` with one line when `dir` is not a directory or holds no rank files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nprof.errors import NprofError

RANK_FILE = re.compile(r"^profile_rank_(\d+)\.ntff$")


def rank_files(directory: str | os.PathLike[str]) -> dict[int, Path]:
    """Every `profile_rank_<i>.ntff` of `directory`, keyed and sorted by rank."""
    d = Path(directory).expanduser()
    if not d.is_dir():
        raise NprofError(f"{d}: not a directory; give the -s directory of a multi-worker capture")
    found = {int(m.group(1)): p for p in d.iterdir() if (m := RANK_FILE.match(p.name))}
    if not found:
        raise NprofError(f"{d}: no profile_rank_<i>.ntff files; capture with -r/--collectives-workers-per-node")
    return dict(sorted(found.items()))
