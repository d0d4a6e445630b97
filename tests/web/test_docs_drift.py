"""docs/api.md and the server agree: every documented route exists, every served route is documented.

Routes are compared as (METHOD, path) with every path parameter written `{}` and the
query string dropped, so `GET /api/profiles/{id}/rows?x=` in the docs matches the
route `/api/profiles/{profile_id}/rows`.
"""

from __future__ import annotations

import re
from pathlib import Path

from nprof.store import Store
from nprof.web.app import create_app

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
_DOC_ROUTE = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/api/[^`?\s]*)")


def _normal(path: str) -> str:
    """A path with each `{param}` replaced by `{}`."""
    return re.sub(r"\{[^}]*\}", "{}", path.rstrip("/"))


def documented_routes(text: str) -> set[tuple[str, str]]:
    """(METHOD, normalised path) of every route written as `METHOD /api/...` in the docs."""
    return {(m, _normal(p)) for m, p in _DOC_ROUTE.findall(text)}


def served_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """(METHOD, normalised path) of every JSON route the app serves under /api (from its OpenAPI schema)."""
    paths = create_app(Store(tmp_path / "store")).openapi()["paths"]
    return {(m.upper(), _normal(p)) for p, ops in paths.items() if p.startswith("/api/") for m in ops}


def test_every_documented_route_is_served(tmp_path: Path) -> None:
    missing = documented_routes(API_MD.read_text()) - served_routes(tmp_path)
    assert not missing, f"docs/api.md documents routes the server lacks: {sorted(missing)}"


def test_every_served_route_is_documented(tmp_path: Path) -> None:
    undocumented = served_routes(tmp_path) - documented_routes(API_MD.read_text())
    assert not undocumented, f"routes missing from docs/api.md: {sorted(undocumented)}"


def test_the_server_has_routes(tmp_path: Path) -> None:
    """Guard against a vacuous comparison: the schema lists the core routes."""
    assert ("GET", "/api/profiles/{}/viewport") in served_routes(tmp_path)


def test_the_parser_reads_both_doc_styles() -> None:
    text = "### `GET /api/profiles/{id}/rows?x=1`\n* `DELETE /api/profiles/{id}/markers/{marker_id}` -> ok"
    assert documented_routes(text) == {("GET", "/api/profiles/{}/rows"), ("DELETE", "/api/profiles/{}/markers/{}")}
