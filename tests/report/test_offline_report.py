"""End to end: `hyport report --profile default --zip`, secrets, offline HTML.

The run is the session's ``default_report`` (tests/fixtures_runs.py, shared with test_blog
and test_notebooks), made with planted secrets in its environment. It serves every check
here: the files it must leave, that no secret value reaches any file, that its HTML opens
in a network-blocked browser without a single request or console error, the index at a
glance, and the one file to send. (A real ``--only`` run of the default profile, and its
index: test_report_faults.py, ``--only 01,03``.)
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from browser import chromium_path, open_offline, print_to_pdf, readme_picture_path, visit
from fixtures_runs import MARKER, SECRETS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_run(default_report):
    """The main job: every stage on the embedded default (and the zip to send)."""
    return default_report


def _leaks(run_dir: Path) -> list[str]:
    leaks = []
    for path in (p for p in run_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if MARKER.encode() in data:
            leaks.append(str(path.relative_to(run_dir)))
        leaks += [f"{path.relative_to(run_dir)} (names {name})" for name in SECRETS
                  if name.encode() in data]
    return leaks


def test_the_report_succeeds_and_leaves_its_files(full_run):
    proc, run_dir = full_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    assert (run_dir / "index.html").exists()
    assert (run_dir / "html" / "01_environment.html").exists()
    assert (run_dir / "notebooks" / "01_environment.ipynb").exists()
    result = json.loads((run_dir / "results" / "01_environment.json").read_text())
    assert result["stage"] == "01_environment" and result["verdict"] in ("PASS", "WARN")
    assert "01_environment" in proc.stderr  # per-stage progress in the terminal
    # the non-secret HCCL variable is collected, so the environment really was read
    assert "HCCL_CONNECT_TIMEOUT" in (run_dir / "results" / "01_environment.json").read_text()


def test_no_secret_reaches_any_file(full_run):
    _, run_dir = full_run
    assert len([p for p in run_dir.rglob("*") if p.is_file()]) >= 6
    assert _leaks(run_dir) == []


def test_full_report_on_the_default_profile(full_run):
    """Every stage passes on CPU, each labelled as not an NPU figure, and no secret leaks."""
    from hyport_lib.stages import discover_stages

    proc, run_dir = full_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((run_dir / "run.json").read_text())
    stages = [s.id for s in discover_stages()]
    assert [s["stage"] for s in run["stages"]] == stages
    for stage in run["stages"]:
        assert stage["verdict"] in ("PASS", "WARN"), stage
        assert "not an NPU measurement" in stage["provenance"]["label"]
        assert (run_dir / stage["html"]).exists()
    assert "not an NPU measurement" in (run_dir / "blog.md").read_text()
    assert len(stages) == 5 and all(s["verdict"] == "PASS" for s in run["stages"]), run["stages"]
    assert "并非在 NPU 上测得" in (run_dir / "blog.zh.md").read_text(encoding="utf-8")
    assert _leaks(run_dir) == []
    # a quiet terminal: one line per stage, kernel start-up noise only in the stage logs
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    stage_lines = [line for line in lines if re.match(r"\[\d+/\d+\] ", line)]
    assert [line.split()[1] for line in stage_lines] == stages, lines
    assert len(lines) <= len(stages) + 5, lines
    noisy = [line for line in lines if line not in stage_lines
             and re.search(r"(?i)kernel|encryption|warning|traceback", line)]
    assert noisy == [], noisy


@pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"),
                    reason="Debian chromium not installed (scripts/setup.sh --browser installs it)")
def test_every_stage_page_opens_offline(full_run, tmp_path):
    _, run_dir = full_run
    pages = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "html").glob("*.html"))
    assert len(pages) >= 3
    _check_offline_page(run_dir, "index.html",
                        {"rows": "#stages tbody tr", "verdict": "#stages td.verdict", "title": "h1"},
                        tmp_path, expected_rows=len(pages))
    for page in pages:
        _check_offline_page(run_dir, page, {"cells": ".jp-Cell", "tables": "table", "title": "h1"},
                            tmp_path)
    # the README's picture of an index: the five stages at a glance and the stages table
    picture = readme_picture_path(tmp_path, "report_index.png")
    seen = visit(run_dir / "index.html", {"cards": ".glance .card", "svg": ".glance svg.spark"},
                 screenshot=picture, clip_below=".glance + p.prov")
    assert seen.counts["cards"] == len(pages) and seen.counts["svg"] == 1, seen.counts
    assert picture.exists() and seen.blocked == [] and seen.console_errors == []


def _check_offline_page(run_dir, page, selectors, tmp_path, expected_rows=None):
    shot = tmp_path / "page.png"
    seen = visit(run_dir / page, selectors, screenshot=shot)
    assert seen.blocked == [], f"{page}: network requests attempted: {seen.blocked}"
    assert seen.failed == [], page
    assert seen.console_errors == [] and seen.page_errors == [], (page, seen)
    assert seen.counts["title"] >= 1 and seen.texts["title"].strip()
    if page == "index.html":
        assert seen.counts["rows"] == expected_rows
        assert seen.texts["verdict"].strip() in ("PASS", "WARN")
    else:
        assert seen.counts["cells"] >= 3 and seen.counts["tables"] >= 1
    assert shot.stat().st_size > 5000


def test_the_index_shows_each_stage_at_a_glance(full_run):
    """Each stage's key figures, taken from what it recorded, link to its page."""
    import re

    _, run_dir = full_run
    index = (run_dir / "index.html").read_text()
    results = {p.stem: json.loads(p.read_text()) for p in (run_dir / "results").glob("*.json")}
    cards = dict(re.findall(r'<div class="card" id="glance-([^"]+)">(.*?)</div></div>', index, re.S))
    assert sorted(cards) == sorted(results)
    train = results["04_train"]["headline"]
    assert f"<dd>{train['loss first → last']}</dd>" in cards["04_train"] and "<svg" in cards["04_train"]
    assert f"<dd>{results['03_inference']['headline']['cards ok']}</dd>" in cards["03_inference"]
    rows = results["02_attention"]["data"]["rows"]
    cases = {r["case"] for r in rows}
    passed = len(cases - {r["case"] for r in rows if r["verdict"] != "PASS"})
    assert f"<dd>{passed} / {len(cases)} ({len(rows)} results)</dd>" in cards["02_attention"]
    assert "<dt>LOAD_OK</dt><dd>yes</dd>" in cards["05_weights"]
    assert "<dd>stage 04&#x27;s final weights</dd>" in cards["05_weights"]  # what was checked
    assert "None" not in "".join(cards.values())
    for stage in results:
        assert f'href="html/{stage}.html"' in cards[stage]
    assert "Where the figures come from" in index and "NPU-emulated on CPU" in index


