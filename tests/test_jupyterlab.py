"""Real browser, real JupyterLab: every notebook runs there, and its widgets are live.

One throw-away ``jupyter lab`` (module fixture) serves temporary copies of the stage
notebooks (nothing is written into the repo; results go to a temporary
``HYPORT_RESULTS_DIR``, training into a temporary ``output_dir``). Debian's Chromium,
driven by Playwright, runs all cells of each from the Run menu and checks that no cell
failed; then, per notebook:

- 01: the checks table rendered; the "Re-probe" button makes the kernel probe again;
- 03: the card picker, switched to another card, shows that card's log tail;
- 04: the live loss plot (one display handle) was redrawn while torchrun trained, and
  the progress line ends "(finished)" at step N/N;
- 02, 05: they run without an error;
- every notebook: its form (made from the stage's Params) shows a bad value's one-line
  error under the field and runs nothing; with a changed value, "Run stage" runs the
  stage and the recorded result reflects the value;
- form runs (a worker thread): three of 03 in one kernel, one finished, one ended by its Stop,
  one by Kernel → Interrupt (INTERRUPTED, no card worker left, the kernel busy while each
  worked); one of 04 whose progress line and plot move three times before its Stop.

Every request must stay on 127.0.0.1. (The index of a real report run, opened offline in
Chromium: test_offline_report.py, on the session's five-stage run and on an ``--only 01``
run.) The screenshot of 04's live plot is taken every
time, into the test's temporary folder, or into ``docs/images/`` (a README picture, PNG,
at most 1200 px wide and 200 KB) when ``HYPORT_UPDATE_SCREENSHOTS=1`` (see browser.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from browser import (CHROMIUM_ARGS, SCREENSHOT_MAX_WIDTH, chromium_path, readme_picture_path,
                     save_readme_picture)
from hyport_lib.attention.params import Params as AttentionParams
from hyport_lib.environment.params import Params as EnvironmentParams
from hyport_lib.inference.params import Params as InferenceParams
from hyport_lib.params import ParameterError, parameter_fields, parse_text
from hyport_lib.results import STAGE_VERDICTS
from hyport_lib.results import VERDICTS as CHECK_VERDICTS
from hyport_lib.train.params import Params as TrainParams
from hyport_lib.weights.params import Params as WeightsParams
from jupyterlab_session import (LabServer, NetworkGuard, api, copy_notebook, open_notebook,
                                page_errors, save_notebook, saved_errors, shutdown_kernels,
                                start_lab, start_run_all, stop_lab, wait_for_run_all)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
VERDICTS = set(STAGE_VERDICTS)
REPROBE_S = 120  # one environment probe (stage.run) in the kernel takes ~1-2 s
PICK_S = 60  # a Dropdown change, answered by the kernel through the Output widget
VIEWPORT = {"width": 1400, "height": 1000}
SCREENSHOT_VIEWPORT = {"width": SCREENSHOT_MAX_WIDTH, "height": 800}

#: Stage 04 in the browser: 2 CPU processes and the notebook's own code, whose display
#: redraws the plot at most every 2 s. Steps take 0.1-0.3 s each on a loaded 2-core
#: machine, so 60 steps keep torchrun training for 6 s or more after the first metrics
#: line: the first plot and at least two redraws (one 2 s later, one by the end).
TRAIN_STEPS = 60

WIDGET_01 = '.widget-vbox:has(button.widget-button:has-text("Re-probe"))'
# the card picker: a box with a dropdown that is not the form or one of its rows, nor the run picker
WIDGET_03 = (".widget-vbox:not(.hyport-form):not(.hyport-form .widget-vbox):not(.hyport-compare)"
             ":has(.widget-dropdown select)")
FORM_RUN_S = 300  # a stage run from the form: 04's torchrun takes ~20 s to start on 2 cores

# Records every text the status widget shows, so a transient "probing..." is seen even
# if it is replaced before Playwright polls.
WATCH_STATUS = """el => {
    window.__hyportStatus = [el.textContent];
    new MutationObserver(() => window.__hyportStatus.push(el.textContent))
        .observe(el, {childList: true, subtree: true, characterData: true});
}"""

# Installed on the training cell before Run All: every distinct state of its outputs
# (the images' sources, hashed, and the progress line), so that each redraw of the one
# display handle is seen even though Playwright polls far less often than it changes.
WATCH_LIVE = """cell => {
    const hash = s => {  // FNV-1a over the data URI, and its length
        let h = 0x811c9dc5;
        for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193); }
        return (h >>> 0).toString(16) + ':' + s.length;
    };
    window.__hyportHash = hash;
    window.__hyportLive = [];
    const record = () => {
        const outputs = cell.querySelectorAll('.jp-OutputArea-output');
        const images = [...cell.querySelectorAll('.jp-OutputArea-output img')]
            .map(i => hash(i.getAttribute('src') || ''));
        const lines = [...cell.querySelectorAll('.jp-OutputArea-output code')].map(c => c.textContent);
        const state = {images, line: lines.join(' | '), outputs: outputs.length};
        const last = window.__hyportLive[window.__hyportLive.length - 1];
        if (!last || JSON.stringify(last) !== JSON.stringify(state)) window.__hyportLive.push(state);
    };
    new MutationObserver(record).observe(cell, {childList: true, subtree: true, characterData: true,
                                                attributes: true, attributeFilter: ['src']});
}"""


@dataclass
class Lab:
    """The module's JupyterLab server, browser and folders."""

    server: LabServer
    browser: object
    context: object  # one for the notebooks: JupyterLab's scripts are loaded once
    guard: NetworkGuard
    root: Path
    results: Path
    scratch: Path


