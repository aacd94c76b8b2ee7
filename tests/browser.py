"""Open a local HTML file in Debian's headless Chromium with the network blocked.

Playwright drives ``/usr/bin/chromium`` (never a downloaded browser). Every request
that is not ``file://`` is aborted and recorded; console errors and page errors are
collected. Used by the offline-report tests.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("HYPORT_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@dataclass
class PageVisit:
    blocked: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def visit(path: Path, selectors: dict[str, str], screenshot: Path | None = None) -> PageVisit:
    """Load ``path``; for each name -> CSS selector record the count and the first text."""
    from playwright.sync_api import sync_playwright

    result = PageVisit()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()

            def route(r):
                if r.request.url.startswith(("file://", "data:")):
                    r.continue_()
                else:
                    result.blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: result.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: result.page_errors.append(str(e)))
            page.on("requestfailed", lambda r: result.failed.append(r.url))
            page.goto(path.resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(300)
            for name, selector in selectors.items():
                loc = page.locator(selector)
                result.counts[name] = loc.count()
                result.texts[name] = loc.first.inner_text() if result.counts[name] else ""
            if screenshot:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return result