def test_the_parameters_are_what_each_stage_ran_with(full_run):
    """Every stage's effective values (its defaults too: max_steps, model_path), where each
    came from, paths relative to the run folder, and the profile by its name."""
    _, run_dir = full_run
    index = (run_dir / "index.html").read_text(encoding="utf-8")
    table = index[index.index('id="parameters"'):index.index("<h2>Versions")]
    rows = {(name, source): (value, stages) for name, value, source, stages in re.findall(
        r"<td><code>([^<]*)</code></td><td><code>([^<]*)</code></td><td>([^<]*)</td><td>([^<]*)</td>", table)}
    assert rows[("max_steps", "default")] == ("20", "04_train")
    assert rows[("save_steps", "profile")] == ("20", "04_train")
    assert rows[("device", "profile")] == ("&quot;cpu&quot;", "01_environment, 02_attention, 03_inference, "
                                                             "04_train")
    assert ("model_path", "default") in rows and ("output_dir", "default") in rows
    assert str(run_dir) not in table
    assert "· profile default</p>" in index


def test_the_pages_and_drafts_name_no_local_folder_and_their_links_still_work(full_run):
    """What is sent names the run folder ``<run>`` (the drafts say so once), never its
    absolute path; the run's data keeps it; every link to a file in the run resolves."""
    _, run_dir = full_run
    sent = ["index.html", "report.html", "blog.en.md", "blog.zh.md",
            *(p.relative_to(run_dir).as_posix() for p in (run_dir / "html").glob("*.html"))]
    assert len(sent) == 9
    # read as printed: without the <wbr> and the unbreakable pieces put in table cells
    texts = {name: _unbroken((run_dir / name).read_text(encoding="utf-8")) for name in sent}
    assert [name for name, text in texts.items() if str(run_dir) in text] == []
    assert "&lt;run&gt;/train/smoke" in texts["html/04_train.html"]
    assert "`<run>/train/smoke`" in texts["blog.en.md"] and "`<run>/train/smoke`" in texts["blog.zh.md"]
    assert "`<run>` stands for this run's folder" in texts["blog.en.md"]
    assert "`<run>` 指本次运行的目录" in texts["blog.zh.md"]
    assert str(run_dir) in (run_dir / "results" / "04_train.json").read_text()  # the data is untouched
    for name, text in texts.items():
        page = (run_dir / name).parent
        links = [a or b for a, b in re.findall(r'(?:href|src)="([^"#][^"]*)"|!\[[^\]]*\]\(([^)\s]+)\)', text)
                 if not (a or b).startswith(("data:", "http:", "https:"))]
        assert [link for link in links if not (page / link).exists()] == [], name