def _require_chromium() -> str:
    """Chromium's path; skipped without one, except in CI where it must be installed."""
    path = chromium_path()
    if path is None and not os.environ.get("CI"):
        pytest.skip("no Chromium (install it with scripts/setup.sh --browser)")
    assert path, "CI is set but Chromium is missing: run scripts/setup.sh --browser"
    return path


def _digests() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(NOTEBOOKS.glob("*.ipynb"))}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    chromium = _require_chromium()
    from playwright.sync_api import sync_playwright

    before = _digests()
    base = tmp_path_factory.mktemp("jupyterlab")
    root, results = base / "root", base / "results"
    root.mkdir()
    server = start_lab(root, base / "jupyter", {"HYPORT_RESULTS_DIR": str(results)})
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport=VIEWPORT)
                yield Lab(server, browser, context, NetworkGuard(context), root, results, base)
            finally:
                browser.close()
    finally:
        stop_lab(server)
    assert server.proc.returncode is not None
    assert _digests() == before, "a notebook of the repo changed"


@contextmanager
def notebook_page(lab: Lab, viewport=VIEWPORT):
    """A new page on the lab, its network guarded; on the way out the page is closed and
    every kernel of the server stopped (the next test starts clean). The server's log
    is printed when the body fails (pytest shows it then)."""
    page = lab.context.new_page()
    try:
        page.set_viewport_size(viewport)
        page.set_default_timeout(60_000)
        network = lab.guard.watch(page)
        yield page, network
    except BaseException:
        print(lab.server.log_tail())
        raise
    finally:
        page.close()
        shutdown_kernels(lab.server)


def _run_all(page, lab: Lab, path: Path, during=None) -> tuple[list[str], dict]:
    """Run all cells of the open notebook (``during()`` while they run), save it; assert
    that no cell failed and that every code cell ran. Returns the prompts and the saved
    notebook."""
    start_run_all(page)
    if during is not None:
        during()
    prompts = wait_for_run_all(page)
    assert page_errors(page) == []
    save_notebook(page)
    saved = json.loads(path.read_text())
    assert saved_errors(saved) == []
    assert all(re.fullmatch(r"\[\d+\]:", p) for p in prompts), prompts
    code = [c for c in saved["cells"] if c["cell_type"] == "code"]
    assert len(code) == len(prompts) and all(c["execution_count"] for c in code)
    return prompts, saved


def _assert_stayed_local(network) -> None:
    assert network.requests, "the page made no request at all"
    assert any("/api/kernels/" in u for u in network.websockets), network.websockets
    assert network.blocked == [], network.blocked
    assert network.off_host() == [], network.off_host()
    assert network.page_errors == [], network.page_errors


def _recorded(lab: Lab, stage: str, started: float) -> dict:
    """The stage's result, written to the temporary results dir by this run."""
    path = lab.results / f"{stage}.json"
    assert path.exists(), sorted(p.name for p in lab.results.glob("*"))
    assert path.stat().st_mtime >= started - 1
    result = json.loads(path.read_text())
    assert result["stage"] == stage and result["verdict"] in VERDICTS
    assert result["provenance"]["device"] == "cpu"
    return result


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


def _form(page):
    """The notebook's one stage form."""
    form = page.locator(".hyport-form")
    form.first.wait_for(state="visible", timeout=60_000)
    assert form.count() == 1
    return form


def _open_section_of(form, name: str) -> None:
    """Unfold the folded section that holds the field, if it is in one."""
    field = form.locator(f".hyport-field-{name}")
    # ``has`` is matched inside each section: a locator of the page's, not one under the form
    section = form.locator(".hyport-section", has=form.page.locator(f".hyport-field-{name}"))
    if section.count() and not field.is_visible():
        section.locator(".jupyter-widget-Collapse-header").click()
        field.wait_for(state="visible")


def _open_sections(form) -> None:
    """Unfold every folded section of the form, as a user would: a click on each header."""
    closed = form.locator(".hyport-section .jupyter-widget-Collapse:not(.jupyter-widget-Collapse-open)"
                          " > .jupyter-widget-Collapse-header")
    sections = form.locator(".hyport-section").count()
    for _ in range(sections):  # one click each; the locator lists those still closed
        if closed.count() == 0:
            break
        closed.first.scroll_into_view_if_needed()
        closed.first.click()
    assert sections and closed.count() == 0


def _set_field(form, name: str, value) -> None:
    """Type ``value`` into the field's box, pick it in its dropdown, or (a bool) tick or
    untick its checkbox; ``"None"`` ticks an optional number's "None" box, a number unticks it."""
    _open_section_of(form, name)
    field = form.locator(f".hyport-field-{name}")
    none = field.locator(".hyport-none input")
    if none.count():
        none.scroll_into_view_if_needed()
        none.set_checked(value == "None")
        if value == "None":
            return
    control = field.locator("input, textarea, select").first
    control.scroll_into_view_if_needed()
    if isinstance(value, bool):
        control.set_checked(value)
    elif control.evaluate("el => el.tagName") == "SELECT":
        control.select_option(label=str(value))
    else:
        control.fill(str(value))
        control.press("Tab")  # the change reaches the kernel before the click


