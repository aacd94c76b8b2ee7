"""Paths as the report shows them: ``<run>/...`` and ``<repo>/...`` in the pages and drafts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hyport_lib.report.paths import default_profiles_dir, relative_text, shown_path

REPO = default_profiles_dir().parent
_LINKS = re.compile(r'(?:href|src)="([^"]*)"')


def test_a_page_names_the_run_folder_and_the_repository_not_a_sibling_that_starts_alike():
    run = Path("/x/run-1")
    page = (f'<p>PASS: 01 -&gt; /x/run-1/results/01_environment.json</p><td>/x/run-1</td>'
            f'<td>/x/run-10/train</td><td>/x/run-1.zip</td><td>/y/x/run-1/z</td><p>in "/x/run-1".</p>'
            f'<code>{REPO}/parameters/default.yaml</code><a href="notebooks/01_environment.ipynb">nb</a>'
            f'<img src="figures/loss.png"><a href="#01_environment--Record">r</a>')
    shown = relative_text(page, run, "html")
    assert "&lt;run&gt;/results/01_environment.json" in shown and "<td>&lt;run&gt;</td>" in shown
    assert '<p>in "&lt;run&gt;".</p>' in shown
    assert "<td>/x/run-10/train</td><td>/x/run-1.zip</td><td>/y/x/run-1/z</td>" in shown
    assert "<code>&lt;repo&gt;/parameters/default.yaml</code>" in shown and str(REPO) not in shown
    assert _LINKS.findall(shown) == _LINKS.findall(page) == [
        "notebooks/01_environment.ipynb", "figures/loss.png", "#01_environment--Record"]


def test_a_run_folder_under_the_repository_is_the_run_and_its_escaped_forms_are_found_too():
    run = REPO / "outputs" / "a b&c"
    page = (f"<pre>{REPO}/outputs/a b&amp;c/train/smoke</pre><a href=\"file://{REPO}/outputs/a%20b%26c/x.png\">"
            f"{run}</a><p>{REPO}/outputs/a b&amp;cd/</p>")
    shown = relative_text(page, run, "html")
    assert "<pre>&lt;run&gt;/train/smoke</pre>" in shown and "file://%3Crun%3E/x.png" in shown
    assert ">&lt;run&gt;</a>" in shown and "<p>&lt;repo&gt;/outputs/a b&amp;cd/</p>" in shown
    assert shown_path(f"{run}/train", run) == "<run>/train"


def test_a_draft_names_the_run_in_code_as_it_is_and_in_prose_escaped():
    run = Path("/x/run-1")
    draft = ("The logs are under `/x/run-1/inference_logs/1`.\n"
             "> stage 04 of this run (/x/run-1/results/04_train.json): its weights\n"
             "```bash\nhyport verify /x/run-1/train/smoke --reload\n```\n"
             "| Final weights | `/x/run-1/train/smoke` | /x/run-10/train |\n")
    shown = relative_text(draft, run, "markdown").splitlines()
    assert shown[0] == "The logs are under `<run>/inference_logs/1`."
    assert shown[1] == r"> stage 04 of this run (\<run>/results/04_train.json): its weights"
    assert shown[3] == "hyport verify <run>/train/smoke --reload"
    assert shown[5] == "| Final weights | `<run>/train/smoke` | /x/run-10/train |"


def test_code_spans_and_fences_are_read_as_markdown_reads_them():
    run = Path("/x/run-1")
    draft = ("``a `b`: '/x/run-1/m.safetensors'`` and /x/run-1/log\n"  # a double-backtick span
             "````\n```\n/x/run-1/inside\n````\n"  # a shorter fence inside a longer one
             "after /x/run-1/out\n")
    shown = relative_text(draft, run, "markdown").splitlines()
    assert shown[0] == r"``a `b`: '<run>/m.safetensors'`` and \<run>/log"
    assert shown[3] == "<run>/inside" and shown[5] == r"after \<run>/out"


def test_an_unknown_markup_is_refused():
    with pytest.raises(ValueError, match="markup must be 'html' or 'markdown'"):
        relative_text("x", Path("/x"), "rst")


@pytest.fixture
def local_folders(tmp_path, monkeypatch):
    """A home folder holding hyport's cache, a virtual environment and a temporary folder of
    their own (the machine's are not what a test may count on)."""
    import sys
    import tempfile

    home = tmp_path / "home" / "someone"
    folders = {"home": home, "cache": home / ".cache" / "hyport", "venv": home / "env", "tmp": tmp_path / "t"}
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HYPORT_CACHE", raising=False)
    monkeypatch.setattr(sys, "prefix", str(folders["venv"]))
    monkeypatch.setattr(tempfile, "tempdir", str(folders["tmp"]))
    return folders


def test_the_cache_the_environment_the_temporary_and_the_home_folder_are_named(local_folders):
    f = local_folders
    run = f["home"] / "outputs" / "run-1"
    page = (f"<td>{f['cache']}/tiny-vlm-v3-tf5</td><td>{f['tmp']}/hyport-planted-example/modeling_example.py</td>"
            f"<td>{f['venv']}/bin/python</td><td>{f['home']}/models/x</td><td>{run}/train</td>"
            f'<a href="figures/loss.png">l</a>')
    shown = relative_text(page, run, "html")
    assert ("<td>&lt;cache&gt;/tiny-vlm-v3-tf5</td><td>&lt;tmp&gt;/hyport-planted-example/modeling_example.py</td>"
            "<td>&lt;venv&gt;/bin/python</td><td>~/models/x</td><td>&lt;run&gt;/train</td>") in shown
    assert str(f["home"]) not in shown and _LINKS.findall(shown) == ["figures/loss.png"]
    draft = f"The model is `{f['cache']}/tiny-vlm-v3-tf5`, in prose {f['cache']}/x and {f['home']}/models/x.\n"
    assert relative_text(draft, run, "markdown") == (
        "The model is `<cache>/tiny-vlm-v3-tf5`, in prose \\<cache>/x and \\~/models/x.\n")
    # a parameter the user typed: a folder under the home folder is named from ~ in the table too
    assert shown_path(f"{f['home']}/models/x", run) == "~/models/x"
    assert shown_path(f"{f['cache']}", run) == "<cache>" and shown_path("/opt/models/x", run) == "/opt/models/x"


def test_hyport_cache_set_elsewhere_is_the_cache_and_a_system_python_is_not_named(local_folders, monkeypatch):
    import sys

    monkeypatch.setenv("HYPORT_CACHE", str(local_folders["tmp"] / "c"))
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    run = Path("/x/run-1")
    assert relative_text(f"{local_folders['tmp']}/c/m {sys.base_prefix}/bin/python", run, "html") == \
        f"&lt;cache&gt;/m {sys.base_prefix}/bin/python"
