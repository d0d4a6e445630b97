"""The JSON API in-process (FastAPI TestClient): answers on hand-checked profiles, 404 / 422 errors, annotations,
downloads. That docs/api.md lists every route and the keys of each answer: tests/web/test_docs_drift.py."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nprof.store import Store
from nprof.store.synthetic import synthetic_profile
from nprof.web import create_app
from tests.conftest import tiny_profile


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    store = Store(tmp_path_factory.mktemp("store"))
    store.ingest(tiny_profile(), "tiny")
    store.ingest(synthetic_profile(100_000, seed=3), "big")
    with TestClient(create_app(store), base_url="http://localhost") as c:
        yield c
    store.close()


def _ok(c: TestClient, url: str) -> dict:
    r = c.get(url)
    assert r.status_code == 200, (url, r.text)
    assert r.headers["content-type"].startswith("application/json")
    return r.json()


def test_profiles_list_and_profile(client: TestClient) -> None:
    profiles = _ok(client, "/api/profiles")["profiles"]
    assert {p["id"] for p in profiles} == {"tiny", "big"}
    tiny = next(p for p in profiles if p["id"] == "tiny")
    assert tiny["event_count"] == 4 and tiny["total_time_ns"] == 450 and tiny["device"] == "virtual-neuroncore"
    assert set(tiny) >= {"display_name", "name", "preset", "created", "ingested", "rank", "world_size", "group"}
    one = _ok(client, "/api/profiles/tiny")
    assert one["profile"]["id"] == "tiny" and one["manifest"]["preset"] == "trn1"
    assert one["program"]["instruction_count"] == 2 and one["program"]["dma_count"] == 2
    assert one["program"]["flops"] == 2 * 128 * 128 * 512
    assert {"engines", "opcodes", "layers", "dma_queues", "warnings", "findings"} <= set(one["tables"])


def test_summary_grouped_with_verdict(client: TestClient) -> None:
    s = _ok(client, "/api/profiles/tiny/summary")
    groups = {g["name"]: {m["key"]: m for m in g["metrics"]} for g in s["groups"]}
    assert groups["Overview"]["total_time"]["unit"] == "s"
    assert groups["Overview"]["total_time"]["value"] == pytest.approx(450e-9)
    assert groups["Overview"]["event_count"]["value"] == 4
    assert all(m["description"] for g in s["groups"] for m in g["metrics"])
    assert s["verdict"]["bound"] in ("memory", "compute", None)
    flat = _ok(client, "/api/profiles/tiny/summary?flat=true")["metrics"]
    assert flat["event_count"] == 4


def test_analysis_tables(client: TestClient) -> None:
    t = _ok(client, "/api/profiles/tiny/tables/engines")
    names = [c["name"] for c in t["columns"]]
    assert "engine" in names and t["total"] == len(t["rows"]) > 0
    page = _ok(client, "/api/profiles/big/tables/opcodes?offset=1&limit=2")
    assert page["offset"] == 1 and len(page["rows"]) == 2
    assert client.get("/api/profiles/tiny/tables/nope").status_code == 404
    assert client.get("/api/profiles/tiny/tables/engines?limit=0").status_code == 422


def test_rows_and_viewport(client: TestClient) -> None:
    rows = _ok(client, "/api/profiles/big/rows")
    assert rows["t_min"] == 0 and rows["t_max"] > 0
    keys = [r["key"] for r in rows["rows"]]
    assert keys[0] == "q0" and keys.index("tensor.stationary") < keys.index("tensor.moving") < keys.index("vector")
    assert keys[-3:] == ["counter:tensor_util", "counter:pending_dma", "counter:dma_throughput"]
    vp = _ok(client, f"/api/profiles/big/viewport?t0=0&t1={rows['t_max']}&width=800")
    assert vp["width"] == 800 and len(vp["rows"]) == len(keys)
    for row in vp["rows"]:
        assert len(row["ts"]) <= 2000
        if row["mode"] in ("events", "buckets"):
            assert all(0 <= o < len(vp["opcodes"]) for o in row["op"])
    sub = _ok(client, "/api/profiles/big/viewport?t0=1000&t1=200000&width=100&rows=q0,vector&max_items=50")
    assert [r["key"] for r in sub["rows"]] == ["q0", "vector"]


@pytest.mark.parametrize(
    "query",
    [
        "t0=10&t1=5&width=10",
        "t0=0&t1=100&width=0",
        "t0=0&t1=100&width=100000",
        "t0=-1&t1=100&width=10",
        "t0=x&t1=100&width=10",
        "t1=100&width=10",
        "t0=0&t1=100&width=10&rows=nope",
        "t0=0&t1=100&width=10&max_items=0",
    ],
)
def test_viewport_bad_params_are_422(client: TestClient, query: str) -> None:
    r = client.get(f"/api/profiles/tiny/viewport?{query}")
    assert r.status_code == 422
    assert isinstance(r.json()["error"], str) and "\n" not in r.json()["error"]


def test_unknown_and_invalid_ids(client: TestClient) -> None:
    for url in ("/api/profiles/nope", "/api/profiles/nope/rows", "/api/profiles/nope/markers", "/api/groups/nope"):
        r = client.get(url)
        assert r.status_code == 404 and "nope" in r.json()["error"]
    assert client.get("/api/profiles/tiny/events/12345").status_code == 404
    assert client.get("/api/profiles/a%20b/rows").status_code == 422
    assert client.get("/api/profiles/..%2F..%2Fetc/rows").status_code in (404, 422)
    assert client.get("/api/nothing-here").status_code == 404
    page = client.get("/profile/nope")
    assert page.status_code == 404 and 'href="/"' in page.text


def test_html_routes_serve_the_page(client: TestClient) -> None:
    for url in ("/", "/profile/tiny"):
        r = client.get(url)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert client.get("/openapi.json").status_code == 200


def test_event_details(client: TestClient) -> None:
    d = _ok(client, "/api/profiles/tiny/events/3")
    assert d["opcode"] == "TENSOR_TENSOR" and [x["id"] for x in d["deps"]] == [2]
    assert [g["name"] for g in d["groups"]][:2] == ["Timing", "IDs"]


def test_search_endpoint(client: TestClient) -> None:
    res = _ok(client, "/api/profiles/tiny/search?nki_source_location=/./")
    assert res["total"] == 2 and {h["id"] for h in res["hits"]} == {2, 3}
    res = _ok(client, "/api/profiles/tiny/search?opcode=/MAT/&engine=tensor&t0=0&t1=150")
    assert res["total"] == 1 and res["in_range"] == 1 and res["hits"][0]["row"] == "tensor.moving"
    assert res["summary"]["by_engine"] == [{"engine": "tensor", "count": 1, "duration": 200}]
    res = _ok(client, "/api/profiles/tiny/search?opcode=/MAT/&t0=310&t1=400")
    assert res["total"] == 1 and res["in_range"] == 0 and res["hits"] == []
    for bad in ("", "?bogus=1", "?opcode=/[/", "?opcode=a&opcode=b", "?opcode=x&limit=0"):
        r = client.get(f"/api/profiles/tiny/search{bad}")
        assert r.status_code == 422, bad


def test_select_endpoint(client: TestClient) -> None:
    res = _ok(client, "/api/profiles/tiny/select?t0=0&t1=450")
    assert res["count"] == 4 and res["total_duration"] == 450 and res["dma_bytes"] == 5120
    assert client.get("/api/profiles/tiny/select?t0=5&t1=5").status_code == 422


def test_markers_and_sets(client: TestClient) -> None:
    base = "/api/profiles/tiny"
    r = client.post(f"{base}/markers", json={"ts": 250, "label": "mid"})
    assert r.status_code == 201
    mid = r.json()["id"]
    client.post(f"{base}/markers", json={"ts": 50})
    assert [m["ts"] for m in _ok(client, f"{base}/markers")["markers"]] == [50, 250]
    assert client.patch(f"{base}/markers/{mid}", json={"label": "renamed"}).json()["label"] == "renamed"
    assert client.put(f"{base}/marker-sets/first").json()["count"] == 2
    assert _ok(client, f"{base}/marker-sets")["sets"][0]["name"] == "first"
    assert client.delete(f"{base}/markers").json() == {"deleted": 2}
    loaded = client.post(f"{base}/marker-sets/first/load").json()["markers"]
    assert [m["label"] for m in loaded] == ["", "renamed"]
    assert _ok(client, f"{base}/marker-sets/first")["name"] == "first"
    assert client.delete(f"{base}/markers/{mid}").json() == {"deleted": mid}
    assert client.delete(f"{base}/markers/{mid}").status_code == 404
    assert client.delete(f"{base}/marker-sets/first").status_code == 200
    assert client.get(f"{base}/marker-sets/first").status_code == 404
    assert client.post(f"{base}/markers", json={"label": "no ts"}).status_code == 422
    assert client.post(f"{base}/markers", json={"ts": "soon"}).status_code == 422
    assert client.put(f"{base}/marker-sets/bad%2Fname").status_code == 404
    assert client.put(f"{base}/marker-sets/bad*name").status_code == 422


def test_rename_and_delete(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    store.ingest(tiny_profile(), "gone")
    with TestClient(create_app(store), base_url="http://localhost") as c:
        assert c.patch("/api/profiles/gone", json={"display_name": "Kept name"}).json()["display_name"] == "Kept name"
        assert c.patch("/api/profiles/gone", json={"name": "x"}).status_code == 422
        assert c.delete("/api/profiles/gone").json() == {"deleted": "gone"}
        assert c.get("/api/profiles").json() == {"profiles": []}
        assert c.get("/api/profiles/gone").status_code == 404
    store.close()


def test_downloads(client: TestClient) -> None:
    formats = _ok(client, "/api/formats")["formats"]
    assert set(formats) == {"json", "perfetto", "parquet", "csv"}
    r = client.get("/api/profiles/tiny/download?format=json")
    assert r.status_code == 200 and 'filename="tiny.json"' in r.headers["content-disposition"]
    assert isinstance(json.loads(r.content), dict)
    r = client.get("/api/profiles/tiny/download?format=perfetto")
    assert r.status_code == 200 and len(r.content) > 0 and "tiny.pftrace" in r.headers["content-disposition"]
    r = client.get("/api/profiles/tiny/download?format=csv")
    names = zipfile.ZipFile(io.BytesIO(r.content)).namelist()
    assert any(n.endswith(".csv") for n in names)
    assert client.get("/api/profiles/tiny/download?format=xls").status_code == 422
    assert client.get("/api/profiles/nope/download?format=json").status_code == 404


def test_internal_errors_are_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "s")
    store.ingest(tiny_profile(), "t")
    import nprof.web.api as api_mod

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(api_mod, "rows_answer", broken)
    with TestClient(create_app(store), raise_server_exceptions=False, base_url="http://localhost") as c:
        r = c.get("/api/profiles/t/rows")
    assert r.status_code == 500 and "disk on fire" in r.json()["error"]
    store.close()


def test_multi_worker_group_routes(tmp_path: Path) -> None:
    from nprof.web.serve import ingest_directory

    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1, 10):
        tiny_profile().save(run / f"profile_rank_{rank}.ntff")
    store = Store(tmp_path / "s")
    group = ingest_directory(store, str(run), group_id=None, display_name=None, force=False)
    assert [r["rank"] for r in group["ranks"]] == [0, 1, 10]
    again = ingest_directory(store, str(run), group_id=None, display_name=None, force=False)
    assert again["id"] == group["id"]  # unchanged directory: reused, not re-ingested
    with TestClient(create_app(store), base_url="http://localhost") as c:
        g = c.get(f"/api/groups/{group['id']}").json()
        rank10 = {"rank": 10, "profile_id": f"{group['id']}.rank10", "ingested": True}
        assert g["display_name"] == "run" and g["ranks"][2] == rank10
        assert c.get(f"/api/profiles/{group['id']}.rank1/rows").status_code == 200
        assert c.get(f"/profile_cc/{group['id']}").status_code == 200
        assert c.get("/profile_cc/nope").status_code == 404
        assert c.get("/api/groups/nope").status_code == 404
    store.close()
