"""Notes shown with a profile wherever its figures are shown (summary-text, the viewer's title bar and Summary tab).

Contract: `assumed_figures_note(preset, meta)` is one line saying which figures of a profile simulated on a
preset with unpublished hardware figures (the manifest's `preset_assumptions`, e.g. trn3) rest on them, and
listing those figures; None when the profile records none (trn1/trn2, real hardware, Chrome traces). A system
profile (host rows plus simulated executions, `nprof.capture.system`) says its device rows rest on them.
"""

from __future__ import annotations

from collections.abc import Mapping

ASSUMED_HEADLINE = "Assumed hardware figures"


def assumed_figures_note(preset: str | None, meta: Mapping[str, str]) -> str | None:
    """One line: which figures rest on the preset's assumed ones, then the manifest's list of them; None without."""
    listed = (meta.get("preset_assumptions") or "").strip()
    if not listed:
        return None
    if meta.get("system") == "1":  # a system (host) profile: only its device rows are simulated
        preset = meta.get("system.device_preset") or preset
        core = f"the {preset} preset" if preset else "a preset"
        return (
            f"{ASSUMED_HEADLINE}: the device rows (nc_exec_running on nc:0) last simulated times on {core}, which "
            f"rest partly on figures AWS does not publish; host rows, copies and counts are measured. {listed}"
        )
    core = f"the {preset} preset" if preset else "this preset"
    return (
        f"{ASSUMED_HEADLINE}: simulated times on {core} (and the percentages, MFU/HFU/MBU and bound verdict "
        f"computed from them) rest partly on figures AWS does not publish; event, FLOP and byte counts and the "
        f"peaks do not. {listed}"
    )