def test_no_page_draft_or_compare_page_holds_a_local_folder(full_run, tmp_path):
    """The home folder, hyport's cache, the temporary folder, the Python environment and the
    repository are named (``~``, ``<cache>``, ``<tmp>``, ``<venv>``, ``<repo>``) in every page,
    draft (figure captions included) and ``hyport compare`` page of the run; the 01 page names
    the environment's python ``<venv>/bin/python``."""
    import shutil
    import sys
    import tempfile

    from hyport_lib.commands import main
    from hyport_lib.models.model_cache import default_cache_root
    from hyport_lib.report.paths import default_profiles_dir

    _, run_dir = full_run
    other = shutil.copytree(run_dir, tmp_path / "other-run")  # a second run to compare with
    assert main(["compare", str(run_dir), str(other), "--out", str(tmp_path / "compare.html")]) == 0
    sent = [run_dir / name for name in ("index.html", "report.html", "blog.en.md", "blog.zh.md")]
    sent += [*sorted((run_dir / "html").glob("*.html")), tmp_path / "compare.html"]
    folders = {str(Path.home()), str(default_cache_root()), tempfile.gettempdir(), sys.prefix,
               str(default_profiles_dir().parent)}
    found = {path.name: sorted(folder for folder in folders if re.search(
        rf"(?<![\w.-]){re.escape(folder)}(?![\w-]|\.\w)", _unbroken(path.read_text(encoding="utf-8"))))
        for path in sent}
    assert len(found) == 10 and not any(found.values()), found
    environment = _unbroken((run_dir / "html" / "01_environment.html").read_text(encoding="utf-8"))
    if sys.prefix != sys.base_prefix:
        assert "&lt;venv&gt;/bin/python" in environment
    blog = (run_dir / "blog.en.md").read_text(encoding="utf-8")
    assert "<cache>/tiny-vlm-v3-tf" in blog and "<tmp>/hyport-planted-example" in blog


@pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"),
                    reason="Debian chromium not installed (scripts/setup.sh --browser installs it)")
def test_one_file_to_send_and_the_zip(full_run, tmp_path):
    """report.html holds the index and every stage page, opens offline with no request and
    no console error; the zip holds the whole run folder."""
    import zipfile

    _, run_dir = full_run
    bundle = run_dir / "report.html"
    text = bundle.read_text()
    assert "<iframe" not in text and 'href="#page-04_train"' in text
    assert 'href="html/' not in text  # every stage link stays inside the file
    seen = visit(bundle, {"stages": "section.hy-stage", "cards": ".card", "title": "h1",
                          "code": "details.hy-code", "open": "details.hy-code[open]"},
                 screenshot=tmp_path / "b.png")
    assert seen.blocked == [] and seen.failed == [], seen.blocked
    assert seen.console_errors == [] and seen.page_errors == [], seen
    assert seen.counts["stages"] == 5 and seen.counts["cards"] == 5
    assert seen.counts["code"] >= 10 and seen.counts["open"] == 0  # code cells collapsed
    archive = run_dir.parent / f"{run_dir.name}.zip"
    names = zipfile.ZipFile(archive).namelist()
    assert f"{run_dir.name}/index.html" in names and f"{run_dir.name}/report.html" in names
    assert any(n.startswith(f"{run_dir.name}/train/") for n in names)
    assert not [n for n in names if ".runner.lock" in n or "/.partial" in n or n.endswith(".tmp")]
    # a finished run leaves only its own files: no lock, no partial notebooks folder
    assert not (run_dir / ".runner.lock").exists() and not (run_dir / ".partial").exists()
    packed = {n for n in names if not n.endswith("/")}
    on_disk = {f"{run_dir.name}/{p.relative_to(run_dir).as_posix()}" for p in run_dir.rglob("*")
               if p.is_file()}
    assert packed == on_disk
    # inside the file, a stage page's own anchors go to its own heading, "(top)" to the top
    with open_offline(bundle) as (page, _):
        page.locator("#page-05_weights a.anchor-link").first.evaluate("a => a.click()")
        page.wait_for_timeout(300)
        assert page.evaluate("location.hash").startswith("#05_weights--")
        assert page.evaluate("window.scrollY") > 1000
        page.locator('#page-05_weights a[href="#top"]').click()
        page.wait_for_timeout(300)
        assert page.evaluate("window.scrollY") < 50


@pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"),
                    reason="Debian chromium not installed (scripts/setup.sh --browser installs it)")
