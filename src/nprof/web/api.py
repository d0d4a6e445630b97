"""The JSON API under /api (docs/api.md is its contract; keep the two in step).

Contract: `api_router(store, source_root=None)` returns a FastAPI APIRouter whose routes only call
`nprof.store` functions; every route is a plain `def` (FastAPI runs it in its
thread pool, each with its own DuckDB cursor). Errors are raised as NprofError /
NotFound and turned into {"error": ...} with 422 / 404 by `nprof.web.app`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import Response

from nprof.errors import NprofError
from nprof.store import (
    Annotations,
    NotFound,
    Store,
    box_select,
    check_id,
    event_details,
    profile_answer,
    public_entry,
    rows_answer,
    search,
    summary_answer,
    table_answer,
    viewport,
)
from nprof.store.boxes import boxes
from nprof.store.explore import operators, roofline, tensors
from nprof.store.memory import memory_answer
from nprof.store.source import source_answer
from nprof.store.system_links import links
from nprof.web.download import download_formats, download_response

RESERVED_SEARCH = {"t0", "t1", "limit", "width"}


class JSON(Response):
    """JSON rendered by orjson (fast for the large columnar viewport answers; no pydantic pass)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def _j(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a route's dict result in `JSON` (status from the route decorator)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return JSON(fn(*args, **kwargs))

    return wrapper


def _rows_param(rows: str | None) -> list[str] | None:
    if rows is None or not rows.strip():
        return None
    return [r.strip() for r in rows.split(",") if r.strip()]


def api_router(store: Store, source_root: str | None = None) -> APIRouter:
    """The whole /api: one router per resource, then a catch-all that answers 404 for unknown routes."""
    r = APIRouter(prefix="/api", default_response_class=JSON)
    r.include_router(_profiles_router(store))
    r.include_router(_timeline_router(store))
    r.include_router(_views_router(store, source_root))
    r.include_router(_markers_router(Annotations(store)))
    r.include_router(_downloads_router(store))

    @r.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    def unknown(path: str) -> dict[str, Any]:
        raise NotFound(f"no API route /api/{path}; see /docs")

    return r


def _profiles_router(store: Store) -> APIRouter:
    """Profiles: list, manifest, links, rename, delete, summary, analysis tables."""
    r = APIRouter(default_response_class=JSON)

    @r.get("/profiles", summary="All stored profiles, newest first")
    @_j
    def list_profiles() -> dict[str, Any]:
        return {"profiles": [public_entry(e) for e in store.list()]}

    @r.get("/profiles/{profile_id}", summary="Manifest, program info and analysis table names")
    @_j
    def get_profile(profile_id: str) -> dict[str, Any]:
        entry = store.entry(profile_id)
        with store.session(profile_id) as (_cur, meta):
            return profile_answer(entry, meta)

    @r.get("/profiles/{profile_id}/links", summary="System profile <-> device profiles of its executions")
    def get_links(profile_id: str) -> dict[str, Any]:
        store.entry(profile_id)
        with store.session(profile_id) as (_cur, meta):
            return links(store, profile_id, meta["manifest"])

    @r.patch("/profiles/{profile_id}", summary="Rename (display name)")
    @_j
    def rename_profile(profile_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        name = body.get("display_name")
        if not isinstance(name, str):
            raise NprofError('body must be {"display_name": "..."}')
        return public_entry(store.rename(profile_id, name))

    @r.delete("/profiles/{profile_id}", summary="Delete a profile and its annotations")
    @_j
    def delete_profile(profile_id: str) -> dict[str, Any]:
        store.delete(profile_id)
        return {"deleted": profile_id}

    @r.get("/profiles/{profile_id}/summary", summary="Summary metrics, grouped, and the memory/compute verdict")
    @_j
    def get_summary(profile_id: str, flat: bool = False) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return summary_answer(cur, meta, flat)

    @r.get("/profiles/{profile_id}/tables/{name}", summary="One analysis table")
    @_j
    def get_table(
        profile_id: str, name: str, offset: int = Query(0, ge=0), limit: int = Query(1000, ge=1, le=100_000)
    ) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return table_answer(cur, meta, name, offset, limit)

    return r


def _timeline_router(store: Store) -> APIRouter:
    """The timeline: rows, viewport, boxes (the views, events, search and selection follow)."""
    r = APIRouter(default_response_class=JSON)

    @r.get("/profiles/{profile_id}/rows", summary="Timeline rows in display order")
    @_j
    def get_rows(profile_id: str) -> dict[str, Any]:
        with store.session(profile_id) as (_cur, meta):
            return rows_answer(meta)

    @r.get("/profiles/{profile_id}/viewport", summary="Drawable items per row for a time window")
    @_j
    def get_viewport(
        profile_id: str,
        t0: int = Query(..., ge=0),
        t1: int = Query(..., gt=0),
        width: int = Query(..., ge=1, le=8192),
        rows: str | None = None,
        max_items: int = Query(2000, ge=1, le=5000),
        color: str | None = None,
    ) -> dict[str, Any]:
        if color not in (None, "", "opcode", "layer", "engine", "queue"):
            raise NprofError(f"unknown color '{color}'; use opcode, layer, engine or queue")
        with store.session(profile_id) as (cur, meta):
            return viewport(cur, meta, t0, t1, width, _rows_param(rows), max_items, color)

    @r.get("/profiles/{profile_id}/boxes", summary="Warning and collective-op boxes of a time window")
    @_j
    def get_boxes(
        profile_id: str, t0: int = Query(..., ge=0), t1: int = Query(..., gt=0), limit: int = Query(60, ge=1, le=500)
    ) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return boxes(cur, meta, t0, t1, limit)

    return r


def _views_router(store: Store, source_root: str | None) -> APIRouter:
    """The views of one profile: operators, tensors, source, memory, roofline, one event, search, select."""
    r = APIRouter(default_response_class=JSON)

    @r.get("/profiles/{profile_id}/operators", summary="Operator hierarchy: layer -> op -> instruction aggregates")
    @_j
    def get_operators(profile_id: str) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return operators(cur, meta)

    @r.get("/profiles/{profile_id}/tensors", summary="Every tensor with its DMA transfers")
    @_j
    def get_tensors(profile_id: str) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return tensors(cur, meta)

    @r.get("/profiles/{profile_id}/source", summary="Source files with per-line instruction counts and time")
    @_j
    def get_source(profile_id: str) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return source_answer(cur, meta, source_root)

    @r.get("/profiles/{profile_id}/memory", summary="SBUF/PSUM tile allocations over time, peak, fragmentation")
    @_j
    def get_memory(profile_id: str) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return memory_answer(cur, meta)

    @r.get("/profiles/{profile_id}/roofline", summary="Run and layers as roofline points")
    @_j
    def get_roofline(profile_id: str) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return roofline(cur, meta)

    @r.get("/profiles/{profile_id}/events/{event_id}", summary="Every column of one event, grouped")
    @_j
    def get_event(profile_id: str, event_id: int) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return event_details(cur, event_id, (meta.get("manifest") or {}).get("device"))

    @r.get("/profiles/{profile_id}/search", summary="Search events: FIELD=VALUE pairs (ANDed), /regex/ values")
    @_j
    def get_search(
        request: Request,
        profile_id: str,
        t0: int | None = Query(None, ge=0),
        t1: int | None = Query(None, gt=0),
        limit: int = Query(1000, ge=1, le=20_000),
        width: int | None = Query(None, ge=1, le=8192),
    ) -> dict[str, Any]:
        terms: dict[str, str] = {}
        for key, value in request.query_params.multi_items():
            if key in RESERVED_SEARCH:
                continue
            if key in terms:
                raise NprofError(f"search field '{key}' given twice; use one /regex/ with alternatives (a|b)")
            terms[key] = value
        with store.session(profile_id) as (cur, _meta):
            return search(cur, terms, t0, t1, limit, width)

    @r.get("/profiles/{profile_id}/select", summary="Box-select aggregates over rows and a time window")
    @_j
    def get_select(
        profile_id: str, t0: int = Query(..., ge=0), t1: int = Query(..., gt=0), rows: str | None = None
    ) -> dict[str, Any]:
        with store.session(profile_id) as (cur, meta):
            return box_select(cur, meta, t0, t1, _rows_param(rows))

    return r


def _markers_router(notes: Annotations) -> APIRouter:
    """Annotations: markers and named marker sets."""
    r = APIRouter(default_response_class=JSON)

    @r.get("/profiles/{profile_id}/markers", summary="Markers, sorted by time")
    @_j
    def list_markers(profile_id: str) -> dict[str, Any]:
        return {"markers": notes.markers(profile_id)}

    @r.post("/profiles/{profile_id}/markers", status_code=201, summary="Drop a marker", response_model=None)
    def add_marker(profile_id: str, body: dict[str, Any] = Body(...)) -> Response:  # noqa: B008
        if "ts" not in body:
            raise NprofError('body must be {"ts": <ns>, "label": "..."}')
        return JSON(notes.add(profile_id, body["ts"], body.get("label")), status_code=201)

    @r.patch("/profiles/{profile_id}/markers/{marker_id}", summary="Rename or move a marker")
    @_j
    def update_marker(profile_id: str, marker_id: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        if "ts" not in body and "label" not in body:
            raise NprofError('body must give "label" and/or "ts"')
        return notes.update(profile_id, marker_id, body.get("ts"), body.get("label"))

    @r.delete("/profiles/{profile_id}/markers/{marker_id}", summary="Delete a marker")
    @_j
    def delete_marker(profile_id: str, marker_id: str) -> dict[str, Any]:
        notes.remove(profile_id, marker_id)
        return {"deleted": marker_id}

    @r.delete("/profiles/{profile_id}/markers", summary="Delete every marker")
    @_j
    def clear_markers(profile_id: str) -> dict[str, Any]:
        return {"deleted": notes.clear(profile_id)}

    @r.get("/profiles/{profile_id}/marker-sets", summary="Named marker sets")
    @_j
    def list_sets(profile_id: str) -> dict[str, Any]:
        return {"sets": notes.sets(profile_id)}

    @r.put("/profiles/{profile_id}/marker-sets/{name}", summary="Save the current markers as a named set")
    @_j
    def save_set(profile_id: str, name: str) -> dict[str, Any]:
        return notes.save_set(profile_id, name)

    @r.get("/profiles/{profile_id}/marker-sets/{name}", summary="One named marker set")
    @_j
    def get_set(profile_id: str, name: str) -> dict[str, Any]:
        return notes.get_set(profile_id, name)

    @r.post("/profiles/{profile_id}/marker-sets/{name}/load", summary="Replace the markers by a saved set")
    @_j
    def load_set(profile_id: str, name: str) -> dict[str, Any]:
        return {"markers": notes.load_set(profile_id, name)}

    @r.delete("/profiles/{profile_id}/marker-sets/{name}", summary="Delete a named marker set")
    @_j
    def delete_set(profile_id: str, name: str) -> dict[str, Any]:
        notes.delete_set(profile_id, name)
        return {"deleted": name}

    return r


def _downloads_router(store: Store) -> APIRouter:
    """Download formats, one profile's download, a multi-worker group's ranks."""
    r = APIRouter(default_response_class=JSON)

    @r.get("/formats", summary="Download formats available")
    @_j
    def formats() -> dict[str, Any]:
        return {"formats": download_formats()}

    @r.get("/profiles/{profile_id}/download", summary="Download the profile in another format", response_model=None)
    def download(profile_id: str, format: str = Query(...)) -> Response:
        return download_response(store, profile_id, format)  # streamed from a temporary file

    @r.get("/groups/{group_id}", summary="A multi-worker group: its ranks (each says whether it is ingested)")
    @_j
    def get_group(group_id: str) -> dict[str, Any]:
        check_id(group_id, "group id")
        g = store.group(group_id)
        stored = store.catalog.profiles()
        return {**g, "ranks": [{**x, "ingested": x["profile_id"] in stored} for x in g["ranks"]]}

    return r
