"""Markers and named marker sets of a profile, stored durably in the store.

Contract: `Annotations(store)` keeps one JSON document per profile at
`<store>/annotations/<id>.json`: {"next": n, "markers": [{id, ts, label}], "sets":
{name: {"saved": iso, "markers": [...]}}}. Every change is a read-modify-write
under the store lock with an atomic rename, so markers survive restarts, crashes
and several servers on one store. Marker ids are "m<n>", never reused. Unknown
markers / sets raise `NotFound`; bad values raise NprofError.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nprof.errors import NprofError
from nprof.profile.validate import MAX_TS
from nprof.store.catalog import locked, read_json, write_json
from nprof.store.store import NotFound, Store

SET_NAME = re.compile(r"[A-Za-z0-9._ -]{1,64}")
MAX_LABEL = 500


def _label(label: Any) -> str:
    if label is None:
        return ""
    if not isinstance(label, str) or len(label) > MAX_LABEL:
        raise NprofError(f"marker label must be a string of at most {MAX_LABEL} characters")
    return label.replace("\n", " ")


def _ts(ts: Any) -> int:
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= MAX_TS:
        raise NprofError(f"marker ts must be a whole number of nanoseconds in [0, {MAX_TS}]")
    return ts


def _set_name(name: str) -> str:
    if not SET_NAME.fullmatch(name) or name.strip() != name:
        raise NprofError(f"invalid marker set name {name!r}: 1-64 characters from A-Z a-z 0-9 . _ - and space")
    return name


class Annotations:
    """See module doc."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _path(self, profile_id: str) -> Path:
        self.store.entry(profile_id)
        return self.store.dir / "annotations" / f"{profile_id}.json"

    def _doc(self, path: Path) -> dict[str, Any]:
        doc = read_json(path, {})
        doc.setdefault("next", 1)
        doc.setdefault("markers", [])
        doc.setdefault("sets", {})
        return doc

    def _change(self, profile_id: str, fn: Callable[[dict[str, Any]], Any]) -> Any:
        path = self._path(profile_id)
        with locked(self.store.dir):
            doc = self._doc(path)
            result = fn(doc)
            doc["markers"].sort(key=lambda m: (m["ts"], m["id"]))
            write_json(path, doc)
            return result

    # ---- markers -------------------------------------------------------------------------
    def markers(self, profile_id: str) -> list[dict[str, Any]]:
        return sorted(self._doc(self._path(profile_id))["markers"], key=lambda m: (m["ts"], m["id"]))

    def add(self, profile_id: str, ts: Any, label: Any = None) -> dict[str, Any]:
        marker = {"id": "", "ts": _ts(ts), "label": _label(label)}

        def fn(doc: dict[str, Any]) -> dict[str, Any]:
            marker["id"] = f"m{doc['next']}"
            doc["next"] += 1
            doc["markers"].append(marker)
            return marker

        return self._change(profile_id, fn)

    def update(self, profile_id: str, marker_id: str, ts: Any = None, label: Any = None) -> dict[str, Any]:
        new_ts = None if ts is None else _ts(ts)
        new_label = None if label is None else _label(label)

        def fn(doc: dict[str, Any]) -> dict[str, Any]:
            for m in doc["markers"]:
                if m["id"] == marker_id:
                    if new_ts is not None:
                        m["ts"] = new_ts
                    if new_label is not None:
                        m["label"] = new_label
                    return dict(m)
            raise NotFound(f'no marker "{marker_id}" on profile "{profile_id}"')

        return self._change(profile_id, fn)

    def remove(self, profile_id: str, marker_id: str) -> None:
        def fn(doc: dict[str, Any]) -> None:
            kept = [m for m in doc["markers"] if m["id"] != marker_id]
            if len(kept) == len(doc["markers"]):
                raise NotFound(f'no marker "{marker_id}" on profile "{profile_id}"')
            doc["markers"] = kept

        self._change(profile_id, fn)

    def clear(self, profile_id: str) -> int:
        def fn(doc: dict[str, Any]) -> int:
            n = len(doc["markers"])
            doc["markers"] = []
            return n

        return self._change(profile_id, fn)

    # ---- named sets ----------------------------------------------------------------------
    def sets(self, profile_id: str) -> list[dict[str, Any]]:
        doc = self._doc(self._path(profile_id))
        return [{"name": k, "count": len(v["markers"]), "saved": v["saved"]} for k, v in sorted(doc["sets"].items())]

    def save_set(self, profile_id: str, name: str) -> dict[str, Any]:
        _set_name(name)

        def fn(doc: dict[str, Any]) -> dict[str, Any]:
            saved = datetime.now(UTC).isoformat(timespec="seconds")
            doc["sets"][name] = {"saved": saved, "markers": [dict(m) for m in doc["markers"]]}
            return {"name": name, "count": len(doc["markers"]), "saved": saved}

        return self._change(profile_id, fn)

    def get_set(self, profile_id: str, name: str) -> dict[str, Any]:
        _set_name(name)
        doc = self._doc(self._path(profile_id))
        if name not in doc["sets"]:
            raise NotFound(f'no marker set "{name}" on profile "{profile_id}"')
        return {"name": name, "saved": doc["sets"][name]["saved"], "markers": doc["sets"][name]["markers"]}

    def load_set(self, profile_id: str, name: str) -> list[dict[str, Any]]:
        _set_name(name)

        def fn(doc: dict[str, Any]) -> list[dict[str, Any]]:
            if name not in doc["sets"]:
                raise NotFound(f'no marker set "{name}" on profile "{profile_id}"')
            doc["markers"] = [dict(m) for m in doc["sets"][name]["markers"]]
            nums = [int(m["id"][1:]) for m in doc["markers"] if m["id"][1:].isdigit()]
            doc["next"] = max([doc["next"], *(n + 1 for n in nums)])
            return sorted(doc["markers"], key=lambda m: (m["ts"], m["id"]))

        return self._change(profile_id, fn)

    def delete_set(self, profile_id: str, name: str) -> None:
        _set_name(name)

        def fn(doc: dict[str, Any]) -> None:
            if doc["sets"].pop(name, None) is None:
                raise NotFound(f'no marker set "{name}" on profile "{profile_id}"')

        self._change(profile_id, fn)
