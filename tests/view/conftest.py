"""The browser for the page tests: Debian's Chromium, driven headless through Playwright.

Never ``playwright install`` (it downloads a browser): CI installs the ``chromium``
package (.ci/run). Without Playwright or Chromium the browser tests skip saying
"not installed", which tests/conftest.py turns into a failure under CI=true.
Screenshots go to ``tmp/artefacts/`` at the repository root (ignored by git).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTEFACTS = ROOT / "tmp" / "artefacts"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed "
                                                                  '(pip install "pase[view]")')
    path = chromium_path()
    if path is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=ARGS)
        yield b
        b.close()


class Opened:
    """A page opened from a file, with every console error and page error it raised."""

    def __init__(self, browser, path: Path):
        self.errors: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.requests: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_function("window.paseView && window.paseView.ready")

    def screenshot(self, name: str) -> Path:
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        out = ARTEFACTS / name
        self.page.screenshot(path=str(out))
        return out

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_page(browser):
    opened: list[Opened] = []

    def open_(path: Path) -> Opened:
        o = Opened(browser, path)
        opened.append(o)
        return o

    yield open_
    for o in opened:
        o.close()


# The new user's gpt2 example as a tensor-parallel plan: Megatron-LM's tp=2, dp=4 (the
# solver's own answer for it may change with the cost model; this layout does not).
GPT2_TP = ["view", "gpt2", "-p", "8", "--model-option", "layers=2", "--cluster", "dgx-a100",
           "--layout", "tp=2,dp=4", "--micro-batch", "4"]


@pytest.fixture(scope="session")
def gpt2_tp_page(tmp_path_factory):
    """``(page path, argv)`` of the gpt2 tp=2,dp=4 page, made once by the command."""
    from pase.cli import main

    out = tmp_path_factory.mktemp("view") / "gpt2_tp.html"
    argv = GPT2_TP + ["-o", str(out)]
    assert main(argv) == 0
    return out, argv
