"""Links between a system profile and the device profiles of its graph executions, in the store.

Contract:
* `device_profile_id(system_id, file_name)`: the store id of a device profile saved beside a system
  profile (`<system id>.<module>_exec<k>`, its file name without `.ntff`).
* `ingest_device_profiles(store, system_id, system_path, force=False) -> dict[hlo_name, id]`: when the
  stored profile `system_id` is a system profile (manifest meta `system` == "1") whose device profiles
  are in `<system_path>.devices/`, ingest each one listed in `system.device_profiles` (one already stored
  from the same unchanged file is reused) and return hlo_name (`module#k`) -> device profile id.
* `links(store, profile_id, manifest) -> dict`: `{"device_profiles": [{hlo_name, profile_id}] (the
  executions of a system profile whose device profile is stored), "system": {profile_id, hlo_name} or
  null (for a device profile: the system profile it belongs to)}`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from nprof.errors import NprofError
from nprof.store.store import Store, file_fingerprint

if TYPE_CHECKING:
    from nprof.analysis.thresholds import Thresholds

_DEVICE_ID = re.compile(r"^(?P<system>.+)\.(?P<module>[A-Za-z0-9_-]+)_exec(?P<k>\d+)$")


def device_profile_id(system_id: str, file_name: str) -> str:
    """`<system id>.<file name without .ntff>`."""
    return f"{system_id}.{Path(file_name).stem}"


def _listing(meta: dict[str, Any]) -> dict[str, str]:
    """hlo_name -> device profile file, from a system profile's manifest meta ({} for other profiles)."""
    if meta.get("system") != "1":
        return {}
    try:
        data = orjson.loads(meta.get("system.device_profiles", "{}"))
    except orjson.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def ingest_device_profiles(
    store: Store,
    system_id: str,
    system_path: str | os.PathLike[str],
    force: bool = False,
    thresholds: Thresholds | None = None,
) -> dict[str, str]:
    """Ingest the device profiles of the stored system profile `system_id` (see module doc), their findings
    by `thresholds` (None: the defaults)."""
    with store.session(system_id) as (_cur, meta):
        listing = _listing(meta["manifest"].get("meta") or {})
    folder = Path(system_path).with_name(f"{Path(system_path).name}.devices")
    out = {}
    for hlo_name, file_name in listing.items():
        path = folder / file_name
        if not path.is_file():
            raise NprofError(f"{path}: device profile of {hlo_name} is missing; keep {folder.name}/ beside the profile")
        device_id = device_profile_id(system_id, file_name)
        if not force and _stored_from(store, device_id, path, thresholds):
            out[hlo_name] = device_id  # already ingested from this very file: reuse it
            continue
        entry, _ = store.ingest_file(
            path, profile_id=device_id, display_name=hlo_name, force=force, thresholds=thresholds
        )
        out[hlo_name] = entry["id"]
    return out


def _stored_from(store: Store, profile_id: str, path: Path, thresholds: Thresholds | None) -> bool:
    """True when `profile_id` is stored and was ingested from `path` as it is now (same size and mtime)
    with the same thresholds."""
    entry = store.catalog.get(profile_id)
    return entry is not None and entry.get("fingerprint") == file_fingerprint(path, thresholds)


def links(store: Store, profile_id: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """The system/device links of a stored profile (see module doc)."""
    stored = {e["id"] for e in store.list()}
    listing = _listing(manifest.get("meta") or {})
    devices = [
        {"hlo_name": hlo, "profile_id": device_profile_id(profile_id, f)}
        for hlo, f in sorted(listing.items())
        if device_profile_id(profile_id, f) in stored
    ]
    system = None
    m = _DEVICE_ID.match(profile_id)
    if m and m["system"] in stored:
        system = {"profile_id": m["system"], "hlo_name": f"{m['module']}#{m['k']}"}
    return {"device_profiles": devices, "system": system}
