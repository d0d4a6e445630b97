"""End-to-end tests of the web viewer page: `nprof view` started as a user would, driven in Debian's Chromium.

The server and browser fixtures (tests/web/conftest.py) are shared by the browser test modules.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, nprof_command
from tests.conftest import tiny_profile
from tests.web.conftest import event_point, open_profile, shot, url_params, wait_idle

pytestmark = pytest.mark.browser

if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


def test_overview_rows_and_counters_drawn(page, server):
    open_profile(page, server, "syn")
    rows = page.evaluate("() => window.__nprof.timeline.layout.rows.map(r => [r.key, r.kind])")
    keys = [k for k, _ in rows]
    assert keys[:16] == [f"q{i}" for i in range(16)]
    assert keys[16:22] == ["tensor.stationary", "tensor.moving", "vector", "scalar", "gpsimd", "sync"]
    assert [k for k, kind in rows if kind == "counter"] == [
        "counter:tensor_util",
        "counter:pending_dma",
        "counter:dma_throughput",
    ]
    drawn = page.evaluate("() => window.__nprof.view.vp.rows.map(r => [r.key, r.mode, r.ts.length])")
    assert {k for k, _, _ in drawn} == set(keys)
    assert all(n > 0 for _, _, n in drawn)
    assert {m for k, m, _ in drawn if k.startswith("counter:")} == {"counter"}
    items = int(page.get_attribute("#timeline", "data-items"))
    assert items == sum(n for _, _, n in drawn)
    assert page.get_attribute("#timeline", "data-ready") == "1"
    total = server.api(f"/api/profiles/{server.ids['syn']}")["profile"]["total_time_ns"]
    assert url_params(page)["t1"] == [str(total)]
    # the canvas backing store follows devicePixelRatio
    w = page.evaluate(
        "() => [document.querySelector('canvas.tl-base').width, window.devicePixelRatio, "
        "window.__nprof.timeline.layout.width]"
    )
    assert w[0] == round(w[1] * w[2])
    shot(page, "overview")
    page.set_viewport_size({"width": 1920, "height": 1080})
    page.wait_for_function("() => window.__nprof.timeline.layout.width > 1800")
    wait_idle(page)
    assert page.evaluate("() => window.__nprof.view.vp.width") == page.evaluate(
        "() => window.__nprof.timeline.plotWidth()"
    ), "the viewport was re-queried at the new plot width"
    shot(page, "overview-1920")


def test_click_event_opens_details_and_highlights_dependencies(page, server):
    open_profile(page, server, "tiny")
    page.mouse.click(*event_point(page, "tensor.moving", 200))
    page.wait_for_selector("#details-title")
    wait_idle(page)
    assert page.inner_text("#details-title") == "MATMUL"
    groups = page.eval_on_selector_all(
        "#panel-details .field-group[data-group]", "els => els.map(e => e.dataset.group)"
    )
    assert groups[:5] == ["Timing", "IDs", "Source", "Operands", "Memory"]
    assert page.inner_text("#panel-details dd[data-key=ts]").startswith("100 ns")
    assert page.inner_text("#panel-details dd[data-key=nki_source_location]") == "kernel.py:10"
    helps = page.eval_on_selector_all("#panel-details dt .help", "els => els.map(e => e.title)")
    assert helps and all(helps)
    ov = page.evaluate(
        "() => { const o = window.__nprof.timeline.overlays; "
        "return [o.selected.id, o.deps.map(d => d.id), o.dependents.map(d => d.id)]; }"
    )
    assert ov == [2, [1], [3]]
    assert url_params(page)["ev"] == ["2"]
    assert "Depends on (1)" in page.text_content("#panel-details")
    page.hover("canvas.tl-over", position={"x": 10, "y": 10})
    page.mouse.move(*event_point(page, "vector", 350))
    page.wait_for_selector("#tooltip:not([hidden])")
    assert page.inner_text("#tooltip .tt-title") == "TENSOR_TENSOR"
    shot(page, "details")


def test_drag_zoom_wheel_keys_and_history(page, server):
    open_profile(page, server, "syn")
    before = page.evaluate("() => [window.__nprof.view.vp.t0, window.__nprof.view.vp.t1]")
    total = before[1]
    x0, y = event_point(page, "vector", total * 0.25)
    x1, _ = event_point(page, "vector", total * 0.5)
    page.mouse.move(x0, y)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, y, steps=3)
    page.mouse.move(x1, y, steps=3)
    page.mouse.up()
    wait_idle(page)
    t0, t1 = (int(url_params(page)[k][0]) for k in ("t0", "t1"))
    assert abs(t0 - total * 0.25) < total * 0.01 and abs(t1 - total * 0.5) < total * 0.01
    vp = page.evaluate("() => [window.__nprof.view.vp.t0, window.__nprof.view.vp.t1]")
    assert vp == [t0, t1], "the viewport was re-queried for the new window"
    shot(page, "zoomed")
    # wheel zooms in at the cursor, keys pan
    page.mouse.move((x0 + x1) / 2, y)
    page.mouse.wheel(0, -300)
    wait_idle(page)
    w0, w1 = (int(url_params(page)[k][0]) for k in ("t0", "t1"))
    assert t0 <= w0 and w1 <= t1 and (w1 - w0) < (t1 - t0) * 0.7
    page.keyboard.press("d")
    wait_idle(page)
    p0 = int(url_params(page)["t0"][0])
    assert p0 > w0
    # back returns to the drag-zoomed window; 0 resets to the whole profile
    page.go_back()
    wait_idle(page)
    assert [int(url_params(page)[k][0]) for k in ("t0", "t1")] != [p0, p0 + (w1 - w0)]
    page.keyboard.press("0")
    wait_idle(page)
    assert url_params(page)["t0"] == ["0"] and int(url_params(page)["t1"][0]) == total


def test_search_regex_highlights_and_counts(page, server):
    sid = server.ids["syn"]
    open_profile(page, server, "syn")
    page.click("#tab-search")
    page.select_option("#search-form .s-field", "nki_source_location")
    page.fill("#search-form .s-value", "/./")
    page.click("#search-go")
    page.wait_for_selector("#search-count")
    wait_idle(page)
    expect = server.api(f"/api/profiles/{sid}/search?nki_source_location=%2F.%2F")
    count = page.locator("#search-count")
    assert int(count.get_attribute("data-total")) == expect["total"] > 0
    assert f"{expect['total']:,} hits" in count.inner_text()
    hits = page.evaluate("() => window.__nprof.timeline.overlays.hits.reduce((a, h) => a + (h.count || 1), 0)")
    assert hits == expect["in_range"]  # every hit highlighted (merged per pixel beyond 5000)
    assert url_params(page)["q.nki_source_location"] == ["/./"]
    assert url_params(page)["tab"] == ["search"]
    # two fields at once (ANDed)
    page.click("text=+ condition")
    page.locator("#search-form .s-field").nth(1).select_option("opcode")
    page.locator("#search-form .s-value").nth(1).fill("/MAT/")
    page.click("#search-go")
    wait_idle(page)
    both = server.api(f"/api/profiles/{sid}/search?nki_source_location=%2F.%2F&opcode=%2FMAT%2F")
    assert int(count.get_attribute("data-total")) == both["total"] < expect["total"]
    shot(page, "search")
    # a bad regex is reported, not a blank panel
    page.locator("#search-form .s-value").nth(1).fill("/(/")
    page.click("#search-go")
    page.wait_for_selector("#search-error")
    wait_idle(page)
    assert "regex" in page.inner_text("#search-error").lower()


def test_box_select_totals_match_api(page, server):
    open_profile(page, server, "syn")
    page.click("#mode-select")
    total = page.evaluate("() => window.__nprof.view.vp.t1")
    xa, ya = event_point(page, "q2", total * 0.1)
    xb, yb = event_point(page, "vector", total * 0.3)
    page.mouse.move(xa, ya)
    page.mouse.down()
    page.mouse.move(xb, yb, steps=5)
    page.mouse.up()
    page.wait_for_selector("#sel-count")
    wait_idle(page)
    sel = page.evaluate("() => window.__nprof.view.st.sel")
    assert sel["rows"][0] == "q2" and sel["rows"][-1] == "vector" and "tensor.moving" in sel["rows"]
    q = f"t0={sel['t0']}&t1={sel['t1']}&rows={','.join(sel['rows'])}"
    expect = server.api(f"/api/profiles/{server.ids['syn']}/select?{q}")
    assert expect["count"] > 0
    assert page.inner_text("#sel-count .stat-v") == f"{expect['count']:,}"
    got = page.evaluate("() => window.__nprof.view.panels.selection.last")
    assert got["count"] == expect["count"] and got["total_duration"] == expect["total_duration"]
    assert "By transfer size" in page.text_content("#panel-selection")
    assert url_params(page)["sel"] == [f"{sel['t0']}-{sel['t1']}"]
    shot(page, "box-select")


def test_markers_rename_save_load_round_trip(page, server):
    sid = server.ids["tiny"]
    server.api(f"/api/profiles/{sid}/markers", method="DELETE")
    open_profile(page, server, "tiny", "?tab=annotations")
    page.mouse.click(*event_point(page, "vector", 100), button="right")
    page.wait_for_function("() => window.__nprof.view.markers.length === 1")
    page.mouse.click(*event_point(page, "vector", 400), button="right")
    page.wait_for_function("() => window.__nprof.view.markers.length === 2")
    wait_idle(page)
    stored = server.api(f"/api/profiles/{sid}/markers")["markers"]
    assert len(stored) == 2 and abs(stored[0]["ts"] - 100) <= 2 and abs(stored[1]["ts"] - 400) <= 2
    delta = stored[1]["ts"] - stored[0]["ts"]
    assert int(page.get_attribute("#marker-between strong", "data-ns")) == delta
    label = page.locator(".marker-label").first
    label.fill("start of matmul")
    label.press("Enter")
    page.wait_for_function("() => window.__nprof.view.markers[0].label === 'start of matmul'")
    page.fill("#set-name", "run1")
    page.click("#set-save")
    page.wait_for_selector("#marker-sets button[data-set=run1]")
    page.click("#markers-clear")
    page.wait_for_function("() => window.__nprof.view.markers.length === 0")
    assert server.api(f"/api/profiles/{sid}/markers")["markers"] == []
    page.click("#marker-sets button[data-set=run1]")
    page.wait_for_function("() => window.__nprof.view.markers.length === 2")
    wait_idle(page)
    assert server.api(f"/api/profiles/{sid}/markers")["markers"][0]["label"] == "start of matmul"
    page.reload()
    wait_idle(page)
    assert page.evaluate("() => window.__nprof.timeline.overlays.markers.length") == 2
    shot(page, "markers")


def test_url_round_trip_restores_view(page, server):
    q = "?t0=1000000&t1=1500000&tab=search&q.opcode=MATMUL&q.layer=%2Flayers%2F&color=engine&view=full&mode=select"
    open_profile(page, server, "syn", q)
    st = page.evaluate("() => window.__nprof.view.st")
    assert (st["t0"], st["t1"], st["tab"], st["color"], st["view"], st["mode"]) == (
        1000000,
        1500000,
        "search",
        "engine",
        "full",
        "select",
    )
    assert st["query"] == [["opcode", "MATMUL"], ["layer", "/layers/"]]
    assert page.locator("#panel-search").is_visible()
    assert page.locator("#search-form .s-value").nth(1).input_value() == "/layers/"
    assert page.input_value("#color-by") == "engine"
    vp = page.evaluate("() => [window.__nprof.view.vp.t0, window.__nprof.view.vp.t1]")
    assert vp == [1000000, 1500000]
    assert int(page.get_attribute("#search-count", "data-total")) > 0
    # settings changed in the page land in the URL, and a reload restores them
    page.select_option("#color-by", "opcode")
    page.click("#tab-summary")
    page.wait_for_selector("#verdict")
    wait_idle(page)
    params = url_params(page)
    assert params["tab"] == ["summary"] and "color" not in params
    page.reload()
    wait_idle(page)
    st = page.evaluate("() => window.__nprof.view.st")
    assert (st["tab"], st["color"], st["t0"], st["t1"]) == ("summary", "opcode", 1000000, 1500000)
    page.go_back()
    wait_idle(page)
    assert page.evaluate("() => window.__nprof.view.st.tab") == "search"


def test_summary_tab(page, server):
    open_profile(page, server, "syn", "?tab=summary")
    page.wait_for_selector("#verdict")
    wait_idle(page)
    summary = server.api(f"/api/profiles/{server.ids['syn']}/summary")
    assert summary["verdict"]["bound"] in page.inner_text("#verdict").lower()
    groups = page.eval_on_selector_all(".metric-group[data-group]", "els => els.map(e => e.dataset.group)")
    assert groups == [g["name"] for g in summary["groups"]]
    n_metrics = sum(len(g["metrics"]) for g in summary["groups"])
    assert page.locator(".metric-group dt[data-key] .help").count() == n_metrics
    text = page.inner_text("#panel-summary")
    for heading in ("Engines", "Layers", "DMA queues", "Opcodes", "Program", "Terminology"):
        assert heading.lower() in text.lower()
    child_texts = "el => [...el.childNodes].map(n => n.textContent.slice(0, 40))"
    top = [t.strip() for t in page.eval_on_selector("#panel-summary", child_texts)]
    assert not {"null", "undefined"} & set(top), top  # an absent section (no trn3 note here) leaves no stray text
    shot(page, "summary")


def test_profile_list_rename_and_delete(page, server):
    extra = tiny_profile().save(server.tmp / "extra.ntff")
    cmd = nprof_command("view", "-s", str(extra), "--ingest-only", "--db", str(server.db), "--db-bucket", "to-delete")
    subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    page.goto(server.base + "/")
    page.wait_for_selector("#profiles")
    ids = page.eval_on_selector_all("#profiles tbody tr", "els => els.map(e => e.dataset.id)")
    assert {server.ids["tiny"], server.ids["syn"], "to-delete"} <= set(ids)
    row = page.locator("#profiles tr[data-id=to-delete]")
    assert "450 ns" in row.inner_text()
    page.once("dialog", lambda d: d.accept("renamed run"))
    row.locator("button.rename").click()
    page.wait_for_function("() => document.querySelector('#list-status').textContent.startsWith('renamed')")
    assert server.api("/api/profiles/to-delete")["profile"]["display_name"] == "renamed run"
    page.fill("#profile-filter", "renamed")
    assert page.locator("#profiles tbody tr:visible").count() == 1
    assert page.inner_text("#list-status") == f"1 of {len(ids)} shown"
    page.fill("#profile-filter", "")
    shot(page, "list")
    page.once("dialog", lambda d: d.accept())
    row.locator("button.delete").click()
    page.wait_for_function("() => !document.querySelector('#profiles tr[data-id=to-delete]')")
    assert "to-delete" not in [p["id"] for p in server.api("/api/profiles")["profiles"]]


def test_unknown_profile_shows_error_with_link(page, server):
    resp = page.goto(server.base + "/profile/no-such-profile")
    assert resp.status == 404
    page.wait_for_load_state()
    assert "no-such-profile" in page.inner_text("body")
    assert page.locator("a[href='/']").count() >= 1
    # the page itself turns an API failure into the error panel (deleted while open)
    server.api(f"/api/profiles/{server.ids['tiny']}/markers", method="DELETE")
    page.goto(f"{server.base}/profile/{server.ids['tiny']}")
    wait_idle(page)
    page.evaluate("""() => { window.history.pushState(null, '', '/profile/gone-away');
                             window.dispatchEvent(new PopStateEvent('popstate')); }""")
    page.wait_for_selector("#error-panel")
    assert "gone-away" in page.inner_text("#error-panel")
    assert page.locator("#error-panel a[href='/']").is_visible()
    shot(page, "error")


def test_multi_worker_rank_tabs(page, server):
    gid = server.ids["cc"]
    page.goto(f"{server.base}/profile_cc/{gid}")
    wait_idle(page)
    tabs = page.locator(".rank-tabs a.tab:not(#tab-agg)")
    assert tabs.all_inner_texts() == ["Rank 0", "Rank 1", "Rank 2", "Rank 3"]
    assert page.evaluate("() => window.__nprof.view.id") == f"{gid}.rank0"
    tabs.nth(2).click()
    page.wait_for_url(re.compile(r"rank=2"))
    wait_idle(page)
    assert page.evaluate("() => window.__nprof.view.id") == f"{gid}.rank2"
    assert page.locator(".rank-tabs a.tab.on").all_inner_texts() == ["Rank 2"]
    assert int(page.get_attribute("#timeline", "data-items")) > 0
    # the late rank was the straggler: its box says so
    assert "straggler" in page.evaluate("() => window.__nprof.timeline.overlays.collectives[0].text")


def test_collective_op_boxes_on_rank_timeline(page, server):
    gid = server.ids["cc"]
    page.goto(f"{server.base}/profile_cc/{gid}?rank=0")
    wait_idle(page)
    ops = server.api(f"/api/groups/{gid}/collectives?bins=16")["ops"]
    boxes = page.evaluate("() => window.__nprof.timeline.overlays.collectives")
    assert len(boxes) == len(ops) >= 1
    mine = next(r for r in ops[0]["ranks"] if r["rank"] == 0)
    assert (boxes[0]["t0"], boxes[0]["t1"]) == (mine["arrival"], ops[0]["end"])
    assert all(r.startswith("cc.") for r in boxes[0]["rows"])
    page.mouse.move(*event_point(page, boxes[0]["rows"][0], (mine["arrival"] + ops[0]["end"]) / 2))
    page.wait_for_selector("#tooltip:not([hidden])")
    assert "waited" in page.inner_text("#tooltip") and ops[0]["kind"] in page.inner_text("#tooltip")
    shot(page, "collectives")


def test_compare_tab_shows_deltas(page, server):
    open_profile(page, server, "syn", f"?tab=compare&compare={server.ids['tiny']}")
    page.wait_for_selector("#compare-body table.compare")
    wait_idle(page)
    text = page.text_content("#compare-body")
    assert "Engine active time" in text and "Opcode total time" in text
    # MATMUL exists in both profiles: its delta row is B - A of the two opcode tables
    a = server.api(f"/api/profiles/{server.ids['syn']}/tables/opcodes?limit=1000")
    b = server.api(f"/api/profiles/{server.ids['tiny']}/tables/opcodes?limit=1000")
    col = [c["name"] for c in a["columns"]]
    ta = sum(r[col.index("total_ns")] for r in a["rows"] if r[col.index("opcode")] == "MATMUL")
    tb = sum(r[col.index("total_ns")] for r in b["rows"] if r[col.index("opcode")] == "MATMUL")
    row = page.locator("#compare-body table.compare tr", has_text="tensor MATMUL").first
    assert row.count() == 1 and ta > tb
    assert row.locator("td").nth(3).inner_text().startswith("-")


def test_index_preloads_every_static_import():
    """index.html preloads the whole static import graph of app.js (one parallel fetch wave, no waterfall)."""
    js = Path(__file__).resolve().parents[2] / "src" / "nprof" / "web" / "static" / "js"
    html = (js.parent / "index.html").read_text()
    preloaded = set(re.findall(r'rel="modulepreload" href="/static/js/([^"]+)"', html))
    graph, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        if name not in graph:
            graph.add(name)
            todo += re.findall(r'^import [^;]*? from "\./([^"]+)";', (js / name).read_text(), re.M | re.S)
    assert graph <= preloaded, f"not preloaded: {sorted(graph - preloaded)}"
    assert preloaded <= {p.name for p in js.glob("*.js")}


def test_colour_by_layer_at_depth(page, server):
    sid = server.ids["syn"]
    open_profile(page, server, "syn", "?t0=200000&t1=230000&color=layer&depth=3")
    pairs = page.evaluate("() => window.__nprof.layerGroups().filter((_, i) => i % 97 === 0).slice(0, 5)")
    assert pairs, "events in the window were mapped to layer groups"
    for event_id, group in pairs:
        fields = {
            f["key"]: f["value"]
            for g in server.api(f"/api/profiles/{sid}/events/{event_id}")["groups"]
            for f in g["fields"]
        }
        assert fields["layer"].split(".")[:3] == group.split(".")
    chips = page.locator("#legend .chip").all_inner_texts()
    layers = server.api(f"/api/profiles/{sid}/tables/layers?limit=1000")
    names = {".".join(r[0].split(".")[:3]) for r in layers["rows"]}
    assert set(chips) == names
    # changing the depth re-colours (full layer paths) and lands in the URL
    page.fill("#layer-depth", "0")
    page.press("#layer-depth", "Enter")
    wait_idle(page)
    assert "depth" not in url_params(page)
    groups = {g for _, g in page.evaluate("() => window.__nprof.layerGroups()")}
    assert groups and groups <= {r[0] for r in layers["rows"]}
    shot(page, "colour-by-layer")


def test_viewport_requests_debounced_and_cancelled(page, server):
    open_profile(page, server, "syn")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/viewport?" in r.url else None)
    # 20 window changes in one task -> one request, for the last window
    page.evaluate(
        "() => { const v = window.__nprof.view; "
        "for (let i = 1; i <= 20; i++) v.setWindow(i * 1000, i * 1000 + 50000, false); }"
    )
    wait_idle(page)
    assert len(requests) == 1 and "t0=20000&t1=70000" in requests[0]
    # a request still in flight when the window changes again is aborted
    aborted = page.evaluate(
        """async () => {
             const v = window.__nprof.view;
             v.setWindow(100000, 400000, false);
             while (!v.vpAbort) await new Promise((r) => setTimeout(r, 1));
             const first = v.vpAbort;
             v.setWindow(500000, 800000, false);
             while (v.vpAbort === first) await new Promise((r) => setTimeout(r, 1));
             return first.signal.aborted;
           }"""
    )
    wait_idle(page)
    assert aborted
    assert page.evaluate("() => [window.__nprof.view.vp.t0, window.__nprof.view.vp.t1]") == [500000, 800000]


def test_warnings_tab_lists_findings_and_boxes(page, server):
    sid = server.ids["syn"]
    open_profile(page, server, "syn", "?tab=warnings")
    warnings = server.api(f"/api/profiles/{sid}/tables/warnings?limit=1")["total"]
    findings = server.api(f"/api/profiles/{sid}/tables/findings?limit=1")["total"]
    assert warnings > 0 and findings > 0
    assert page.locator("#warning-list li").count() == warnings
    assert page.locator("#findings li").count() == findings
    assert len(page.evaluate("() => window.__nprof.timeline.overlays.warnings")) == warnings
    # clicking a box entry zooms to it and highlights that tensor's DMA transfers
    page.locator("#warning-list li").first.click()
    wait_idle(page)
    st = page.evaluate("() => window.__nprof.view.st")
    assert st["query"][0][0] == "tensor" and st["query"][1] == ["kind", "dma"]
    assert page.evaluate("() => window.__nprof.timeline.overlays.hits.length") > 0
