"""File outputs of `nprof view --output-format F`: a registry of exporters plus the CLI entry point.

Contract:
* `EXPORTERS`: format name -> `Exporter` (summary-text, summary-json, json,
  parquet, csv, perfetto); adding a format touches its module and this dict.
* `export_profile(profile, fmt, output=None, options=..., stdout=None) -> Path | None`
  writes atomically (temp file/dir then rename; nothing left on error). With
  no `output`, summary formats return None after writing to `stdout` (a text
  stream the caller gives: library code never prints), others use their default
  name in the current directory. `export_text(profile, fmt, options)` is a summary
  format's text.
* `export_from_args(args) -> Outcome`: `nprof view -s PROFILE [-n PROGRAM]
  --output-format F [--output-file PATH] [--show-perfetto-flows]`; the text of a
  summary format without --output-file is the outcome's stdout. With `-d DIR`
  (a multi-worker capture) it hands over to `nprof.export.group_export`.
* `terminology_text() -> str`: the table of terms (`--terminology`).
Unknown formats and unwritable paths raise `NprofError` with one line.
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from nprof.analysis.thresholds import DEFAULT_THRESHOLDS, SUMMARY_THRESHOLDS, Thresholds
from nprof.atomic import atomic_dir, atomic_file
from nprof.errors import NprofError
from nprof.export import csv_export, json_export, parquet_export, perfetto_export, summary_json, summary_text
from nprof.export.options import ExportOptions
from nprof.export.terminology import terminology_text
from nprof.outcome import Outcome
from nprof.profile import Profile


@dataclass(frozen=True)
class Exporter:
    """One output format: `write(profile, out, options)` gets a binary file, or a directory when `directory`."""

    name: str
    write: Callable[[Profile, Any, ExportOptions], None]
    default_output: str | None  # None: standard output when no --output-file is given
    directory: bool = False
    description: str = ""
    findings: bool = False  # reports the findings and analysis tables (so every `--threshold` applies to it)
    summary: bool = False  # reports the summary's `bound` (so the SUMMARY_THRESHOLDS apply to it)


EXPORTERS: dict[str, Exporter] = {
    "summary-text": Exporter(
        "summary-text", summary_text.write, None, description="summary metrics as a text table", findings=True
    ),
    "summary-json": Exporter(
        "summary-json", summary_json.write, None, description="summary metrics as JSON", summary=True
    ),
    "json": Exporter(
        "json", json_export.write, "ntff.json", description="summary and every event as JSON", findings=True
    ),
    "parquet": Exporter(
        "parquet",
        parquet_export.write,
        "ntff_parquet",
        directory=True,
        description="directory of Parquet tables",
        findings=True,
    ),
    "csv": Exporter(
        "csv", csv_export.write, "ntff_csv", directory=True, description="directory of CSV tables", findings=True
    ),
    "perfetto": Exporter("perfetto", perfetto_export.write, "ntff.pftrace", description="Perfetto trace"),
}


def get_exporter(fmt: str) -> Exporter:
    """The exporter of `fmt`; NprofError listing the valid formats otherwise."""
    if fmt not in EXPORTERS:
        valid = ", ".join(["db", *EXPORTERS])
        raise NprofError(f"unknown --output-format '{fmt}'; use one of: {valid}")
    return EXPORTERS[fmt]


def export_profile(
    profile: Profile,
    fmt: str,
    output: str | os.PathLike[str] | None = None,
    options: ExportOptions | None = None,
    stdout: TextIO | None = None,
) -> Path | None:
    """Write `profile` in format `fmt` (see module doc); returns the path written, None for `stdout`."""
    exporter = get_exporter(fmt)
    options = options or ExportOptions()
    name = output if output is not None else exporter.default_output
    if name is None:
        if stdout is None:
            raise TypeError(f"export_profile: format {fmt} without output= needs stdout= (a text stream)")
        stdout.write(export_text(profile, fmt, options))
        return None
    target = Path(name)
    if exporter.directory:
        with atomic_dir(target) as tmp:
            exporter.write(profile, tmp, options)
    else:
        with atomic_file(target) as fh:
            exporter.write(profile, fh, options)
    return target


def export_text(profile: Profile, fmt: str, options: ExportOptions | None = None) -> str:
    """The text of `profile` in the summary format `fmt` (NprofError for a file format)."""
    exporter = get_exporter(fmt)
    if exporter.default_output is not None:
        raise NprofError(f"--output-format {fmt} writes a file, not text; give --output-file")
    buf = io.BytesIO()
    exporter.write(profile, buf, options or ExportOptions())
    return buf.getvalue().decode()


def _open(path: str) -> Profile:
    from nprof.capture import open_profile

    return open_profile(path)


def check_thresholds(thresholds: Thresholds, fmt: str) -> None:
    """Refuse tuned `--threshold`s that format `fmt` would ignore: any with a format reporting neither
    findings nor the summary, those other than SUMMARY_THRESHOLDS with one reporting only the summary."""
    exporter = EXPORTERS.get(fmt)
    applies = set(thresholds.changed()) if exporter and exporter.findings else set()
    applies |= SUMMARY_THRESHOLDS if exporter and exporter.summary else set()
    ignored = [name for name in thresholds.changed() if name not in applies]
    if ignored:
        with_findings = ", ".join(name for name, e in EXPORTERS.items() if e.findings)
        raise NprofError(
            f"--threshold {', '.join(ignored)} sets when findings are reported, and --output-format {fmt} "
            f"has none; use {with_findings} or the viewer"
        )


def export_from_args(args: argparse.Namespace) -> Outcome:
    """`nprof view ... --output-format F`: open the profile, export it; the text for stdout (summary
    formats without --output-file) or the line naming the file written."""
    thresholds = getattr(args, "thresholds", None) or DEFAULT_THRESHOLDS
    if getattr(args, "directory", None) and not args.profile:  # a multi-worker capture: nprof.export.group_export
        from nprof.export.group_export import export_group_from_args

        check_thresholds(thresholds, f"{args.output_format} with -d")
        return export_group_from_args(args)
    exporter = get_exporter(args.output_format)
    check_thresholds(thresholds, exporter.name)
    if not args.profile:
        raise NprofError("missing -s PROFILE: the profile file to export")
    program = getattr(args, "program", None)
    if program:  # optional: validated, and checked against the profile where it records its program
        from nprof.capture.program_match import check_program

        check_program(program, args.profile)
    profile = _open(args.profile)
    options = ExportOptions(show_flows=bool(getattr(args, "show_perfetto_flows", False)), thresholds=thresholds)
    if args.output_file is None and exporter.default_output is None:
        return Outcome(export_text(profile, exporter.name, options))
    written = export_profile(profile, exporter.name, args.output_file, options)
    return Outcome(notes=(f"nprof view: wrote {written}",))


__all__ = [
    "EXPORTERS",
    "ExportOptions",
    "Exporter",
    "export_from_args",
    "export_profile",
    "export_text",
    "terminology_text",
]
