"""The CC Aggregated view of a torchrun-style group in Chromium: device waits (simulated) and host waits
(measured) each drawn and tabled on their own clock, never a box the tables do not state.

Two rank profiles shaped like `nprof capture -- torchrun` writes them: rank 1 launched its graph 80 ms after
rank 0; the model says nobody waited on the device, rank 0's host waited 80 ms in the exchange, and a gloo
all-reduce where rank 0 waited 2 us on the host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nprof.profile import Profile, ProfileInfo
from tests.browser import CHROMIUM, free_port, launch_chromium, start_view, stop

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SKEW = 80_000_000
BASE = 1_790_000_000_000_000_000

if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


def _rank(rank: int) -> Profile:
    """Rank `rank` of the job (module doc), on the job's clock (ts 0 = the job origin)."""
    launch = 1_000_000 + rank * SKEW
    gloo_at = 200_000_000 + rank * 2_000
    ins = {
        "id": [0, 1, 2, 3, 4],
        "ts": [launch, launch, launch + 30_000, launch + 50_000, gloo_at],  # each host enters the exchange at +50 us
        "duration": [SKEW + 100_000 - rank * SKEW, 55_000, 5_000, SKEW + 20_000 - rank * SKEW, 9_000 - rank * 2_000],
        "engine": ["other", "other", "cc", "other", "cc"],
        "track": ["nprof.launch", "nc:0", "cc:nc0", "nprof.exchange", "cc:gloo"],
        "opcode": ["nprof::launch", "nc_exec_running", "all-reduce", "nprof::exchange", "gloo:all_reduce"],
        "hlo_name": ["M#0", "M#0", "M#0", "all-reduce#0", "all-reduce#1"],
        "wait_ns": [0, 0, 0, SKEW if rank == 0 else 0, 2_000 if rank == 0 else 0],
    }
    cc = {
        "id": [0, 1],
        "kind": ["all-reduce", "all-reduce"],
        "bytes": [4096, 144],
        "rank": [rank, rank],
        "ranks": [[0, 1], [0, 1]],
        "ts": [launch + 30_000, gloo_at],
        "duration": [5_000, 9_000 - rank * 2_000],
        "wait_ns": [0, 2_000 if rank == 0 else 0],
        "algorithm": ["ring/neuronlink (simulated)", "gloo (host, measured)"],
    }
    meta = {"system": "1", "host": "vm", "system.job_origin_unix_ns": str(BASE),
            "trace.baseTimeNanoseconds": str(BASE), "trace.origin_ns": "0"}  # fmt: skip
    info = ProfileInfo(device="cpu", name=f"job rank {rank}", rank=rank, world_size=2, meta=meta)
    return Profile.build(info, instructions=ins, collectives=cc)


@pytest.fixture(scope="module")
def page_and_data(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("ccclocks")
    run = tmp / "run"
    run.mkdir()
    for r in (0, 1):
        _rank(r).save(run / f"profile_rank_{r}.ntff")
    port = free_port()
    proc, line = start_view(["-d", str(run), "--port", str(port), "--db", str(tmp / "db")], marker="/profile_cc/")
    gid = line.strip().rsplit("/", 1)[-1]
    try:
        with sync_api.sync_playwright() as p:
            browser = launch_chromium(p)
            pg = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(f"http://127.0.0.1:{port}/profile_cc/{gid}?agg=1")
            pg.wait_for_function("() => window.__nprof && window.__nprof.agg && window.__nprof.idle()", timeout=30000)
            yield pg, pg.evaluate("() => window.__nprof.agg.data")
            assert not errors, errors
            browser.close()
    finally:
        stop(proc)


def test_every_box_is_a_wait_the_tables_state_on_its_clock(page_and_data) -> None:
    page, data = page_and_data
    sim, gloo = data["ops"]
    assert (sim["clock"], sim["max_wait_ns"], sim["launch_skew_ns"], sim["host_max_wait_ns"]) == (
        "device",
        0,
        SKEW,
        SKEW,
    )
    assert (gloo["clock"], gloo["max_wait_ns"]) == ("host", 2_000)
    pieces = page.evaluate(
        "() => { const v = window.__nprof.agg; return v.data.ops.map((op) => op.ranks.map((w) => v.pieces(op, w))); }"
    )
    # the 80 ms launch skew is no device wait: no orange (device wait) box on any rank
    assert all(p[4] != "wait" or p[0] != "device" for rank in pieces[0] for p in rank)
    # rank 0's host wait box is exactly its measured wait, in the host lane, where its exchange started
    host = [p for p in pieces[0][0] if p[4] == "host wait"]
    assert host == [["host", sim["ranks"][0]["host_arrival"], sim["ranks"][0]["host_arrival"] + SKEW, host[0][3],
                     "host wait"]]  # fmt: skip
    # the gloo op's wait is drawn in the host lane with its measured length
    gw = [p for p in pieces[1][0] if p[4] == "wait"]
    assert gw and gw[0][0] == "host" and gw[0][2] - gw[0][1] == 2_000
    summary = page.locator(".cc-summary").inner_text()
    assert "device (simulated): total wait 0 ns" in summary and "host (measured): total wait 80" in summary
    assert "straggler: rank 1" in page.locator("#cc-host-straggler").inner_text()
    heads = page.locator("table.cc-ops thead th").all_inner_texts()
    assert "host wait (measured, max)" in heads and "clock" in heads
    legend = page.locator("#cc-legend").inner_text()
    assert "(simulated)" in legend and "(measured)" in legend


def test_hovering_the_host_wait_names_its_clock(page_and_data) -> None:
    page, data = page_and_data
    sim = data["ops"][0]
    w0 = sim["ranks"][0]
    page.evaluate("() => window.__nprof.agg.setWindow(0, window.__nprof.agg.data.t_max * 0.6)")
    x = page.evaluate(f"() => window.__nprof.agg.x({w0['host_arrival'] + SKEW / 2})")
    y = 32 + 2 + 5  # rank 0, host lane
    hit = page.evaluate(f"() => window.__nprof.agg.hit({x}, {y})")
    assert hit["piece"] == "host wait" and hit["op"]["id"] == 0
    box = page.locator("#cc-canvas").bounding_box()
    page.mouse.move(box["x"] + x, box["y"] + y)
    tip = page.locator("#tooltip")
    tip.wait_for(state="visible")
    assert "waited 80 ms for the other ranks (measured)" in tip.inner_text()
    assert "host clock (measured)" in tip.inner_text() and "simulated)" not in tip.inner_text().splitlines()[0]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "cc_aggregated_two_clocks.png"), full_page=True)


def test_the_wait_distribution_names_its_clocks(page_and_data) -> None:
    page, data = page_and_data
    assert {op["clock"] for op in data["ops"]} == {"device", "host"}
    note = page.locator("#cc-waits-clock").inner_text()
    assert "own clock" in note, note
