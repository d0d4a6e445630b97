"""Shared fixtures of the browser tests: one `nprof view` server and one Chromium per test package.

The server holds a 20k-event synthetic profile (served with `nprof view -s`), the tiny hand-checked
profile, a copy of it marked as a CPU capture, one marked as simulated on trn3 (assumed figures), and a
4-rank all-reduce group (rank 2 late). Tests wait for the page's readiness hook (`window.__nprof.idle()`),
never for fixed sleeps. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from nprof.arch.presets import get_preset
from nprof.store.synthetic import synthetic_profile
from tests.browser import CHROMIUM, free_port, launch_chromium, nprof_command, start_view, stop
from tests.conftest import tiny_profile
from tests.multiworker.kit import straggler_run

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _ingest(path: Path, db: Path, *extra: str, directory: bool = False) -> str:
    """Ingest a profile file (or a worker directory) into `db` with `nprof view --ingest-only`; its id."""
    env = {**os.environ, "NPROF_NO_PROGRESS": "1"}
    out = subprocess.run(
        nprof_command("view", "-d" if directory else "-s", str(path), "--ingest-only", "--db", str(db), *extra),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    return re.search(r'Profile "([^"]+)" is ready', out).group(1)


class Server:
    def __init__(self, base: str, proc: subprocess.Popen, ids: dict[str, str], tmp: Path, db: Path):
        self.base = base
        self.proc = proc
        self.ids = ids
        self.tmp = tmp
        self.db = db

    def api(self, path: str, method: str = "GET", body: object | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    tmp = tmp_path_factory.mktemp("viewer")
    db = tmp / "store"
    tiny = tiny_profile()
    tiny_id = _ingest(tiny.save(tmp / "tiny.ntff"), db)
    cpu = replace(tiny, info=replace(tiny.info, device="cpu", name="tiny-cpu", preset=None))
    cpu_id = _ingest(cpu.save(tmp / "tiny_cpu.ntff"), db)
    t3_meta = {**tiny.info.meta, "preset_assumptions": get_preset("trn3").assumptions}
    trn3 = replace(tiny, info=replace(tiny.info, name="tiny-trn3", preset="trn3", meta=t3_meta))
    trn3_id = _ingest(trn3.save(tmp / "tiny_trn3.ntff"), db)
    syn_path = synthetic_profile(20_000, seed=3).save(tmp / "synthetic.ntff")
    straggler_run(tmp / "allreduce")  # 4 ranks meeting at one all-reduce, rank 2 late
    cc_group = _ingest(tmp / "allreduce", db, directory=True)
    port = free_port()
    proc, line = start_view(["-s", str(syn_path), "--port", str(port), "--db", str(db)])
    syn_id = line.strip().rsplit("/", 1)[-1]
    ids = {"tiny": tiny_id, "cpu": cpu_id, "syn": syn_id, "cc": cc_group, "trn3": trn3_id}
    srv = Server(f"http://127.0.0.1:{port}", proc, ids, tmp, db)
    yield srv
    stop(proc)


@pytest.fixture(scope="package")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    ctx.close()
    assert not errors, f"uncaught page errors: {errors}"


def wait_idle(pg, timeout: float = 15000) -> None:
    pg.wait_for_function("() => window.__nprof && window.__nprof.idle()", timeout=timeout)


def open_profile(pg, server: Server, which: str, query: str = "") -> None:
    pg.goto(f"{server.base}/profile/{server.ids[which]}{query}")
    wait_idle(pg)


def shot(pg, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def url_params(pg) -> dict[str, list[str]]:
    return parse_qs(urlparse(pg.url).query)


def event_point(pg, row: str, t: float) -> tuple[float, float]:
    """Page coordinates of time `t` on timeline row `row` (from the layout the page drew)."""
    x, y = pg.evaluate(
        """([row, t]) => { const L = window.__nprof.timeline.layout; const r = L.byKey.get(row);
             return [L.x(t), r.y + r.h / 2]; }""",
        [row, t],
    )
    box = pg.locator("#timeline canvas.tl-over").bounding_box()
    return box["x"] + x, box["y"] + y