def _refused_under_field(page, form, params_class: type, name: str, bad: str) -> None:
    """A bad value: the click shows the command line's one-line error under its field."""
    field = next(f for f in parameter_fields(params_class) if f.name == name)
    with pytest.raises(ParameterError) as refused:  # what `hyport <stage> --flag bad` says
        params_class(**{name: parse_text(field, bad)})
    expected = str(refused.value)
    _set_field(form, name, bad)
    form.locator("button", has_text="Run stage").click()
    error = form.locator(f".hyport-field-{name} .hyport-error")
    page.wait_for_function("el => el.textContent.trim().length > 0", arg=error.element_handle(),
                           timeout=PICK_S * 1000)
    assert error.inner_text().strip() == expected
    assert "to fix" in form.locator(".hyport-status").inner_text()


def _run_form(page, lab: Lab, form, stage: str) -> dict:
    """Press "Run stage" and wait until it finished; the result it recorded."""
    started = time.time()
    form.locator("button", has_text="Run stage").click()
    status = form.locator(".hyport-status")
    page.wait_for_function("el => /^\\s*([A-Z]+: |stopped)/.test(el.textContent)", arg=status.element_handle(),
                           timeout=FORM_RUN_S * 1000)
    assert [e for e in form.locator(".hyport-error").all_inner_texts() if e.strip()] == []
    result = _recorded(lab, stage, started)
    assert status.inner_text().strip().startswith(f"{result['verdict']}: "), status.inner_text()  # the status says it
    return result


def test_01_environment_runs_and_reprobe_is_live(lab, tmp_path):
    path = copy_notebook(NOTEBOOKS / "01_environment.ipynb", lab.root, {"device": "cpu"})
    started = time.time()
    with notebook_page(lab) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_all(page, lab, path)
        result = _recorded(lab, "01_environment", started)

        # the checks table rendered, one row per recorded check
        rows = _checks_table(page)
        assert rows, "no name | verdict | reason table in the outputs"
        assert {r["verdict"] for r in rows} <= set(CHECK_VERDICTS)
        assert [r["name"] for r in rows] == [c["name"] for c in result["data"]["checks"]]

        # the widget is live: a click makes the kernel probe again and update it
        from playwright.sync_api import expect

        widget = page.locator(WIDGET_01)
        widget.wait_for(state="visible", timeout=60_000)
        assert widget.count() == 1
        button = widget.locator("button.widget-button")
        status = widget.locator(".widget-html-content")
        output = widget.locator(".widget-output")
        expect(status).to_contain_text("Environment:", timeout=60_000)  # synced from the kernel
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

        # the form: a bad value is refused under its field; unticking check_ports runs
        # the stage without the HCCL port check
        form = _form(page)
        _refused_under_field(page, form, EnvironmentParams, "num_cards", "0")
        # README picture: the form, its bad value refused under the field
        shot = save_readme_picture(form.screenshot(), readme_picture_path(tmp_path, "jupyterlab_form.png"))
        assert shot.exists()
        _set_field(form, "num_cards", "None")
        _set_field(form, "check_ports", False)
        again = _run_form(page, lab, form, "01_environment")
        names = [c["name"] for c in again["data"]["checks"]]
        assert "hccl_ports" in [r["name"] for r in rows] and "hccl_ports" not in names
        shown = form.locator(".widget-output table", has=page.locator("thead th", has_text="verdict"))
        assert [t.strip() for t in shown.first.locator("tbody tr td:first-child").all_inner_texts()] == names
        _assert_stayed_local(network)


def test_02_attention_runs(lab):
    path = copy_notebook(NOTEBOOKS / "02_attention.ipynb", lab.root, {"device": "cpu"})
    started = time.time()
    with notebook_page(lab) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_all(page, lab, path)
        result = _recorded(lab, "02_attention", started)
        assert result["verdict"] in ("PASS", "WARN")
        # the comparison grid and the heatmap rendered
        assert page.locator(".jp-NotebookPanel .jp-OutputArea-output table").count() >= 2
        assert page.locator(".jp-NotebookPanel .jp-OutputArea-output img").count() >= 1
        assert {r.get("dtype") for r in result["data"]["rows"]} >= {"float32", "bfloat16"}

        form = _form(page)
        _refused_under_field(page, form, AttentionParams, "seed", "-1")  # a number box: no letters
        _set_field(form, "seed", "0")
        _set_field(form, "dtypes", "[float32]")
        again = _run_form(page, lab, form, "02_attention")
        assert {r.get("dtype") for r in again["data"]["rows"]} == {"float32"}
        _assert_stayed_local(network)


def test_03_inference_runs_and_card_picker_is_live(lab):
    from hyport_lib.processes import read_log_tail

    path = copy_notebook(NOTEBOOKS / "03_inference.ipynb", lab.root, {"device": "cpu"})
    started = time.time()
    with notebook_page(lab) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_all(page, lab, path)
        result = _recorded(lab, "03_inference", started)
        assert result["verdict"] in ("PASS", "WARN")
        logs = {int(r["card"]): r["log_path"] for r in result["data"]["rows"]}
        assert sorted(logs) == [0, 1], logs  # the CPU default: two worker processes
        # the live view kept each card's log tail (a fold per card, no kernel needed)
        assert page.locator(".jp-NotebookPanel .hyport-card-log").count() == 2

        widget = page.locator(WIDGET_03)
        widget.wait_for(state="visible", timeout=60_000)
        assert widget.count() == 1
        select = widget.locator(".widget-dropdown select")
        output = widget.locator(".widget-output")
        # ipywidgets writes the labels with no-break spaces
        labels = [t.replace("\xa0", " ").strip() for t in select.locator("option").all_inner_texts()]
        assert [lbl.split(" (")[0] for lbl in labels] == ["card 0", "card 1"], labels

        def shown() -> list[str]:
            return [line.rstrip() for line in output.inner_text().strip().splitlines()]

        def tail(card: int) -> list[str]:
            return [line.rstrip() for line in read_log_tail(logs[card], 40).strip().splitlines()]

        # card 0 first: its worker's log, which names card 0 and never card 1
        assert shown() == tail(0)
        assert "card 0" in output.inner_text() and "card 1" not in output.inner_text()

        select.scroll_into_view_if_needed()
        select.select_option(index=1)
        page.wait_for_function(
            """el => el.textContent.includes('card 1') && !el.textContent.includes('card 0')""",
            arg=output.element_handle(), timeout=PICK_S * 1000)
        assert shown() == tail(1)
        assert select.evaluate("el => el.selectedIndex") == 1

        form = _form(page)
        _refused_under_field(page, form, InferenceParams, "max_new_tokens", "0")
        _set_field(form, "max_new_tokens", "3")
        again = _run_form(page, lab, form, "03_inference")
        assert again["data"]["config"]["max_new_tokens"] == 3, again["data"]["config"]
        _assert_stayed_local(network)


