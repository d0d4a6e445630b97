"""Browser tests of system profiles in the viewer (issue 15): the System tab, the links between a system
profile and its device profiles both ways, the host-first row order and the counter label's max. The
system profile is the hand-built two-step one of tests/analysis/test_system.py, served by its own
`nprof view -s` (its device profiles ingested from run.ntff.devices/)."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from nprof.analysis.system import system_steps
from tests.analysis.test_system import FW, _system_profile
from tests.browser import CHROMIUM, free_port, start_view, stop
from tests.conftest import tiny_profile
from tests.web.conftest import shot, url_params, wait_idle

pytestmark = pytest.mark.browser

if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)
pytest.importorskip("playwright.sync_api")

SYSTEM_KINDS = {"recompile", "host_bound", "launch_gap", "repeated_copies"}


@pytest.fixture(scope="module")
def sysview(tmp_path_factory: pytest.TempPathFactory):
    """(base URL, system profile id, device profile id of FW#1, get(path) -> JSON)."""
    tmp = tmp_path_factory.mktemp("sysview")
    prof = _system_profile()
    meta = {**prof.info.meta, "system.device_profiles": json.dumps({f"{FW}#1": f"{FW}_exec1.ntff"}),
            "incomplete": "the script exited with status 3: this profile holds what ran before it stopped"}  # fmt: skip
    replace(prof, info=replace(prof.info, meta=meta)).save(tmp / "run.ntff")
    (tmp / "run.ntff.devices").mkdir()
    tiny = tiny_profile()
    replace(tiny, info=replace(tiny.info, name=f"{FW}#1")).save(tmp / "run.ntff.devices" / f"{FW}_exec1.ntff")
    port = free_port()
    proc, line = start_view(["-s", str(tmp / "run.ntff"), "--port", str(port), "--db", str(tmp / "store")])
    base = f"http://127.0.0.1:{port}"
    sys_id = line.strip().rsplit("/", 1)[-1]

    def get(path: str) -> dict:
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return json.loads(r.read())

    dev_id = get(f"/api/profiles/{sys_id}/links")["device_profiles"][0]["profile_id"]
    yield base, sys_id, dev_id, get
    stop(proc)


def test_system_tab_steps_bars_findings_and_zoom(page, sysview):
    base, sys_id, _dev, get = sysview
    page.goto(f"{base}/profile/{sys_id}?tab=system")
    page.wait_for_selector("#step-bars")
    wait_idle(page)
    steps = system_steps(_system_profile()).to_pylist()
    assert page.locator("#step-bars .steprow").count() == len(steps) == 2
    assert page.locator("#step-table tbody tr").count() == 2
    # step 1's host bar: launch 50 ns and copies 40 ns, in proportion; no compile segment
    widths = page.eval_on_selector_all(
        "#step-bars .steprow:nth-child(2) .stepbar.host .seg",
        "els => Object.fromEntries(els.map(e => [e.dataset.part, e.getBoundingClientRect().width]))",
    )
    assert "compile_ns" not in widths and widths["launch_ns"] / widths["copy_ns"] == pytest.approx(50 / 40, rel=0.05)
    dev = page.eval_on_selector_all(
        "#step-bars .steprow:nth-child(2) .stepbar.device .seg", "els => els.map(e => e.dataset.part)"
    )
    assert dev == ["forward_device_ns", "backward_device_ns"]
    f = get(f"/api/profiles/{sys_id}/tables/findings")
    kinds = [r[[c["name"] for c in f["columns"]].index("kind")] for r in f["rows"]]
    shown = page.eval_on_selector_all("#system-findings li", "els => els.map(e => e.dataset.kind)")
    assert shown == [k for k in kinds if k in SYSTEM_KINDS] and shown
    shot(page, "system_tab")
    page.click("#step-bars .steprow:nth-child(2)")  # step 1: 2000..2230 (the profile's end), padded by 10 ns
    wait_idle(page)
    q = url_params(page)
    t0, t1 = int(q["t0"][0]), int(q["t1"][0])
    assert q["tab"] == ["system"] and t0 <= 2000 and t1 >= 2230 and t1 - t0 == 250
    assert page.evaluate("() => [window.__nprof.timeline.layout.t0, window.__nprof.timeline.layout.t1]") == [t0, t1]


def test_host_rows_first_and_counter_label_is_the_data_max(page, sysview):
    base, sys_id, _dev, _get = sysview
    page.goto(f"{base}/profile/{sys_id}?t0=1000&t1=1040")  # a window with no copy in flight
    wait_idle(page)
    keys = page.evaluate("() => window.__nprof.timeline.layout.rows.map(r => r.key)")
    assert keys[:6] == ["cpu:1", "nprof.compile", "nprof.launch", "h2d:nc0", "d2h:nc0", "nc:0"]
    scale = page.evaluate("() => window.__nprof.timeline.lastInfo.counterScale.get('counter:pending_dma')")
    assert scale["max"] in (0, None) and scale["scale"] == 1
    page.goto(f"{base}/profile/{sys_id}?t0=1030&t1=1060")  # the FW input copy 1040..1050 is pending
    wait_idle(page)
    assert page.evaluate("() => window.__nprof.timeline.lastInfo.counterScale.get('counter:pending_dma').max") == 1


def test_links_both_ways(page, sysview):
    base, sys_id, dev_id, get = sysview
    hit = get(f"/api/profiles/{sys_id}/search?hlo_name={FW}%231&opcode=nc_exec_running")["hits"][0]
    page.goto(f"{base}/profile/{sys_id}?ev={hit['id']}")
    page.wait_for_selector("a#device-link")
    wait_idle(page)
    assert page.get_attribute("a#device-link", "href") == f"/profile/{dev_id}"
    assert page.locator("#system-link").count() == 0 and page.locator("#tab-system").is_visible()
    page.click("a#device-link")
    page.wait_for_selector("#system-link[data-ready='1']")
    wait_idle(page)
    assert page.url.split("?")[0].endswith(f"/profile/{dev_id}") and page.locator("#system-link").is_visible()
    assert not page.locator("#tab-system").is_visible()  # a device profile has no System tab
    shot(page, "system_device_page")
    page.click("#system-link")
    page.wait_for_selector("a#device-link")
    wait_idle(page)
    q = url_params(page)
    t0, t1 = int(q["t0"][0]), int(q["t1"][0])
    assert page.url.split("?")[0].endswith(f"/profile/{sys_id}") and q["ev"] == [str(hit["id"])]
    assert t0 <= hit["ts"] and hit["ts"] + hit["dur"] <= t1 and t1 - t0 < 10 * hit["dur"] + 2000
    assert page.inner_text("#details-title") == "nc_exec_running"
    sel = page.evaluate("() => window.__nprof.timeline.overlays.selected.id")
    assert sel == hit["id"]
    # an execution without a device profile says so instead of linking
    other = get(f"/api/profiles/{sys_id}/search?hlo_name={FW}%230&opcode=nc_exec_running")["hits"][0]
    page.goto(f"{base}/profile/{sys_id}?ev={other['id']}")
    page.wait_for_selector("span#device-link")
    assert "no device profile" in page.inner_text("span#device-link")


def test_track_groups_hide_and_show_with_the_url(page, sysview):
    base, sys_id, _dev, _get = sysview
    page.goto(f"{base}/profile/{sys_id}")
    wait_idle(page)
    keys = lambda: page.evaluate("() => window.__nprof.timeline.layout.rows.map(r => r.key)")  # noqa: E731
    before = keys()
    assert any(k.startswith("cpu:") for k in before) and any(k.startswith("nc:") for k in before)
    groups = page.eval_on_selector_all("#track-picker input", "els => els.map(e => e.dataset.group)")
    assert "host" in groups and "device" in groups
    assert "incomplete: the script exited with status 3" in page.locator("#incomplete-note").inner_text()
    page.uncheck("#track-picker input[data-group=host]")
    wait_idle(page)
    after = keys()
    assert after == [k for k in before if not k.startswith("cpu:")]
    assert url_params(page)["hide"] == ["host"]
    page.reload()
    wait_idle(page)
    assert keys() == after and not page.is_checked("#track-picker input[data-group=host]")
    page.check("#track-picker input[data-group=host]")
    wait_idle(page)
    assert keys() == before and "hide" not in url_params(page)
