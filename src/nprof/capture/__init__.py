"""Capture backends, and `open_profile`: the one way to open any profile-like file.

Contract of `open_profile(path) -> Profile`:
* the kind of file is detected by its content, not only its extension:
  a ZIP container is an nprof profile (`Profile.load`, which also explains real
  AWS NTFF files and nprof programs); content starting with `{` or `[` (after
  optional whitespace / BOM), or a gzip stream, is JSON: a Chrome trace
  (torch.profiler / Kineto / generic) imported by `nprof.capture.chrome`, or a
  profile JSON (``neuron-profile view --output-format json`` output, or nprof's
  own ``json`` export) imported by `nprof.capture.profile_json`;
* other content in a file named ``*.json`` / ``*.gz`` / ``*.trace`` goes to the
  JSON importer too (which explains what is wrong with it), the rest to `Profile.load`;
* anything unreadable raises `NprofError` with one line naming the file and the problem.

Importing this package is cheap: torch and the JSON importer load on demand.
Backends live in sibling modules: `sim` (virtual device), `torch_run` (real
CPU/CUDA runs through torch.profiler), `chrome` (Chrome-trace import),
`profile_json` (profile JSON import).
"""

from __future__ import annotations

import os
from pathlib import Path

from nprof.container import is_zip, read_head
from nprof.profile import Profile

__all__ = ["open_profile", "sniff_kind"]

_GZIP_MAGIC = b"\x1f\x8b"


def sniff_kind(path: str | os.PathLike[str]) -> str:
    """Return "ntff", "json" or "json.gz" from the first bytes of `path` ("ntff" when unsure)."""
    p = Path(path)
    head = read_head(p, 64, "profile", " (use -d for a multi-worker capture directory)")
    if is_zip(head):
        return "ntff"
    if head.startswith(_GZIP_MAGIC):
        return "json.gz"
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if text[:1] in (b"{", b"["):
        return "json"
    if p.suffix.lower() in (".json", ".gz", ".trace"):
        return "json"  # named like a trace but not JSON: the importer says what is wrong
    return "ntff"


def open_profile(path: str | os.PathLike[str]) -> Profile:
    """Open an nprof profile (.ntff) or a Chrome-trace JSON (.json / .json.gz) as a Profile."""
    kind = sniff_kind(path)
    if kind == "ntff":
        return Profile.load(path)
    from nprof.capture.chrome import import_chrome_trace

    return import_chrome_trace(path)
