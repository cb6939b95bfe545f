"""A dashboard as a person sees it: Debian's Chromium, headless, driven by Playwright (its
browser download never used: ``executable_path``), opens a Perses dashboard and saves a PNG
per row of panels (each Grid layout, ``[data-testid=panel-group]``), with the text each row
shows (legends, values, "No data") for the test to read.

The flags are the machine's: its network is closed, so Chromium's own background connections
(updates, sync, safe browsing) are turned off rather than refused at every start."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kappa_operator.dashboard.perses import panel_key

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",  # as root, in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROW = "[data-testid=panel-group]"
PANEL = "[data-testid=panel]"


@dataclass(frozen=True)
class RowShot:
    title: str
    png: Path
    text: str
    """What the row shows as text: panel titles, legend entries and values, "No data"."""


def chromium() -> str:
    found = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if found is None:
        raise RuntimeError("the dashboard's screenshots need Debian's Chromium: apt-get install chromium")
    return found


def row_screenshots(url: str, out: Path, width: int = 1600, settle_ms: int = 3000) -> list[RowShot]:
    """Each row of the dashboard at ``url`` as ``out/<row>.png``, once every panel has drawn
    (no progress indicator left, then ``settle_ms`` for the charts' animation)."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 1200}, device_scale_factor=1)
            page.goto(url, wait_until="networkidle", timeout=120_000)
            page.wait_for_selector(PANEL, timeout=60_000)
            page.wait_for_function(
                "() => document.querySelectorAll('[role=progressbar], .MuiSkeleton-root').length === 0",
                timeout=60_000,
            )
            # the whole dashboard in one viewport: its variables' bar is sticky, and would cover
            # the top of every row scrolled under it
            height = page.evaluate("document.documentElement.scrollHeight")
            page.set_viewport_size({"width": width, "height": int(height) + 100})
            page.wait_for_timeout(settle_ms)
            rows = page.locator(ROW)
            for index in range(rows.count()):
                row = rows.nth(index)
                title = row.locator("[data-testid=panel-group-header]").inner_text().strip().splitlines()[0]
                png = out / f"{index + 1:02d}-{panel_key(title)}.png"
                row.screenshot(path=str(png))
                shots.append(RowShot(title, png, row.inner_text()))
        finally:
            browser.close()
    return shots
