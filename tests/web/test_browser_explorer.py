"""Browser tests of the Explorer views of issue 12: Operators (hierarchy), Tensors and the Summary roofline,
each against its JSON endpoint (fixtures in tests/web/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import CHROMIUM
from tests.web.conftest import open_profile, shot, url_params, wait_idle

pytestmark = pytest.mark.browser

if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)
pytest.importorskip("playwright.sync_api")


def test_operator_hierarchy_sort_filter_and_highlight(page, server):
    sid = server.ids["syn"]
    open_profile(page, server, "syn", "?tab=operators")
    page.wait_for_selector("#operators tbody tr")
    data = server.api(f"/api/profiles/{sid}/operators")
    layers: dict[str, int] = {}
    for n in data["nodes"]:
        layers[n["layer"]] = layers.get(n["layer"], 0) + n["time_ns"]
    rows = page.locator("#operators tbody tr.layer")
    assert rows.count() == len(layers)
    # sorted by instruction time, largest first: the first row is the busiest layer
    top = max(layers, key=layers.get)
    assert rows.first.get_attribute("data-name") == top
    # expand it: its ops appear
    rows.first.click()
    assert page.locator("#operators tbody tr.op").count() >= 1
    # sort by name (in the URL), then filter
    page.click("#operators th[data-key=name]")
    wait_idle(page)
    assert url_params(page)["osort"] == ["name"]
    assert page.locator("#operators tbody tr.layer").first.get_attribute("data-name") == min(layers)
    page.fill("#op-filter", "layers.3.mlp")
    page.press("#op-filter", "Enter")
    wait_idle(page)
    assert url_params(page)["ofilter"] == ["layers.3.mlp"]
    names = page.eval_on_selector_all("#operators tbody tr.layer", "els => els.map(e => e.dataset.name)")
    assert names and all("layers.3.mlp" in n for n in names)
    # right-click a layer: its instructions are highlighted (search on that layer), tab unchanged
    page.locator("#operators tbody tr.layer").first.click(button="right")
    wait_idle(page)
    assert url_params(page)["tab"] == ["operators"]
    hits = page.evaluate("() => window.__nprof.timeline.overlays.hits.reduce((a, h) => a + (h.count || 1), 0)")
    expect = server.api(f"/api/profiles/{sid}/search?layer=%2F%5E{names[0]}%24%2F")
    assert hits == expect["in_range"] > 0
    shot(page, "operators")


def test_tensor_table_and_click_highlights_transfers(page, server):
    sid = server.ids["tiny"]
    open_profile(page, server, "tiny", "?tab=tensors")
    page.wait_for_selector("#tensors tbody tr")
    data = server.api(f"/api/profiles/{sid}/tensors")["tensors"]
    assert page.locator("#tensors tbody tr").count() == len(data)
    first = data[0]
    row = page.locator(f"#tensors tr[data-name='{first['name']}']")
    assert str(first["dma_count"]) in row.inner_text()
    row.click()
    wait_idle(page)
    hits = page.evaluate("() => window.__nprof.timeline.overlays.hits")
    assert len(hits) == first["dma_count"] and all(h["row"].startswith("q") for h in hits)
    shot(page, "tensors")


def test_summary_roofline_points(page, server):
    sid = server.ids["syn"]
    open_profile(page, server, "syn", "?tab=summary")
    roof = server.api(f"/api/profiles/{sid}/roofline")
    if not (roof["peak_flops"] and roof["hbm_bandwidth"] and roof["run"]["intensity"]):
        page.wait_for_selector("#roofline-none")
        return
    page.wait_for_function("() => document.querySelector('#roofline') && document.querySelector('#roofline').points")
    pts = page.evaluate("() => document.querySelector('#roofline').points")
    assert pts[0]["name"] == "run" and len(pts) == 1 + len([p for p in roof["layers"] if p["intensity"]])
    page.locator("#roofline").scroll_into_view_if_needed()
    shot(page, "roofline")


def _tiny_with_sources(server) -> str:
    """The tiny profile with kernel.py stored in it (as a capture does), ingested; its id."""
    from nprof.profile.sources import embed_sources
    from tests.conftest import tiny_profile
    from tests.web.conftest import _ingest

    src = server.tmp / "src"
    src.mkdir(exist_ok=True)
    (src / "kernel.py").write_text("".join(f"# line {i}\n" for i in range(1, 21)))
    path = embed_sources(tiny_profile(), [src]).save(server.tmp / "tiny_src.ntff")
    return _ingest(path, server.db, "--db-bucket", "tiny-src", "--force")


def test_source_view_heat_click_and_ctrl_click(page, server):
    pid = _tiny_with_sources(server)
    data = server.api(f"/api/profiles/{pid}/source")
    f = data["files"][0]
    assert f["name"] == "kernel.py" and f["origin"] == "profile" and f["text"].startswith("# line 1")
    assert [(x["line"], x["count"], x["time_ns"]) for x in f["lines"]] == [(10, 1, 200), (12, 1, 100)]
    page.goto(f"{server.base}/profile/{pid}?tab=source")
    wait_idle(page)
    page.wait_for_selector("#source tbody tr")
    assert page.locator("#source tbody tr").count() == 20
    hot = page.locator("#source tr.hot")
    assert hot.count() == 2
    widths = page.eval_on_selector_all("#source tr.hot td.heat i", "els => els.map(e => e.style.width)")
    assert widths == ["100%", "50%"]
    # click line 12: its instruction (the vector TENSOR_TENSOR, id 3) is highlighted
    page.click("#source tr[data-line='12']")
    wait_idle(page)
    assert url_params(page)["src"] == ["kernel.py:12"]
    hits = page.evaluate("() => window.__nprof.timeline.overlays.hits.map(h => h.id)")
    assert hits == [3]
    assert "on" in page.get_attribute("#source tr[data-line='12']", "class")
    shot(page, "source")
    # Ctrl+click the matmul (kernel.py:10) on the timeline: the view jumps to line 10
    from tests.web.conftest import event_point

    page.keyboard.down("Control")
    page.mouse.click(*event_point(page, "tensor.moving", 200))
    page.keyboard.up("Control")
    page.wait_for_function("() => new URLSearchParams(location.search).get('src') === 'kernel.py:10'")
    wait_idle(page)
    assert "on" in page.get_attribute("#source tr[data-line='10']", "class")


def test_memory_view_draws_recorded_tiles(page, server, tmp_path):
    import numpy as np

    import nprof.nki.language as nl
    from nprof import nki
    from tests.web.conftest import _ingest

    @nki.profile(working_directory=str(tmp_path), save_neff_name="k.neff", save_trace_name="k.ntff", overwrite=True)
    def double(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            t = nl.load(x[i * 128 : (i + 1) * 128, :])
            nl.store(out[i * 128 : (i + 1) * 128, :], value=nl.add(t, t))
        return out

    double(np.ones((256, 64), np.float32))
    pid = _ingest(tmp_path / "k.ntff", server.db, "--db-bucket", "mem", "--force")
    data = server.api(f"/api/profiles/{pid}/memory")
    sb = data["spaces"]["sbuf"]
    used = [a for a in sb["allocations"] if a["first"] is not None]
    assert data["recorded"] and used and all(a["bytes"] == 64 * 4 for a in sb["allocations"])
    assert sb["peak_bytes"] >= 2 * 64 * 4 and 0 <= sb["fragmentation"] < 1
    page.goto(f"{server.base}/profile/{pid}?tab=memory")
    wait_idle(page)
    page.wait_for_function("() => (document.querySelector('#memory-sbuf') || {}).rects")
    rects = page.evaluate("() => document.querySelector('#memory-sbuf').rects.map(r => r.name)")
    assert sorted(rects) == sorted(a["name"] for a in used)
    assert "peak" in page.inner_text("#memory-sbuf-facts")
    shot(page, "memory")
