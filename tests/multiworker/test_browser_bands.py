"""The CC Aggregated view of 64 ranks in Chromium with level of detail over ranks (`?rows=16`: bands of 4),
the wait distribution panel, and a rank of a large group ingested when first opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import CHROMIUM, free_port, launch_chromium, start_view, stop
from tests.multiworker.kit import delayed_run

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
N, LATE = 64, 9

if not Path(CHROMIUM).exists():
    pytest.skip("Debian's chromium is not installed", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("bands")
    delayed_run(tmp / "output", N, LATE, 4000.0)
    port = free_port()
    proc, line = start_view(["-d", str(tmp / "output"), "--port", str(port), "--db", str(tmp / "db")],
                            marker="/profile_cc/")  # fmt: skip
    yield f"http://127.0.0.1:{port}", line.strip().rsplit("/", 1)[-1]
    stop(proc)


def _ready(page, what: str) -> None:
    page.wait_for_function(f"() => window.__nprof && window.__nprof.{what} && window.__nprof.idle()", timeout=30000)


def test_bands_waits_and_lazy_rank(server) -> None:
    base, gid = server
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/profile_cc/{gid}?agg=1&rows=16")
        _ready(page, "agg")
        data = page.evaluate("() => window.__nprof.agg.data")
        bands = data["lod"]["bands"]
        assert len(bands) == 16 and [(b["first"], b["last"]) for b in bands] == [(4 * i, 4 * i + 3) for i in range(16)]
        assert data["straggler"] == LATE and len(data["ranks"]) == N
        # the rank-band x operation matrix: one row per band, the straggler's band shows a spread of waits
        rows = page.locator("table.cc-bands tbody tr").all_inner_texts()
        assert len(rows) == 16 and rows[2].startswith("8–11") and "0 ns–4 µs" in rows[2].replace("\u2009", " ")
        assert page.locator("table.cc-ranks tbody tr").first.inner_text().split()[0] == str(LATE)
        # hovering band 2 (ranks 8-11) inside the operation says min / median / max and the last to arrive
        view_rowh = page.evaluate("() => window.__nprof.agg.rowH")
        mid = (bands[2]["ops"][0]["arrival"][1] + data["ops"][0]["start"]) / 2
        x = page.evaluate(f"() => window.__nprof.agg.x({mid})")
        hit = page.evaluate(f"() => window.__nprof.agg.hit({x}, {32 + 2 * view_rowh + view_rowh / 2})")
        assert hit["band"]["first"] == 8 and "last to arrive in this band: rank 9" in " ".join(hit["lines"])
        # the wait distribution of op 0: N waits, 60 ranks waited 4 us, the late rank first in "last to arrive"
        page.select_option("#cc-waits-op", "0")
        page.wait_for_function("() => window.__nprof.idle() && document.querySelector('.cc-latest')")
        first = page.locator(".cc-latest tbody tr").first.inner_text().split()
        assert first[0] == str(LATE)
        assert page.locator("#cc-hist .cc-hbar").count() == 20
        assert page.locator("#cc-waits-clock").inner_text() == "waits on the device clock (simulated)"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "cc_bands.png"), full_page=True)
        # more ranks than tabs: a picker; opening a rank ingests it first
        page.select_option("#rank-pick", "5")
        page.wait_for_url(f"**/profile_cc/{gid}?rank=5")
        _ready(page, "view")
        assert page.locator(".rank-tabs a.tab.on").inner_text() == "Rank 5"
        browser.close()
        assert not errors, errors
