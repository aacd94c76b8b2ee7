"""Open a local HTML file in Debian's headless Chromium with the network blocked.

Playwright drives ``/usr/bin/chromium`` (never a downloaded browser). Every request
that is not ``file://`` is aborted and recorded; console errors and page errors are
collected. Used by the offline-report and JupyterLab tests, which also write the
README's pictures with ``HYPORT_UPDATE_SCREENSHOTS=1``::

    HYPORT_UPDATE_SCREENSHOTS=1 .venv/bin/python -m pytest -q tests/test_jupyterlab.py \
        tests/report/test_offline_report.py
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


REPO = Path(__file__).resolve().parents[1]
DOC_IMAGES = REPO / "docs" / "images"
UPDATE_SCREENSHOTS = "HYPORT_UPDATE_SCREENSHOTS"
SCREENSHOT_MAX_WIDTH = 1200
SCREENSHOT_MAX_BYTES = 200_000


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


@contextmanager
def open_offline(path: Path, viewport: dict | None = None) -> Iterator[tuple[object, PageVisit]]:
    """A Playwright page showing ``path`` with every request but ``file://`` and
    ``data:`` aborted; the yielded :class:`PageVisit` keeps collecting while it is used."""
    from playwright.sync_api import sync_playwright

    result = PageVisit()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport=viewport)

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
            yield page, result
        finally:
            browser.close()


def visit(path: Path, selectors: dict[str, str], screenshot: Path | None = None,
          clip_below: str | None = None) -> PageVisit:
    """Load ``path``; for each name -> CSS selector record the count and the first text.

    With ``screenshot``, the whole page is saved there; with ``clip_below`` as well, only
    the part from the top to the bottom of that selector's element, as a README picture
    (see :func:`save_readme_picture`).
    """
    viewport = {"width": SCREENSHOT_MAX_WIDTH, "height": 900} if clip_below else None
    with open_offline(path, viewport) as (page, result):
        for name, selector in selectors.items():
            loc = page.locator(selector)
            result.counts[name] = loc.count()
            # innerText for HTML, textContent for SVG (which has no innerText)
            result.texts[name] = (loc.first.evaluate("e => e.innerText ?? e.textContent ?? ''")
                                  if result.counts[name] else "")
        if screenshot and clip_below:
            box = page.locator(clip_below).bounding_box()
            clip = {"x": 0, "y": 0, "width": SCREENSHOT_MAX_WIDTH, "height": box["y"] + box["height"] + 16}
            save_readme_picture(page.screenshot(clip=clip, full_page=True), screenshot)
        elif screenshot:
            page.screenshot(path=str(screenshot), full_page=True)
    return result


def print_to_pdf(path: Path, target: Path) -> list[str]:
    """Print ``path`` to the PDF ``target`` as Chromium's "Save as PDF" does (print media,
    A4, backgrounds) with the network blocked; the text of each printed page, in order
    (read back with pypdf)."""
    from pypdf import PdfReader

    with open_offline(path) as (page, seen):
        page.pdf(path=str(target), format="A4", print_background=True)
    assert seen.blocked == [] and seen.page_errors == [], (seen.blocked, seen.page_errors)
    return [p.extract_text() or "" for p in PdfReader(str(target)).pages]


def readme_picture_path(tmp_path: Path, name: str) -> Path:
    """``docs/images/<name>`` with HYPORT_UPDATE_SCREENSHOTS=1, else the test's tmp."""
    if os.environ.get(UPDATE_SCREENSHOTS) == "1":
        DOC_IMAGES.mkdir(exist_ok=True)
        return DOC_IMAGES / name
    return tmp_path / name


def save_readme_picture(raw: bytes, target: Path) -> Path:
    """A README-sized copy of a screenshot: at most 1200 px wide, 256 colours (flat UI
    colours stay exact: no dithering), optimised; asserted under 200 KB."""
    from PIL import Image

    image = Image.open(io.BytesIO(raw)).convert("RGB")
    if image.width > SCREENSHOT_MAX_WIDTH:
        height = round(image.height * SCREENSHOT_MAX_WIDTH / image.width)
        image = image.resize((SCREENSHOT_MAX_WIDTH, height), Image.Resampling.LANCZOS)
    colours = len(image.getcolors(maxcolors=1 << 24))
    assert colours > 50, f"the screenshot is nearly blank ({colours} colours)"
    small = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    partial = target.with_name(target.name + ".partial")
    small.save(partial, format="PNG", optimize=True)
    partial.replace(target)
    assert target.stat().st_size <= SCREENSHOT_MAX_BYTES, (target, target.stat().st_size)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python tests/browser.py RUN_DIR NAME``: the README picture ``docs/images/NAME`` of a
    report's index (the stages at a glance), for runs no test makes (the real-model report)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("run_dir", type=Path, help="a hyport report run folder (holds index.html)")
    parser.add_argument("name", help="the picture's file name under docs/images")
    args = parser.parse_args(argv)
    DOC_IMAGES.mkdir(exist_ok=True)
    seen = visit(args.run_dir / "index.html", {"cards": ".glance .card"}, screenshot=DOC_IMAGES / args.name,
                 clip_below=".glance + p.prov")
    if seen.blocked or seen.console_errors or not seen.counts["cards"]:
        print(f"{args.run_dir}: blocked {seen.blocked}, errors {seen.console_errors}, "
              f"{seen.counts['cards']} cards", file=sys.stderr)
        return 1
    print(DOC_IMAGES / args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