def test_05_weights_runs_by_itself(lab):
    # Before 04 in this module: with no stage-04 result the notebook checks the tiny
    # model saved in two shards against the same model saved as one file.
    assert not (lab.results / "04_train.json").exists(), "05 runs before 04 in this module"
    path = copy_notebook(NOTEBOOKS / "05_weights.ipynb", lab.root)
    started = time.time()
    with notebook_page(lab) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_all(page, lab, path)
        result = _recorded(lab, "05_weights", started)
        assert result["verdict"] == "PASS", result["summary"]
        assert page.locator(".jp-NotebookPanel .jp-OutputArea-output",
                            has_text="no stage 04 result").count() >= 1
        assert page.locator(".jp-NotebookPanel .jp-OutputArea-output",
                            has_text="LOAD_OK").count() >= 1
        assert result["data"]["reload"]

        form = _form(page)
        _refused_under_field(page, form, WeightsParams, "base_path", str(lab.scratch / "no-such-weights"))
        _set_field(form, "base_path", "None")
        _set_field(form, "reload", False)
        again = _run_form(page, lab, form, "05_weights")
        assert not again["data"]["reload"], again["data"]["reload"]
        _assert_stayed_local(network)


def _train_cell_index(notebook: dict) -> int:
    """Index among all cells of the one code cell that runs the training."""
    found = [i for i, c in enumerate(notebook["cells"])
             if c["cell_type"] == "code" and "LiveTrainingDisplay(" in "".join(c["source"])
             and "run_stoppable(stage.run" in "".join(c["source"])]
    assert len(found) == 1, found
    return found[0]


def test_04_train_live_plot_and_progress_line(lab, tmp_path):
    out = lab.scratch / "train"
    path = copy_notebook(NOTEBOOKS / "04_train.ipynb", lab.root,
                         {"device": "cpu", "max_steps": TRAIN_STEPS, "output_dir": str(out)})
    index = _train_cell_index(json.loads(path.read_text()))
    started = time.time()
    with notebook_page(lab, SCREENSHOT_VIEWPORT) as (page, network):
        open_notebook(page, lab.server, path.name)
        cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
        cell.scroll_into_view_if_needed()  # off-screen cells are not laid out
        assert "LiveTrainingDisplay(" in cell.locator(".jp-InputArea").text_content()
        cell.evaluate(WATCH_LIVE)
        _, saved = _run_all(page, lab, path)
        result = _recorded(lab, "04_train", started)
        assert result["verdict"] == "PASS", result["summary"]
        assert len(result["data"]["metrics"]) == TRAIN_STEPS
        assert Path(result["data"]["final_dir"]).is_relative_to(out)

        history = page.evaluate("window.__hyportLive")
        # one display handle: never two plots (or two progress lines) at once
        assert max(len(s["images"]) for s in history) == 1, history
        assert all(s["line"].count("step ") <= 1 for s in history), history
        shown = [s["images"][0] for s in history if s["images"]]
        changes = [b for a, b in zip(shown, shown[1:]) if a != b]
        live = {s["images"][0] for s in history if s["images"] and s["line"].endswith("(running)")}
        timing = [(m["step"], m.get("step_s")) for m in result["data"]["metrics"]]
        assert len(changes) >= 2, (f"the plot changed {len(changes)} time(s); steps: {timing}", history)
        assert len(live) >= 2, (f"{len(live)} plot(s) while running; steps: {timing}", history)
        assert len(set(shown)) == len(changes) + 1  # each redraw was a new image

        # the progress line rendered and ended at N/N, finished
        lines = [s["line"] for s in history if s["line"]]
        assert any(line.endswith("(running)") for line in lines), lines
        final = cell.locator(".jp-OutputArea-output code").text_content()  # laid out or not
        assert final == lines[-1]
        match = re.search(r"step (\d+)/(\d+)\s.*\(finished\)$", final)
        assert match and match.groups() == (str(TRAIN_STEPS), str(TRAIN_STEPS)), final
        assert final.startswith("[" + "#" * 20 + "]"), final

        # what the page shows last is the image the saved notebook holds
        image = cell.locator(".jp-OutputArea-output img")
        assert image.count() == 1
        src = image.get_attribute("src")
        assert page.evaluate("s => window.__hyportHash(s)", src) == shown[-1]
        pngs = [o["data"]["image/png"] for o in saved["cells"][index]["outputs"]
                if "image/png" in o.get("data", {})]
        assert len(pngs) == 1 and src == "data:image/png;base64," + "".join(pngs[0]).replace("\n", "")

        # the loss to explore: drawn by JupyterLab's own Vega renderer (offline), with its
        # smoothing slider; the saved notebook keeps the spec and the PNG for the report
        explorer = page.locator(".jp-NotebookPanel .vega-embed")
        explorer.first.wait_for(state="attached", timeout=60_000)
        assert explorer.count() == 1 and explorer.locator("canvas, svg").count() >= 1
        assert explorer.locator("input[type=range]").count() == 1
        bundles = [o["data"] for c in saved["cells"] for o in c.get("outputs", [])
                   if "application/vnd.vegalite.v5+json" in o.get("data", {})]
        assert len(bundles) == 1 and "image/png" in bundles[0]

        # README picture: the heading, the cell, its progress line and the plot
        _hide_left_sidebar(page)
        page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index - 1).evaluate(
            "el => el.scrollIntoView({block: 'start'})")
        # a plot taller than what is left below the heading is brought up to the bottom edge
        page.wait_for_function(
            """el => { if (el.complete && el.getBoundingClientRect().bottom > window.innerHeight)
                           el.scrollIntoView({block: 'end'});
                       const r = el.getBoundingClientRect();
                       return el.complete && r.width > 400 && r.top >= 0 && r.bottom <= window.innerHeight; }""",
            arg=image.element_handle(), timeout=30_000)
        shot = save_readme_picture(page.screenshot(), readme_picture_path(tmp_path, "jupyterlab_04_live_plot.png"))
        assert shot.exists()

        form = _form(page)
        _refused_under_field(page, form, TrainParams, "max_steps", "0")
        _set_field(form, "max_steps", "3")
        _set_field(form, "output_dir", str(lab.scratch / "train-form"))
        again = _run_form(page, lab, form, "04_train")
        assert again["verdict"] == "PASS" and len(again["data"]["metrics"]) == 3
        assert Path(again["data"]["final_dir"]).is_relative_to(lab.scratch / "train-form")
        _assert_stayed_local(network)


