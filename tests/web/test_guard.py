"""The DNS-rebinding / cross-site guard: foreign Host 421, foreign Origin on changes 403, own page passes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nprof.store import Store
from nprof.web.app import create_app
from nprof.web.guard import allowed_names, refusal, split_host
from tests.conftest import tiny_profile


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    store = Store(tmp_path_factory.mktemp("store"))
    store.ingest(tiny_profile(), "victim")
    with TestClient(create_app(store, hosts=["myhost.lan"]), base_url="http://localhost:3001") as c:
        yield c


def test_foreign_host_is_421_and_deletes_nothing(client: TestClient) -> None:
    r = client.delete(
        "/api/profiles/victim", headers={"Host": "evil.example:3001", "Origin": "http://evil.example:3001"}
    )
    assert r.status_code == 421 and "not served here" in r.json()["error"]
    r = client.get("/api/profiles/victim", headers={"Host": "evil.example:3001"})
    assert r.status_code == 421
    assert client.get("/api/profiles/victim").status_code == 200


@pytest.mark.parametrize("host", ["localhost:3001", "127.0.0.1:3001", "[::1]:3001", "10.1.2.3:3001", "myhost.lan:3001"])
def test_served_names_pass(client: TestClient, host: str) -> None:
    assert client.get("/api/profiles/victim", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example:3001"},
        {"Origin": "null"},
        {"Origin": "http://localhost:9999"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
def test_cross_origin_changes_are_403(client: TestClient, headers: dict[str, str]) -> None:
    r = client.post("/api/profiles/victim/markers", json={"ts": 1, "label": "x"}, headers=headers)
    assert r.status_code == 403 and r.json()["error"].count("\n") == 0
    assert client.delete("/api/profiles/victim", headers=headers).status_code == 403
    assert client.get("/api/profiles/victim").status_code == 200


def test_own_origin_and_plain_clients_may_change(client: TestClient) -> None:
    ok = client.patch("/api/profiles/victim", json={"display_name": "V"}, headers={"Origin": "http://localhost:3001"})
    assert ok.status_code == 200
    assert client.patch("/api/profiles/victim", json={"display_name": "W"}).status_code == 200


def test_helpers() -> None:
    assert split_host("[::1]:80") == ("::1", "80") and split_host("A.b:1") == ("a.b", "1")
    assert refusal({}, "GET", frozenset())[0] == 421  # type: ignore[index]
    assert refusal({"host": "localhost"}, "GET", frozenset()) is None
    assert "0.0.0.0" in allowed_names("0.0.0.0") and len(allowed_names("0.0.0.0")) >= 2


@pytest.mark.parametrize(
    "url",
    [
        "/api/profiles/victim/tables/engines?offset=9223372036854775808",
        "/api/profiles/victim/viewport?t0=0&t1=100000000000000000000&width=100",
        "/api/profiles/victim/select?t0=0&t1=-9223372036854775809",
    ],
)
def test_parameters_past_int64_are_422(client: TestClient, url: str) -> None:
    r = client.get(url)
    assert r.status_code == 422 and "64-bit" in r.json()["error"]


@pytest.mark.parametrize("ts", [2**64, 2**63, 2**53 + 1, -1])
def test_marker_ts_out_of_range_is_422(client: TestClient, ts: int) -> None:
    r = client.post("/api/profiles/victim/markers", content=f'{{"ts": {ts}, "label": "x"}}')
    assert r.status_code == 422, r.text


def test_corrupt_database_is_one_line_without_the_store_path(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.ingest(tiny_profile(), "bad")
    store.close()
    store.db_path("bad").write_bytes(b"not a duckdb file" * 100)
    with TestClient(
        create_app(Store(tmp_path / "store")), base_url="http://localhost", raise_server_exceptions=False
    ) as c:
        r = c.get("/api/profiles/bad/rows")
    assert r.status_code >= 400 and str(tmp_path) not in r.text and "\n" not in r.json()["error"], r.text


def test_openapi_documents_objects_and_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ops = [op for path in spec["paths"].values() for op in path.values()]
    assert ops and all({"404", "422", "421"} <= set(op["responses"]) for op in ops)
    for op in ops:
        for answer in op["responses"].values():
            schema = answer.get("content", {}).get("application/json", {}).get("schema")
            assert schema != {"type": "string"}