def test_report_html_printed_to_pdf_shows_every_stages_results(full_run, tmp_path):
    """Printed (Chromium's Save as PDF), report.html shows each stage's results, not a frame's
    first screen: each stage starts a page with its title, and its pages hold its headline
    (the summary it recorded, also in the index) and its notebook's last output."""
    _, run_dir = full_run
    pages = [_flat(text) for text in print_to_pdf(run_dir / "report.html", tmp_path / "report.pdf")]
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    starts = {}
    for stage in stages:
        title = _flat(f"{stage['stage']} — {stage['verdict']}")
        found = [i for i, text in enumerate(pages) if text.startswith(title)]
        assert len(found) == 1, f"{stage['stage']}: no printed page starts with its title"
        starts[stage["stage"]] = found[0]
    assert list(starts.values()) == sorted(starts.values())
    ends = [*list(starts.values())[1:], len(pages)]
    for stage, end in zip(stages, ends):
        printed = "".join(pages[starts[stage["stage"]]:end])
        assert _flat(stage["summary"]) in printed, (stage["stage"], stage["summary"])
        cells = json.loads((run_dir / stage["notebook"]).read_text())["cells"]
        texts = ["".join(o.get("text") or o.get("data", {}).get("text/plain", "")) for c in cells
                 for o in c.get("outputs", [])]
        last = [line for line in "".join(texts[-1:]).splitlines() if line.strip()][-1]
        last = last.replace(str(run_dir), "<run>")  # the page names the run's folder <run>
        assert _flat(last)[-40:] in printed, (stage["stage"], last)
    # and no table is cut at the page's right edge (a box that scrolls on screen prints only
    # what it shows): each table fits the printed width, its last column included
    with open_offline(run_dir / "report.html", {"width": 794, "height": 1123}) as (page, _):
        page.emulate_media(media="print")
        cut = page.evaluate("""() => [...document.querySelectorAll('table')]
            .filter(t => t.getBoundingClientRect().right > document.documentElement.clientWidth + 1
                         || t.scrollWidth > t.parentElement.clientWidth + 1)
            .map(t => (t.closest('section') || {}).id + ': ' + t.innerText.slice(0, 60))""")
    assert cut == [], cut


#: Every word (a run of non-space characters in one text node: a <wbr> ends one) of every
#: table cell shown, laid out on more than one line; and every cell whose text has no space
#: and no <wbr> (a number, a hash) not laid out on one line.
_BROKEN_WORDS = """() => {
  const lines = range => new Set([...range.getClientRects()].filter(r => r.width > 0)
                                    .map(r => Math.round(r.top))).size;
  const broken = [];
  for (const cell of document.querySelectorAll('td, th')) {
    if (cell.offsetParent === null) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        if (lines(range) > 1) broken.push(m[0]);
      }
    }
    const text = cell.textContent.trim();
    if (text && !/\\s/.test(text) && !cell.querySelector('wbr')) {
      const range = document.createRange();
      range.selectNodeContents(cell);
      if (lines(range) > 1) broken.push(text);
    }
  }
  return broken;
}"""


@pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"),
                    reason="Debian chromium not installed (scripts/setup.sh --browser installs it)")
def test_printed_tables_wrap_at_spaces_never_inside_a_number_or_a_word(full_run):
    """Printed at A4 width, report.html and every stage page: no table cell breaks a word
    or a number ("11 / .5 / 92", "c ar d"); a long token breaks only at a <wbr> we put."""
    _, run_dir = full_run
    pages = ["report.html", *sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "html").glob("*.html"))]
    assert len(pages) == 6
    for name in pages:
        with open_offline(run_dir / name, {"width": 794, "height": 1123}) as (page, _):
            page.emulate_media(media="print")
            assert page.evaluate("document.querySelectorAll('td').length") > 10, name
            assert page.evaluate(_BROKEN_WORDS) == [], name


def _unbroken(page: str) -> str:
    """A page without what hyport_lib.report.breaks puts in its table cells."""
    return re.sub(r'<span class="hy-nb">([^<]*)</span>', r"\1", page.replace("<wbr>", ""))


def _flat(text: str) -> str:
    """Text as a PDF gives it back, compared without its line breaks, spaces and ligatures."""
    return re.sub(r"\s+", "", text.replace("ﬁ", "fi").replace("ﬂ", "fl").replace("ﬀ", "ff"))


def test_the_attention_proof_before_launch_is_recorded_carded_and_drafted(full_run):
    """The default run packs: stage 04 proved the swap on the tiny model and its first batch
    before launch, and the record, the index card and both drafts show it."""
    _, run_dir = full_run
    record = json.loads((run_dir / "results" / "04_train.json").read_text())
    proof = record["data"]["plan"]["attention_proof"]
    assert proof["verdict"] == "PASS" and proof["packed"] and proof["max_abs_logits"] < 1e-4
    assert proof["grad_parameters"] > 10 and not proof["grads_only_eager"] and not proof["grads_only_swapped"]
    said = record["headline"]["attention proof"]
    assert said.startswith("PASS: max |Δ logits| ") and "same gradient set (CPU, float32" in said
    assert html.escape(said) in (run_dir / "index.html").read_text(encoding="utf-8")
    for draft in ("blog.en.md", "blog.zh.md"):
        assert said.replace("|", "\\|") in (run_dir / draft).read_text(encoding="utf-8"), draft
