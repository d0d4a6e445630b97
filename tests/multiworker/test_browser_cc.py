"""The multi-worker page in Chromium: rank tabs and the CC Aggregated view of a run with a straggler.

`nprof view -d DIR` is started as a user would (parallel ingest, then serve); the page is driven through
playwright with Debian's chromium and waits on the page's readiness hook (`window.__nprof.idle()`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import CHROMIUM, free_port, launch_chromium, start_view, stop
from tests.multiworker.kit import straggler_run

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("ccview")
    straggler_run(tmp / "output", n=4, late=2)
    port = free_port()
    proc, line = start_view(
        ["-d", str(tmp / "output"), "--port", str(port), "--db", str(tmp / "db")], marker="/profile_cc/"
    )
    assert line.startswith(f"View profile at http://localhost:{port}/profile_cc/")
    yield f"http://127.0.0.1:{port}", line.strip().rsplit("/", 1)[-1]
    stop(proc)


@pytest.fixture(scope="module")
def page(server):
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        pg = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        yield pg
        browser.close()
        assert not errors, errors


def _ready(page, what: str) -> None:
    page.wait_for_function(f"() => window.__nprof && window.__nprof.{what} && window.__nprof.idle()", timeout=30000)


def test_aggregated_view(server, page) -> None:
    base, gid = server
    page.goto(f"{base}/profile_cc/{gid}?agg=1")
    _ready(page, "agg")
    tabs = page.locator(".rank-tabs a.tab").all_inner_texts()
    assert tabs == ["CC Aggregated", "Rank 0", "Rank 1", "Rank 2", "Rank 3"]
    assert page.locator(".rank-tabs a.tab.on").inner_text() == "CC Aggregated"
    assert "straggler: rank 2" in page.locator("#cc-straggler").inner_text()
    data = page.evaluate("() => window.__nprof.agg.data")
    assert data["straggler"] == 2 and len(data["ranks"]) == 4
    box = page.locator("#cc-canvas").bounding_box()
    assert box["width"] > 400 and box["height"] >= 32 + 4 * 18
    # hover rank 0 inside the operation, before the transfer starts: its wait shows in the tooltip
    op = data["ops"][0]
    w0 = next(w for w in op["ranks"] if w["rank"] == 0)
    x = page.evaluate(f"() => window.__nprof.agg.x({(w0['arrival'] + op['start']) / 2})")
    y = 32 + 0 * 18 + 9
    hit = page.evaluate(f"() => window.__nprof.agg.hit({x}, {y})")
    assert hit["rank"] == 0 and hit["op"]["id"] == op["id"] and hit["wait"]["wait_ns"] > 0
    page.mouse.move(box["x"] + x, box["y"] + y)
    tip = page.locator("#tooltip")
    tip.wait_for(state="visible")
    assert "rank 0" in tip.inner_text() and "waited" in tip.inner_text() and "straggler: rank 2" in tip.inner_text()
    # wait matrix: rank 2 waited 0, the others > 0
    rows = page.locator("table.cc-matrix tbody tr").all_inner_texts()
    assert (
        len(rows) == 4 and rows[2].split()[-1] == "0" and all(r.split()[-1] != "0" for r in (rows[0], rows[1], rows[3]))
    )
    assert "cc-straggler-row" in (page.locator("table.cc-ranks tbody tr").nth(2).get_attribute("class") or "")
    # drag to zoom, double-click to reset
    page.mouse.move(box["x"] + 200, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + 400, box["y"] + 40)
    page.mouse.up()
    t0, t1 = page.evaluate("() => window.__nprof.agg.window")
    assert t0 > 0 and t1 < data["t_max"]
    page.mouse.dblclick(box["x"] + 300, box["y"] + 40)
    assert page.evaluate("() => window.__nprof.agg.window") == [0, data["t_max"]]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "cc_aggregated.png"), full_page=True)


def test_rank_label_opens_that_rank_timeline(server, page) -> None:
    base, gid = server
    page.goto(f"{base}/profile_cc/{gid}?agg=1")
    _ready(page, "agg")
    box = page.locator("#cc-canvas").bounding_box()
    page.mouse.click(box["x"] + 20, box["y"] + 32 + 3 * 18 + 9)  # "Rank 3" label
    page.wait_for_url(f"**/profile_cc/{gid}?rank=3")
    _ready(page, "view")
    assert page.locator(".rank-tabs a.tab.on").inner_text() == "Rank 3"
    labels = page.evaluate("() => window.__nprof.view.rowsResp.rows.map(r => r.label)")
    assert any(label.startswith("CC-core") for label in labels)
    page.locator(".rank-tabs a.tab", has_text="CC Aggregated").click()
    page.wait_for_url(f"**/profile_cc/{gid}?agg=1")
    _ready(page, "agg")
