"""FastAPI application factory: the JSON API, the viewer page and its static files.

Contract: `create_app(store) -> FastAPI`.
* `/api/...`: the JSON API of docs/api.md (see `nprof.web.api`); OpenAPI at `/docs`.
* Errors are always JSON {"error": "<one line>"}: NotFound -> 404, any other
  NprofError or invalid parameter/body -> 422 (the reason names the parameter).
* HTML: `/` (profile list), `/profile/<id>`, `/profile_cc/<group id>` serve
  `static/index.html` (the page reads the path); an unknown id gets a 404 page
  linking to the list. `/static/...` serves the page's assets.
* Every request passes `nprof.web.guard.HostGuard`: Host must name this server
  (loopback names, IP literals, `hosts`) else 421; state-changing requests from a
  foreign origin get 403 (DNS rebinding / CSRF; the viewer has no login).
"""

from __future__ import annotations

import html
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from nprof import __version__
from nprof.errors import NprofError
from nprof.store import NotFound, Store
from nprof.web.api import JSON, api_router
from nprof.web.guard import HostGuard

STATIC = Path(__file__).parent / "static"

_NOT_FOUND = """<!doctype html><html><head><meta charset="utf-8"><title>nprof: not found</title></head>
<body style="font-family:sans-serif"><h1>Not found</h1><p>{message}</p>
<p><a href="/">All profiles</a></p></body></html>"""


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "path", "body")]
        where = ".".join(loc) or "request"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "invalid parameter " + "; ".join(parts)


def _page(request: Request) -> Response:
    """The viewer page (index.html ships inside the package)."""
    return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"), headers={"Cache-Control": "no-cache"})


def _page_if_found(request: Request, lookup: Callable[[str], object], key: str) -> Response:
    """The viewer page when `lookup(key)` finds the profile/group, else the 404 page linking to the list."""
    try:
        lookup(key)
    except NprofError as exc:
        return _not_found_page(str(exc))
    return _page(request)


def _not_found_page(message: str) -> HTMLResponse:
    return HTMLResponse(_NOT_FOUND.format(message=html.escape(message)), status_code=404)


_ERROR = {
    "content": {
        "application/json": {
            "schema": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
        }
    }
}
_ERRORS = {
    "404": "No such profile, group, event, table or marker",
    "422": "Invalid parameter or body, or a request the data refuses (one-line reason)",
    "421": "The Host header names another server (DNS rebinding guard)",
    "403": "A change requested from another origin (cross-site guard)",
}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI schema with JSON objects (not strings) as answers and the error answers documented:
    {"error": "<one line>"} for 404, 422, and the guard's 421/403."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for ops in schema.get("paths", {}).values():
            for method, op in ops.items():
                for answer in op.get("responses", {}).values():
                    content = answer.get("content", {}).get("application/json")
                    if content and content.get("schema") == {"type": "string"}:
                        content["schema"] = {"type": "object"}
                for code, text in _ERRORS.items():
                    if code == "403" and method == "get":
                        continue
                    op.setdefault("responses", {})[code] = {"description": text, **_ERROR}
        schema.get("components", {}).get("schemas", {}).pop("HTTPValidationError", None)
        schema.get("components", {}).get("schemas", {}).pop("ValidationError", None)
        app.openapi_schema = schema
    return app.openapi_schema


def _start_reaper(store: Store, every: float = 30.0) -> None:
    """Close idle DuckDB connections in the background (a server may sit idle for hours)."""
    ref = weakref.ref(store)

    def loop() -> None:
        while True:
            time.sleep(every)
            s = ref()
            if s is None:
                return
            s.close_idle()
            del s

    threading.Thread(target=loop, name="nprof-store-reaper", daemon=True).start()


def create_app(store: Store, *, hosts: Iterable[str] = (), source_root: str | None = None) -> FastAPI:
    """The nprof web application over `store` (see module doc); `hosts`: extra Host names served;
    `source_root`: where the source view reads kernel files (`--nki-source-root`)."""
    app = FastAPI(
        title="nprof viewer API",
        version=__version__,
        description="JSON API of the nprof profile viewer (docs/api.md).",
        default_response_class=JSON,
    )
    app.state.store = store
    app.add_middleware(HostGuard, names=tuple(hosts))

    @app.exception_handler(NotFound)
    def _not_found(request: Request, exc: NotFound) -> Response:
        return JSON({"error": str(exc)}, status_code=404)

    @app.exception_handler(NprofError)
    def _bad_request(request: Request, exc: NprofError) -> Response:
        return JSON({"error": str(exc)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return JSON({"error": _validation_message(exc)}, status_code=422)

    @app.exception_handler(Exception)
    def _internal(request: Request, exc: Exception) -> Response:
        first = (str(exc).splitlines() or [""])[0].replace(str(store.dir), "<store>")[:200]
        if isinstance(exc, duckdb.Error):
            reason = f"the profile's database failed ({type(exc).__name__}); re-ingest it with nprof view --force"
            return JSON({"error": reason}, status_code=500)
        return JSON({"error": f"internal error ({type(exc).__name__}: {first}); please report it"}, status_code=500)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404 and not request.url.path.startswith("/api"):
            return _not_found_page(f"No page at {request.url.path}.")
        return JSON({"error": str(exc.detail)}, status_code=exc.status_code)

    from nprof.web.group_api import group_router  # multi-worker aggregated view (before the API's catch-all)

    app.include_router(group_router(store))
    app.include_router(api_router(store, source_root))

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> Response:
        return _page(request)

    @app.get("/profile/{profile_id}", include_in_schema=False)
    def profile_page(request: Request, profile_id: str) -> Response:
        return _page_if_found(request, store.entry, profile_id)

    @app.get("/profile_cc/{group_id}", include_in_schema=False)
    def group_page(request: Request, group_id: str) -> Response:
        return _page_if_found(request, store.group, group_id)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    _start_reaper(store)
    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
