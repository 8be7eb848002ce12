"""How big a `pase view` page of GPT-3 175B is, how long it takes to build and to draw.

    python benchmarks/view_size.py [--devices 16,64] [--repeat 3] [--no-browser]

For each device count: GPT-3 175B solved under the alpha-beta model on DGX A100
80GB nodes without a memory cap (it does not fit at p = 16 or 64 with one), then

- the page's size in MB (10^6 bytes) and its build seconds (re-pricing the
  strategy, the simulation for the Time tab, the page model, the HTML), the
  median of ``--repeat`` builds;
- the baseline in the same process: writing the plain strategy JSON
  (``Strategy.to_json``), its size and seconds, and the page's ratios to it;
- in Chromium (Playwright, as tests/view does), the seconds from navigation to
  the load event and the script's own drawing time (``window.paseView.drawMs``),
  the median of ``--repeat`` opens.

Results: benchmarks/results/view.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLUSTER = "dgx-a100-80gb"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


def draw_seconds(path: Path, repeat: int) -> tuple[float, float]:
    from playwright.sync_api import sync_playwright

    loads, draws = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(path.resolve().as_uri())
            page.wait_for_function("window.paseView && window.paseView.ready")
            loads.append(page.evaluate("performance.timing.loadEventEnd - "
                                       "performance.timing.navigationStart") / 1e3)
            draws.append(page.evaluate("window.paseView.drawMs") / 1e3)
            page.close()
        browser.close()
    return statistics.median(loads), statistics.median(draws)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="16,64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    import pase

    print(stamp())
    print("| p | page MB | build s | strategy JSON MB | JSON s | size ratio | time ratio | "
          "load s | draw s |")
    print("|---|---|---|---|---|---|---|---|---|")
    folder = Path(tempfile.mkdtemp(prefix="pase-view-size-"))
    for p in (int(x) for x in args.devices.split(",")):
        s = pase.solve("gpt3-175b", p, cost_model="alpha-beta", cluster=CLUSTER, memory_cap="none")
        page = folder / f"gpt3_175b_p{p}.html"
        _, build = timed(lambda s=s, page=page: pase.view(s, page, memory_cap="none"), args.repeat)
        plain = folder / f"gpt3_175b_p{p}.json"
        _, json_s = timed(lambda s=s, plain=plain: s.to_json(plain), args.repeat)
        mb, json_mb = page.stat().st_size / 1e6, plain.stat().st_size / 1e6
        load, draw = (None, None) if args.no_browser else draw_seconds(page, args.repeat)
        shown = "- | -" if load is None else f"{load:.3f} | {draw:.3f}"
        print(f"| {p} | {mb:.2f} | {build:.2f} | {json_mb:.2f} | {json_s:.3f} | "
              f"{mb / json_mb:.2f} | {build / json_s:.0f} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
