"""The report opened in a real headless Chromium (Debian's ``chromium``, driven by
Playwright): no console or page errors, nothing fetched, every plot drawn, and a
full-page PNG screenshot written. Skipped, loudly, only where Chromium is absent."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rocketcluster.jobs.report import render_report, write_report
from rocketcluster.jobs.report.browser import (
    WIDTH,
    BrowserCheck,
    ChromiumMissingError,
    check_in_browser,
    find_chromium,
)
from rocketcluster.jobs.report.sample import SAMPLE_NOW, sample_results, sample_summary

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = {
    "lag-messages",
    "lag-time",
    "sss-timeline-broker-0",
    "sss-timeline-broker-1",
    "sss-timeline-broker-2",
    "sss-timeline-broker-3",
    "tiering-savings",
}


@pytest.fixture(scope="module")
def chromium() -> Path:
    try:
        return find_chromium()
    except ChromiumMissingError as exc:
        pytest.fail(f"the browser test needs Chromium: {exc} (`make debs` installs it)")


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_report_renders_in_headless_chromium(chromium: Path, tmp_path: Path) -> None:
    html = render_report(
        sample_results(SAMPLE_NOW),
        sample_summary(),
        cluster="demo",
        generated_at_ms=SAMPLE_NOW + 42_000,
    )
    page = write_report(tmp_path / "report.html", html)
    shot = tmp_path / "report.png"
    check = check_in_browser(page, shot, chromium=chromium)
    assert check.console_errors == ()
    assert check.page_errors == ()
    assert check.failed_requests == ()
    assert set(check.plots_found) == PLOTS
    assert check.plots_not_rendered == ()
    assert check.ok, check
    data = shot.read_bytes()
    width, height = png_size(data)
    assert width == WIDTH
    assert height == check.page_height > 3_000  # the full page, not the viewport
    assert len(data) > 100_000


def write(tmp_path: Path, body: str) -> Path:
    return write_report(tmp_path / "page.html", f"<!DOCTYPE html><html><body>{body}</body></html>")


def test_check_catches_fetches_errors_and_empty_plots(chromium: Path, tmp_path: Path) -> None:
    """The checker itself: a page that reaches out, throws, and has a plot of zero
    size fails on each count."""
    page = write(
        tmp_path,
        '<img src="http://example.invalid/logo.png">'
        "<script>console.error('boom'); undefinedFunction();</script>"
        '<figure class="plot" data-plot="drawn"><svg width="10" height="10">'
        '<rect width="10" height="10"/></svg></figure>'
        '<figure class="plot" data-plot="flat"><svg width="10" height="0">'
        '<rect width="10" height="10"/></svg></figure>',
    )
    check: BrowserCheck = check_in_browser(page, tmp_path / "page.png", chromium=chromium)
    assert check.failed_requests == ("http://example.invalid/logo.png",)
    assert any("boom" in e for e in check.console_errors)
    assert any("undefinedFunction" in e for e in check.page_errors)
    assert check.plots_found == ("drawn", "flat")
    assert check.plots_rendered == ("drawn",)
    assert not check.ok
    assert (tmp_path / "page.png").read_bytes()[:8] == PNG_SIGNATURE


def test_find_chromium_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROCKETCLUSTER_CHROMIUM", str(tmp_path / "nope"))
    with pytest.raises(ChromiumMissingError, match="nope"):
        find_chromium()
    monkeypatch.delenv("ROCKETCLUSTER_CHROMIUM")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(
        "rocketcluster.jobs.report.browser.FALLBACK_PATHS", (str(tmp_path / "none"),)
    )
    with pytest.raises(ChromiumMissingError, match="apt-get install chromium"):
        find_chromium()
