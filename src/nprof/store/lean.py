"""The Profile an ingest of a Profile file analyses: the columns the ingest reads only as sums, dropped.

Contract: `lean_profile(p)` returns a Profile with `p`'s info and rows whose instructions lack SUMMED_ONLY
(the memory-traffic columns: the analysis reads them only as column sums, `Facts.i_sum`, and as their
per-instruction total, `nprof.analysis.opcodes.instruction_bytes`; the event columns and the reverse
dependency index not at all), with those sums and that total preset (`nprof.analysis.facts.preset`)
and the kept columns' string codes carried (`nprof.profile.codes.carry`):
the analysis tables, summary and event columns of the lean profile are those of `p` (tests/store/test_lean.py
holds them to `p`'s on random profiles). The dropped columns are freed with `p`: 48 bytes per
instruction, 8 kept for the total.
`load_lean(path)` is `lean_profile(Profile.load(path, encoded=True))` without ever holding the dropped columns
whole: they are read one Parquet row group at a time into their sums and per-instruction total, checked as
the load checks them (`nprof.profile.model.load_reduced`; tests/store/test_lean.py holds its profile, presets
and refusals to the lean profile of the whole load's).
Only for an ingest whose raw tables are read back from the Profile file (`Store.ingest_file`):
`nprof.store.raw_parts.write_parts` reads a table that lacks columns whole from its source file.
"""

from __future__ import annotations

import os

from nprof.analysis.facts import facts, preset
from nprof.analysis.opcodes import instruction_bytes
from nprof.profile import Profile
from nprof.profile.codes import carry
from nprof.profile.model import load_reduced

SUMMED_ONLY = tuple(f"{m}_{w}_bytes" for m in ("hbm", "sbuf", "psum") for w in ("read", "write"))


def lean_profile(p: Profile) -> Profile:
    """`p` without its SUMMED_ONLY instruction columns, their sums preset (see module doc)."""
    f = facts(p)
    sums = {name: f.i_sum(name) for name in SUMMED_ONLY}
    once: dict[str, object] = {"instruction_bytes": instruction_bytes(p)}  # read by the opcodes pass, then freed
    ins = carry(p.instructions, p.instructions.drop_columns(list(SUMMED_ONLY)))
    lean = Profile(p.info, ins, p.dma, p.collectives, p.counters)
    preset(lean, sums, once)
    return lean


def load_lean(path: str | os.PathLike[str]) -> Profile:
    """The lean profile of the Profile file `path`, its SUMMED_ONLY columns never held whole (see module doc)."""
    lean, sums, total = load_reduced(path, SUMMED_ONLY)
    preset(lean, sums, {"instruction_bytes": total})
    return lean
