"""The DNS-rebinding / cross-site guard: foreign Host 421, foreign Origin on changes 403, own page passes."""

from __future__ import annotations

from collections.abc import Iterator

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