def _hide_left_sidebar(page) -> None:
    """Collapse the left sidebar (the file browser), so the notebook takes the width: a
    click on its current tab, as a user would."""
    if page.locator("#jp-left-stack").is_hidden():
        return
    page.click(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current", timeout=10_000)
    page.locator("#jp-left-stack").wait_for(state="hidden", timeout=10_000)


def _long_training(lab: Lab, name: str, steps: int) -> tuple[Path, Path]:
    """A copy of 04 training on the CPU for ``steps`` steps (far more than it is let run),
    saving only at the end, into ``name`` under the module's scratch folder."""
    out = lab.scratch / name
    return out, copy_notebook(NOTEBOOKS / "04_train.ipynb", lab.root,
                              {"device": "cpu", "max_steps": steps, "save_steps": steps, "output_dir": str(out)})


#: Far more steps than the run lasts: it ends by the Stop button only.
STOP_STEPS = 5000


def test_04_stop_button_ends_the_run_and_records_interrupted(lab, tmp_path):
    import psutil

    out, path = _long_training(lab, "train-stop", STOP_STEPS)
    index = _train_cell_index(json.loads(path.read_text()))
    started = time.time()
    with notebook_page(lab) as (page, network):
        open_notebook(page, lab.server, path.name)
        cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
        cell.scroll_into_view_if_needed()
        cell.evaluate(WATCH_LIVE)

        def press_stop_after_two_steps():
            # two steps run and the plot drawn three times (the picture shows a curve, not a dot)
            page.wait_for_function(
                r"""() => { const seen = window.__hyportLive || [];
                            return seen.some(s => /step ([2-9]|\d\d+)\/\d+/.test(s.line))
                                && new Set(seen.filter(s => s.images.length).map(s => s.images[0])).size >= 3; }""",
                timeout=FORM_RUN_S * 1000)
            # README picture: a live run with its Stop button (the heading above it too)
            _hide_left_sidebar(page)
            cell.evaluate("el => el.scrollIntoView({block: 'start'})")
            save_readme_picture(cell.screenshot(), readme_picture_path(tmp_path, "jupyterlab_04_stop.png"))
            cell.locator("button.hyport-stop").click()

        _, saved = _run_all(page, lab, path, during=press_stop_after_two_steps)
        result = _recorded(lab, "04_train", started)
        assert result["verdict"] == "INTERRUPTED", result["summary"]
        steps = [m["step"] for m in result["data"]["metrics"]]
        assert 2 <= len(steps) < STOP_STEPS and steps == list(range(1, len(steps) + 1))

        # the line said what the run did from its first seconds, and how it ended
        lines = [s["line"] for s in page.evaluate("window.__hyportLive") if s["line"]]
        assert lines[0].startswith("starting torchrun: 2 ranks (cpu)"), lines[:3]
        final = cell.locator(".jp-OutputArea-output code").text_content()  # laid out or not
        assert f"interrupted after step {steps[-1]}" in final, final
        assert cell.locator("button.hyport-stop").is_disabled()
        # no traceback anywhere, the cells after it ran (the record is theirs), and no
        # process of the run is left
        assert saved_errors(saved) == []
        assert not [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]

        # the compare view: the stopped run against the first 04 run of this module (every
        # interactive run is kept), losses overlaid, each run saying where its figures came from
        picker = page.locator(".widget-vbox:has(button:has-text('Compare'))").last
        picker.scroll_into_view_if_needed()
        selects = picker.locator("select")
        # an option reads "<run_name> · <stage> · <local time> · <verdict>", newest first
        # (ipywidgets shows each space as a no-break space)
        labels = [o.text_content().replace("\xa0", " ") for o in selects.first.locator("option").all()]
        trains = [label for label in labels if " · 04_train · " in label]
        assert len(trains) >= 2, labels
        assert trains[0].startswith("smoke · ") and trains[0].endswith(" · INTERRUPTED"), trains  # this run
        assert trains[-1].endswith(" · PASS"), trains  # the first: 60 steps, finished
        selects.nth(0).select_option(index=labels.index(trains[0]))
        selects.nth(1).select_option(index=labels.index(trains[-1]))
        picker.locator("button", has_text="Compare").click()
        # the losses overlaid, drawn by JupyterLab's Vega renderer (hover, zoom, a legend per run)
        picker.locator(".widget-output .vega-embed").first.wait_for(state="visible", timeout=PICK_S * 1000)
        shown = picker.locator(".widget-output").inner_text().replace("\xa0", " ")
        # the runs named as the picker names them, lettered as the tables' headers say
        titles = [label.rsplit(" · ", 1)[0] for label in (trains[0], trains[-1])]
        assert f"A: {titles[0]}, run " in shown and f"B: {titles[1]}, run " in shown, shown[:2000]
        assert "CPU" in shown and "INTERRUPTED" in shown and "PASS" in shown
        picker.evaluate("el => el.scrollIntoView({block: 'start'})")  # the pickers, verdicts, losses
        save_readme_picture(page.screenshot(), readme_picture_path(tmp_path, "jupyterlab_compare.png"))
        _assert_stayed_local(network)



# Every field of a form, from the page: its label's text and title, whether the label is cut
# (wider than its box, or an ellipsis), the title of its control and
# whether the control is right-aligned (a number's box).
FIELDS_SHOWN = """(form, names) => names.map(name => {
    const field = form.querySelector('.hyport-field-' + name);
    if (!field) return {name, missing: true};
    const label = field.querySelector('.hyport-label');
    const text = label.querySelector('.hyport-label-text');
    const control = field.querySelector('input, textarea, select');
    const cut = [label, label.querySelector('.widget-html-content'), text].some(el =>
        el.scrollWidth > el.clientWidth || getComputedStyle(el).textOverflow === 'ellipsis');
    return {name, text: text.textContent, title: text.getAttribute('title'), cut,
            // a number box's: ipywidgets 8.1 puts it on the box's own <label> (hidden: the label
            // shown is ours, which carries it too)
            control_title: control.type === 'number'
                ? control.parentElement.querySelector(':scope > label').getAttribute('title')
                : control.getAttribute('title'),
            right_aligned: getComputedStyle(control).textAlign === 'right',
            visible: text.getBoundingClientRect().width > 0};
})"""


# Where the notebook shows a form (its scrolling area, within the window) and where the form
# and its button are, in the window's pixels.
IN_SIGHT = """(form, label) => {
    let area = form.parentElement;
    while (area && !(/(auto|scroll)/.test(getComputedStyle(area).overflowY) && area.scrollHeight > area.clientHeight))
        area = area.parentElement;
    const view = area ? area.getBoundingClientRect() : {top: 0, bottom: innerHeight};
    const button = [...form.querySelectorAll('button')].find(b => b.textContent.includes(label));
    return {top: Math.max(view.top, 0), bottom: Math.min(view.bottom, innerHeight),
            form_top: form.getBoundingClientRect().top, button_bottom: button.getBoundingClientRect().bottom};
}"""


def test_04_form_full_labels_tooltips_sections_and_run_all_keeps_typed_values(lab, tmp_path):
    # relative to the notebook's folder (the kernel's): no local absolute path in the picture
    first, second = "train-layout-1", "train-layout-2"
    path = copy_notebook(NOTEBOOKS / "04_train.ipynb", lab.root,
                         {"device": "cpu", "max_steps": 1, "output_dir": first})
    fields = parameter_fields(TrainParams)
    with notebook_page(lab, SCREENSHOT_VIEWPORT) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_all(page, lab, path)
        form = _form(page)
        _hide_left_sidebar(page)

        # folded sections: Run stage in sight below the main fields, without scrolling past 53:
        # from the form's top to the button fits where the notebook shows cells (the window
        # less JupyterLab's bars), wherever the lazily drawn notebook has scrolled it
        form.evaluate("el => el.scrollIntoView({block: 'start'})")
        shown = form.evaluate(IN_SIGHT, "Run stage")
        assert shown["button_bottom"] - shown["form_top"] <= shown["bottom"] - shown["top"], shown
        sections = form.locator(".hyport-section .jupyter-widget-Collapse-header").all_inner_texts()
        assert [t.strip() for t in sections] == ["Data", "Training", "LoRA", "DeepSpeed / memory",
                                                 "Several hosts", "Advanced"]
        # README picture: the grouped form of 04
        shot = save_readme_picture(form.screenshot(), readme_picture_path(tmp_path, "jupyterlab_form_04.png"))
        assert shot.exists()

        # every field, its sections unfolded: the full name, never cut; its doc as the title
        # of the label and of the control (the tooltip the page shows)
        _open_sections(form)
        shown = form.element_handle().evaluate(FIELDS_SHOWN, [f.name for f in fields])
        assert len(shown) == len(fields) >= 40
        for f, seen in zip(fields, shown):
            assert seen.get("missing") is None and seen["visible"], seen
            assert seen["text"] == f.name and not seen["cut"], seen
            assert seen["title"] == f.spec.doc and seen["control_title"] == f.spec.doc, seen
            number_box = f.kind in ("int", "float") and not f.spec.choices
            assert seen["right_aligned"] == number_box, seen  # a number's box reads as one

        # a combination is checked as soon as it is set, with the command line's line
        with pytest.raises(ParameterError) as refused:
            TrainParams(zero_stage=0, offload_optimizer=True)
        _set_field(form, "offload_optimizer", True)
        _set_field(form, "zero_stage", "0")
        error = form.locator(".hyport-field-offload_optimizer .hyport-error")
        page.wait_for_function("el => el.textContent.trim().length > 0", arg=error.element_handle(),
                               timeout=PICK_S * 1000)
        assert error.inner_text().strip() == str(refused.value)
        _set_field(form, "zero_stage", "2")
        page.wait_for_function("el => el.textContent.trim() === ''", arg=error.element_handle(),
                               timeout=PICK_S * 1000)
        _set_field(form, "offload_optimizer", False)

        # typed values survive Run All (which runs the parameters cell again), and the
        # cells below run with them
        _set_field(form, "max_steps", "2")
        _set_field(form, "output_dir", second)
        started = time.time()
        _run_all(page, lab, path)
        result = _recorded(lab, "04_train", started)
        assert len(result["data"]["metrics"]) == 2
        assert Path(result["data"]["final_dir"]).resolve().is_relative_to((lab.root / second).resolve())
        form = _form(page)
        kept = form.locator(".hyport-kept")
        assert kept.is_visible()
        assert kept.inner_text().startswith("2 values kept from the form (the parameters cell says max_steps=1, "
                                            f"output_dir={first!r})"), kept.inner_text()
        steps = form.locator(".hyport-field-max_steps input").first
        assert steps.input_value() == "2"
        kept.locator("button", has_text="Reset").click()  # back to the parameters cell
        page.wait_for_function(  # the rows are built again: the box is looked up afresh
            """() => { const box = document.querySelector('.hyport-form .hyport-field-max_steps input');
                       return box !== null && box.value === '1'; }""", timeout=PICK_S * 1000)
        kept.wait_for(state="hidden", timeout=PICK_S * 1000)
        _assert_stayed_local(network)


# Installed on a form before its runs: every distinct state of its output area (the progress
# lines, the images' sources hashed), its status and the kernel's status as the notebook's
# toolbar shows it, so that each redraw is seen though Playwright polls far less often.
WATCH_FORM = """form => {
    const hash = s => {  // FNV-1a over the data URI, and its length
        let h = 0x811c9dc5;
        for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193); }
        return (h >>> 0).toString(16) + ':' + s.length;
    };
    window.__hyportForm = [];
    const record = () => {
        const area = form.querySelector(':scope > .widget-output');
        const images = [...area.querySelectorAll('img')].map(i => hash(i.getAttribute('src') || ''));
        const line = [...area.querySelectorAll('code')].map(c => c.textContent).join(' | ');
        const indicator = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
        const state = {images, line, kernel: indicator ? indicator.dataset.status : '',
                       status: form.querySelector('.hyport-status').textContent};
        const seen = window.__hyportForm, last = seen[seen.length - 1];
        if (!last || JSON.stringify(last) !== JSON.stringify(state)) seen.push(state);
    };
    const options = {childList: true, subtree: true, characterData: true, attributes: true,
                     attributeFilter: ['src', 'data-status']};
    new MutationObserver(record).observe(form, options);
    new MutationObserver(record).observe(document.querySelector('.jp-NotebookPanel .jp-Toolbar'), options);
    record();
}"""


def _run_up_to_the_form(page, notebook: dict) -> None:
    """Run the cells above the form's and the form's own (the stage itself is not run)."""
    index = next(i for i, c in enumerate(notebook["cells"])
                 if c["cell_type"] == "code" and "show_stage_form(" in "".join(c["source"]))
    cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputPrompt").click()
    for command in ("notebook:run-all-above", "notebook:run-cell"):
        page.click('.lm-MenuBar-itemLabel:text-is("Run")')
        page.click(f'.lm-Menu-item[data-command="{command}"]')
        wait_for_run_all(page)


def _form_history(page) -> list[dict]:
    return page.evaluate("window.__hyportForm")


def _kernel_was_busy_while_it_worked(history: list[dict]) -> None:
    """The kernel read busy while the run worked (the form saying "running"), after the
    click's message was answered too (the run says "busy" after ipykernel's "idle" for it),
    and idle once it ended."""
    states = [(s["kernel"], s["status"].startswith("running")) for s in history]
    assert states[-1][0] == "idle", states
    assert states[-1][1] is False, states  # "idle" came with the run's end, not before
    # busy to the last moment the form said running: long after the click's own busy and
    # idle, so said by the run itself
    while_running = [kernel for kernel, running in states if running]
    assert while_running and while_running[-1] == "busy", states


def _stopped_form_run(page, lab: Lab, form, stage: str, live: str, stop) -> dict:
    """Press "Run stage", wait until the run is live (``live``: a JS test on the recorded
    history), call ``stop()``; the result the run recorded, which says INTERRUPTED."""
    page.evaluate("() => { window.__hyportForm.length = 0; }")
    started = time.time()
    form.locator("button", has_text="Run stage").click()
    page.wait_for_function(f"() => {{ const seen = window.__hyportForm; return {live}; }}",
                           timeout=FORM_RUN_S * 1000)
    stop()
    status = form.locator(".hyport-status")
    page.wait_for_function("el => /^\\s*([A-Z]+: |stopped)/.test(el.textContent)", arg=status.element_handle(),
                           timeout=FORM_RUN_S * 1000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=FORM_RUN_S * 1000)
    result = _recorded(lab, stage, started)
    assert result["verdict"] == "INTERRUPTED", (result["summary"], [(s["kernel"], s["status"][:30], s["line"][:60]) for s in _form_history(page)])
    assert status.inner_text().strip().startswith("INTERRUPTED: "), status.inner_text()
    stop_button = form.locator("button.hyport-stop")
    assert stop_button.count() == 1 and stop_button.is_disabled()  # retired, and it looks it:
    assert float(stop_button.evaluate("b => getComputedStyle(b).opacity")) < 0.6
    return result


def _interrupt_from_the_kernel_menu(page) -> None:
    page.click('.lm-MenuBar-itemLabel:text-is("Kernel")')
    page.click('.lm-Menu-item[data-command="kernelmenu:interrupt"]')


def _kernel_children(lab: Lab) -> list:
    """The processes the notebook's kernel started that are still there."""
    import psutil

    (kernel,) = api(lab.server, "GET", "kernels")
    found = [p for p in psutil.process_iter(["cmdline"])
             if any(f"kernel-{kernel['id']}.json" in part for part in p.info["cmdline"] or [])]
    assert len(found) == 1, found
    return found[0].children(recursive=True)


#: 03's cards generate this many tokens per answer in the runs that are stopped: far more
#: than they finish before Stop, so they are stopped while running.
LONG_ANSWERS = 4000


def test_03_form_runs_in_one_kernel_are_live_and_stopped_every_time(lab):
    path = copy_notebook(NOTEBOOKS / "03_inference.ipynb", lab.root, {"device": "cpu", "num_cards": 1})
    with notebook_page(lab) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_up_to_the_form(page, json.loads(path.read_text()))
        form = _form(page)
        form.evaluate(WATCH_FORM)

        # run 1 finishes, the kernel busy while it works
        _set_field(form, "max_new_tokens", "2")
        first = _run_form(page, lab, form, "03_inference")
        assert first["verdict"] in ("PASS", "WARN"), first["summary"]
        page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=60_000)
        _kernel_was_busy_while_it_worked(_form_history(page))
        assert form.locator("button.hyport-stop").is_disabled()

        # runs 2 and 3, each stopped once its line has ticked (a card running for 2 s or more):
        # by the form's Stop, then by Kernel → Interrupt
        _set_field(form, "max_new_tokens", str(LONG_ANSWERS))
        ticking = "seen.some(s => /running: card 0 \\(([2-9]|\\d\\d+) s\\)/.test(s.line))"
        for stop in (lambda: form.locator("button.hyport-stop").click(),
                     lambda: _interrupt_from_the_kernel_menu(page)):
            stopped = _stopped_form_run(page, lab, form, "03_inference", ticking, stop)
            assert [r["status"] for r in stopped["data"]["rows"]] != ["ok"], stopped["data"]["rows"]
            history = _form_history(page)
            lines = {s["line"] for s in history if "running: card 0" in s["line"]}
            assert len(lines) >= 2, lines  # the line ticked while the card ran
            _kernel_was_busy_while_it_worked(history)
            assert _kernel_children(lab) == []  # no card worker left
        _assert_stayed_local(network)


