"""docs/api.md and the server agree: every documented route exists, every served route is documented, and each
JSON example has the keys the route answers with (each key of an answer is documented in its section).

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


# A concrete request on the tiny profile for each documented GET route with a JSON example.
_REQUESTS = {
    "/api/profiles": "/api/profiles",
    "/api/profiles/{}": "/api/profiles/tiny",
    "/api/profiles/{}/summary": "/api/profiles/tiny/summary",
    "/api/profiles/{}/tables/{}": "/api/profiles/tiny/tables/engines",
    "/api/profiles/{}/rows": "/api/profiles/tiny/rows",
    "/api/profiles/{}/viewport": "/api/profiles/tiny/viewport?t0=0&t1=450&width=900",
    "/api/profiles/{}/events/{}": "/api/profiles/tiny/events/2",
    "/api/profiles/{}/search": "/api/profiles/tiny/search?opcode=/MAT/",
    "/api/profiles/{}/boxes": "/api/profiles/tiny/boxes?t0=0&t1=450",
    "/api/profiles/{}/select": "/api/profiles/tiny/select?t0=0&t1=450",
    "/api/profiles/{}/operators": "/api/profiles/tiny/operators",
    "/api/profiles/{}/tensors": "/api/profiles/tiny/tensors",
    "/api/profiles/{}/roofline": "/api/profiles/tiny/roofline",
    "/api/profiles/{}/source": "/api/profiles/tiny/source",
    "/api/profiles/{}/memory": "/api/profiles/tiny/memory",
}


def documented_shapes(text: str) -> dict[str, tuple[set[str], str]]:
    """Normalised GET path -> (the top-level keys of its first JSON example, the whole section's text), for
    every `### \\`GET /api/...\\`` section of the docs that has a JSON example."""
    out = {}
    for section in re.split(r"\n### ", text)[1:]:
        head = _DOC_ROUTE.match(section)
        example = re.search(r"```json\n(.*?)```", section, flags=re.DOTALL)
        if head and head.group(1) == "GET" and example:
            out[_normal(head.group(2))] = (top_level_keys(example.group(1)), section)
    return out


def top_level_keys(example: str) -> set[str]:
    """The keys of the outermost object of a JSON example (which may hold `...` placeholders)."""
    keys, depth, i = set(), 0, 0
    while i < len(example):
        ch = example[i]
        if ch == '"':
            end = example.index('"', i + 1)
            if depth == 1 and example[end + 1 : end + 2] == ":":
                keys.add(example[i + 1 : end])
            i = end
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        i += 1
    return keys


def test_every_json_example_has_the_served_shape(tmp_path: Path) -> None:
    """Each documented key is in the answer, and each key of the answer is documented in its section."""
    from fastapi.testclient import TestClient

    from tests.conftest import tiny_profile

    shapes = documented_shapes(API_MD.read_text())
    assert set(shapes) == set(_REQUESTS), "give each documented JSON example a request in _REQUESTS"
    store = Store(tmp_path / "store")
    store.ingest(tiny_profile(), "tiny")
    with TestClient(create_app(store), base_url="http://localhost") as client:
        for route, url in _REQUESTS.items():
            keys, section = shapes[route]
            answer = client.get(url)
            assert answer.status_code == 200, (url, answer.text)
            served = set(answer.json())
            assert keys <= served, f"{route}: docs/api.md shows keys the answer lacks: {sorted(keys - served)}"
            undocumented = sorted(k for k in served - keys if f"`{k}`" not in section)
            assert not undocumented, f"{route}: keys missing from docs/api.md: {undocumented}"
    store.close()


def test_the_shape_parser_reads_examples_with_placeholders() -> None:
    example = '{"a": 1, "b": {"inner": [1, {"deep": 2}]}, "c": [ ... ], "d": "x: y", "e": { ...as above... }}'
    assert top_level_keys(example) == {"a", "b", "c", "d", "e"}
    text = "# API\n### `GET /api/x/{id}?q=`\nwords `extra`\n```json\n{\"k\": 1}\n```\n### `DELETE /api/x/{id}`\n"
    assert {route: keys for route, (keys, _) in documented_shapes(text).items()} == {"/api/x/{}": {"k"}}
