"""Viewer benchmark: time to first timeline paint and pan frame times in headless Chromium.

Usage: python bench/first_paint.py [--events 10000000] [--runs 3] [--width 1600] [--height 1000]

Generates (once, cached in bench/out/) a synthetic profile with `--events` events
(`nprof.store.synthetic`), starts `nprof view -s PROFILE --port P --db TMP` as a user
would (ingest time is printed separately), then in Debian's Chromium:
* first paint: navigation start -> the first timeline draw with data from the viewport
  API (the page records `performance.now()` at that draw), cold (first load) and warm;
* pan: 120 animation frames each panning the window by 1 % (the timeline redraws the
  last response at once and re-queries after a debounce), reporting draw time per frame
  and the frame interval, then the viewport request latency seen by the page.
Goal (docs/architecture.md, Performance goals): first paint <= 1.5 s for 10^7 events.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.browser
from tests.browser import free_port, launch_chromium, start_view, stop

OUT = Path(__file__).resolve().parent / "out"

PAN_JS = """async (frames) => {
  const v = window.__nprof.view, tl = window.__nprof.timeline;
  const n0 = tl.drawMs.length;
  const stamps = [];
  await new Promise((done) => {
    let i = 0;
    const step = (t) => {
      stamps.push(t);
      if (i++ >= frames) return done();
      const span = v.st.t1 - v.st.t0;
      v.setWindow(v.st.t0 + span * 0.01, v.st.t1 + span * 0.01, false);
      requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  });
  const gaps = stamps.slice(1).map((t, i) => t - stamps[i]);
  return {draw: tl.drawMs.slice(n0), gaps};
}"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def make_profile(n: int) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"synthetic_{n}.ntff"
    if not path.exists():
        from nprof.store.synthetic import synthetic_profile

        t = time.perf_counter()
        synthetic_profile(n).save(path)
        print(f"generated {n:,} events in {time.perf_counter() - t:.1f} s -> {path}")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=3, help="warm first-paint runs after the cold one")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1000)
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    profile = make_profile(args.events)
    db = Path(tempfile.mkdtemp(prefix="nprof-bench-"))
    port = free_port()
    t = time.perf_counter()
    try:
        proc, line = start_view(["-s", str(profile), "--port", str(port), "--db", str(db)], capture_stderr=False)
    except RuntimeError as exc:
        print(f"nprof view failed: {exc}")
        shutil.rmtree(db, ignore_errors=True)
        return 1
    try:
        print(f"nprof view: ingest + start {time.perf_counter() - t:.2f} s for {args.events:,} events")
        url = f"http://127.0.0.1:{port}/" + line.strip().split("/", 3)[3]
        with sync_playwright() as p:
            browser = launch_chromium(p)
            paints = []
            for run in range(1 + args.runs):
                ctx = browser.new_context(viewport={"width": args.width, "height": args.height})
                page = ctx.new_page()
                page.goto(url)
                page.wait_for_function("() => window.__nprof && window.__nprof.idle()", timeout=60000)
                fp = page.evaluate("() => window.__nprof.view.metrics.firstPaint")
                vp = page.evaluate("() => window.__nprof.view.metrics.viewportMs[0]")
                items = int(page.get_attribute("#timeline", "data-items"))
                label = "cold" if run == 0 else f"warm{run}"
                print(
                    f"first paint ({label}): {fp:.0f} ms  (viewport request {vp:.0f} ms, {items:,} items drawn, "
                    f"{args.width}x{args.height})"
                )
                if run:
                    paints.append(fp)
                if run == args.runs:
                    page.evaluate("() => window.__nprof.view.setWindow(0, (window.__nprof.view.tmax) / 50, true)")
                    page.wait_for_function("() => window.__nprof.idle()", timeout=60000)
                    n_vp = page.evaluate("() => window.__nprof.view.metrics.viewportMs.length")
                    res = page.evaluate(PAN_JS, 120)
                    page.wait_for_function("() => window.__nprof.idle()", timeout=60000)
                    lat = page.evaluate(f"() => window.__nprof.view.metrics.viewportMs.slice({n_vp})")
                    d, g = res["draw"], res["gaps"]
                    print(
                        f"pan ({len(g)} frames, 1 % per frame, window 1/50 of the profile): draw p50 "
                        f"{statistics.median(d):.1f} ms p95 {pct(d, 95):.1f} ms max {max(d):.1f} ms; "
                        f"frame interval p50 {statistics.median(g):.1f} ms p95 {pct(g, 95):.1f} ms"
                    )
                    if lat:
                        print(
                            f"viewport requests during/after the pan: {len(lat)}, latency p50 "
                            f"{statistics.median(lat):.0f} ms p95 {pct(lat, 95):.0f} ms"
                        )
                ctx.close()
            browser.close()
        if paints:
            print(f"first paint warm median {statistics.median(paints):.0f} ms (goal <= 1500 ms)")
    finally:
        stop(proc, timeout=30)
        shutil.rmtree(db, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