# The part of a form a run shows: from its "Run stage" row to the end of its output area,
# brought into the viewport (the form above it is long).
FORM_RUN_BOX = """form => {
    const run = [...form.querySelectorAll('button')].find(b => b.textContent.includes('Run stage'));
    const area = form.querySelector(':scope > .widget-output');
    area.scrollIntoView({block: 'end'});
    const top = run.getBoundingClientRect(), bottom = area.getBoundingClientRect();
    const left = Math.max(0, Math.min(top.left, bottom.left) - 8);
    return {x: left, y: Math.max(0, top.top - 8), width: bottom.right - left + 8,
            height: bottom.bottom - top.top + 16};
}"""


#: 04's form run: far more steps than it is let run; it is stopped once the line and the
#: plot have moved three times.
LIVE_STEPS = 2000


def test_04_form_run_is_live_and_stopped_by_its_stop_button(lab, tmp_path):
    out, path = _long_training(lab, "train-form-live", LIVE_STEPS)
    with notebook_page(lab, SCREENSHOT_VIEWPORT) as (page, network):
        open_notebook(page, lab.server, path.name)
        _run_up_to_the_form(page, json.loads(path.read_text()))
        form = _form(page)
        form.evaluate(WATCH_FORM)
        live = ("new Set(seen.map(s => s.line).filter(l => /step \\d+\\/\\d+/.test(l))).size >= 3"
                " && new Set(seen.filter(s => s.images.length).map(s => s.images[0])).size >= 3")

        def picture_then_stop():
            # README picture: the live form run, its progress line, plot and Stop button
            _hide_left_sidebar(page)
            box = form.evaluate(FORM_RUN_BOX)
            save_readme_picture(page.screenshot(clip=box), readme_picture_path(tmp_path, "jupyterlab_form_live.png"))
            form.locator("button.hyport-stop").click()

        result = _stopped_form_run(page, lab, form, "04_train", live, picture_then_stop)
        steps = [m["step"] for m in result["data"]["metrics"]]
        assert 3 <= len(steps) < LIVE_STEPS and steps == list(range(1, len(steps) + 1))
        history = _form_history(page)
        assert max(len(s["images"]) for s in history) == 1  # one plot, redrawn in place
        _kernel_was_busy_while_it_worked(history)
        assert _kernel_children(lab) == []  # no torchrun left
        _assert_stayed_local(network)
