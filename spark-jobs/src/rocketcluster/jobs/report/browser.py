"""Open a report in a real headless Chromium and say what a person would see: errors
in the console, plots that did not render, anything the page tried to fetch.

Playwright drives the system's Chromium (Debian's ``chromium`` package) through
``executable_path``: Playwright's own browser download is not reachable where the
cluster runs. Every request other than the report file itself is refused and counted:
the report must read offline.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

CANDIDATES: Final = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FALLBACK_PATHS: Final = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
ENV_VAR: Final = "ROCKETCLUSTER_CHROMIUM"
WIDTH: Final = 1280
HEIGHT: Final = 900
TIMEOUT_MS: Final = 60_000

# Per plot: its name and the size its <svg> is drawn at, in CSS pixels.
_MEASURE: Final = """
() => Array.from(document.querySelectorAll("figure.plot")).map(f => {
  const svg = f.querySelector("svg");
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const drawn = svg ? svg.querySelectorAll("path, use, rect").length : 0;
  return {name: f.dataset.plot || "", width: box.width, height: box.height, drawn: drawn};
})
"""


class ChromiumMissingError(RuntimeError):
    """No Chromium on this machine to open the report with."""


def find_chromium() -> Path:
    """The Chromium to drive: $ROCKETCLUSTER_CHROMIUM, else the first on PATH, else
    Debian's install location."""
    override = os.environ.get(ENV_VAR)
    if override:
        if Path(override).is_file():
            return Path(override)
        raise ChromiumMissingError(f"{ENV_VAR}={override} is not a file")
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return Path(found)
    for path in FALLBACK_PATHS:
        if Path(path).is_file():
            return Path(path)
    raise ChromiumMissingError(
        "no Chromium found to open the report with: install Debian's package "
        "(`apt-get install chromium`, or `make debs`), or point "
        f"{ENV_VAR} at a Chromium or Chrome binary"
    )


@dataclass(frozen=True)
class BrowserCheck:
    """What the browser saw; ``ok`` when a person would see the whole report."""

    screenshot: Path
    console_errors: tuple[str, ...] = ()
    page_errors: tuple[str, ...] = ()
    failed_requests: tuple[str, ...] = ()
    plots_found: tuple[str, ...] = ()
    plots_rendered: tuple[str, ...] = ()
    page_height: int = 0
    browser_version: str = ""

    @property
    def plots_not_rendered(self) -> tuple[str, ...]:
        return tuple(p for p in self.plots_found if p not in self.plots_rendered)

    @property
    def ok(self) -> bool:
        return (
            not (
                self.console_errors
                or self.page_errors
                or self.failed_requests
                or self.plots_not_rendered
            )
            and self.page_height > 0
        )


def check_in_browser(
    html_path: Path, screenshot: Path, *, chromium: Path | None = None
) -> BrowserCheck:
    """Load ``html_path`` from disk in headless Chromium, measure every plot, and
    write a full-page PNG to ``screenshot``."""
    from playwright.sync_api import sync_playwright

    executable = chromium or find_chromium()
    page_url = html_path.resolve().as_uri()
    console: list[str] = []
    errors: list[str] = []
    refused: list[str] = []

    def route(r: Any) -> None:
        url = r.request.url
        if url == page_url or url.startswith("data:"):
            r.continue_()
        else:
            refused.append(url)  # the report promised to need nothing from anywhere
            r.abort("blockedbyclient")

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            console.append(msg.text)

    screenshot.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(executable), headless=True)
        try:
            context = browser.new_context(
                viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=1
            )
            context.route("**/*", route)
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.on("console", on_console)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on(
                "requestfailed",
                lambda req: None if req.url in refused else refused.append(req.url),
            )
            page.goto(page_url, wait_until="load")
            plots = page.evaluate(_MEASURE)
            height = int(page.evaluate("document.documentElement.scrollHeight"))
            page.screenshot(path=str(screenshot), full_page=True)
            version = browser.version
        finally:
            browser.close()
    found = tuple(str(p["name"]) for p in plots)
    rendered = tuple(
        str(p["name"]) for p in plots if p["width"] > 0 and p["height"] > 0 and p["drawn"] > 0
    )
    return BrowserCheck(
        screenshot=screenshot,
        console_errors=tuple(console),
        page_errors=tuple(errors),
        failed_requests=tuple(refused),
        plots_found=found,
        plots_rendered=rendered,
        page_height=height,
        browser_version=version,
    )
