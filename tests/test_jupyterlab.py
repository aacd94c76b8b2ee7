"""Real browser, real JupyterLab: the environment notebook runs and its widget is live.

A throw-away ``jupyter lab`` serves a temporary copy of ``notebooks/01_environment.ipynb``
(nothing is written into the repo; results go to a temporary ``HYPORT_RESULTS_DIR``).
Debian's Chromium, driven by Playwright, runs all cells from the Run menu, checks that
no cell failed and the checks table rendered, then clicks the "Re-probe" button and
watches the kernel answer through the widget. Every request must stay on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from browser import CHROMIUM_ARGS, chromium_path
from jupyterlab_session import (guard_network, open_notebook, run_all_cells,
                                save_notebook, start_lab, stop_lab)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "01_environment.ipynb"
STAGE = "01_environment"
VERDICTS = {"PASS", "WARN", "FAIL", "SKIP"}
REPROBE_S = 120  # one collect_environment() in the kernel takes ~1-2 s

# JupyterLab 4.6 renders error outputs with the stderr mime type, like warnings; the
# error mime type is checked too in case a later version tells them apart.
ERROR_OUTPUT = ('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"], '
                '.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]')
WIDGET = '.widget-vbox:has(button.widget-button:has-text("Re-probe"))'

# Records every text the status widget shows, so a transient "probing..." is seen even
# if it is replaced before Playwright polls.
WATCH_STATUS = """el => {
    window.__hyportStatus = [el.textContent];
    new MutationObserver(() => window.__hyportStatus.push(el.textContent))
        .observe(el, {childList: true, subtree: true, characterData: true});
}"""


def _require_chromium() -> str:
    """Chromium's path; skipped without one, except in CI where it must be installed."""
    path = chromium_path()
    if path is None and not os.environ.get("CI"):
        pytest.skip("no Chromium (install it with scripts/setup.sh --browser)")
    assert path, "CI is set but Chromium is missing: run scripts/setup.sh --browser"
    return path


def _checks_table(page) -> list[dict]:
    """Rows of the first rendered table whose header is name | verdict | reason."""
    return page.evaluate("""() => {
        for (const t of document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output table')) {
            const head = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
            if (head.join('|') !== 'name|verdict|reason') continue;
            return [...t.querySelectorAll('tbody tr')].map(tr => {
                const c = [...tr.querySelectorAll('td')].map(td => td.textContent.trim());
                return {name: c[0], verdict: c[1], reason: c[2]};
            });
        }
        return [];
    }""")


def test_environment_notebook_runs_in_jupyterlab_and_reprobe_is_live(tmp_path):
    chromium = _require_chromium()
    from playwright.sync_api import expect, sync_playwright

    repo_digest = hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest()
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    results = tmp_path / "results"
    started = time.time()

    server = start_lab(root, tmp_path / "jupyter", {"HYPORT_RESULTS_DIR": str(results)})
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = context.new_page()
                page.set_default_timeout(60_000)
                network = guard_network(context, page)

                open_notebook(page, server, NOTEBOOK.name)
                prompts = run_all_cells(page)

                # no cell failed: nothing rendered as an error, and no error in the saved file
                assert page.locator(ERROR_OUTPUT).count() == 0
                tracebacks = page.locator(".jp-NotebookPanel .jp-OutputArea-output",
                                          has_text="Traceback (most recent call last)")
                assert tracebacks.count() == 0, tracebacks.first.inner_text()
                save_notebook(page)
                saved = json.loads((root / NOTEBOOK.name).read_text())
                errors = [o for c in saved["cells"] for o in c.get("outputs", [])
                          if o["output_type"] == "error"]
                assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
                # every code cell ran, and the file on disk is the executed notebook
                assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), prompts
                code = [c for c in saved["cells"] if c["cell_type"] == "code"]
                assert len(code) == len(prompts) and all(c["execution_count"] for c in code)

                # the results file went to the temporary results dir, written by this run
                result_path = results / f"{STAGE}.json"
                assert result_path.exists(), sorted(p.name for p in results.glob("*"))
                assert result_path.stat().st_mtime >= started - 1
                result = json.loads(result_path.read_text())
                assert result["stage"] == STAGE and result["verdict"] in VERDICTS

                # the checks table rendered, one row per recorded check
                rows = _checks_table(page)
                assert rows, "no name | verdict | reason table in the outputs"
                assert {r["verdict"] for r in rows} <= VERDICTS
                assert [r["name"] for r in rows] == [c["name"] for c in result["data"]["checks"]]

                # the widget is live: a click makes the kernel probe again and update it
                widget = page.locator(WIDGET)
                widget.wait_for(state="visible", timeout=60_000)
                assert widget.count() == 1
                button = widget.locator("button.widget-button")
                status = widget.locator(".widget-html-content")
                output = widget.locator(".widget-output")
                assert "Environment:" in status.inner_text()
                assert output.locator(".jp-OutputArea-output").count() == 0  # nothing until a click
                status.evaluate(WATCH_STATUS)
                button.scroll_into_view_if_needed()
                button.click()
                output.locator("table").first.wait_for(state="visible", timeout=REPROBE_S * 1000)
                page.wait_for_function(
                    """() => { const h = window.__hyportStatus || [];
                               return h.length > 1 && h[h.length - 1].includes('Environment:'); }""",
                    timeout=REPROBE_S * 1000)
                history = page.evaluate("window.__hyportStatus")
                assert "probing..." in history, history
                assert history.index("probing...") < len(history) - 1
                expect(button).to_be_enabled()  # re-enabled once the probe returned
                reprobed = output.locator("table", has=page.locator("thead th", has_text="verdict"))
                assert reprobed.count() >= 1
                assert reprobed.first.locator("tbody tr").count() == len(rows)

                assert network.requests, "the page made no request at all"
                assert any("/api/kernels/" in u for u in network.websockets), network.websockets
                assert network.blocked == [], network.blocked
                assert network.off_host() == [], network.off_host()
                assert network.page_errors == [], network.page_errors
            finally:
                browser.close()
    except BaseException:
        print(server.log_tail())  # shown by pytest only when the test fails
        raise
    finally:
        stop_lab(server)

    assert server.proc.returncode is not None
    assert hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest() == repo_digest
