"""One stage's notebook run and collected (hyport_lib/report/stage_run.py): what it left
scrubbed into the run folder, its page offline with its widgets static."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from hyport_lib.report import stage_run
from hyport_lib.report.stage_run import PARTIAL_DIR, scrub_file, sweep_partial
from hyport_lib.stages import Stage


def test_widgets_are_made_static():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cell = nbformat.v4.new_code_cell("w")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        stage_run.WIDGET_MIME: {"model_id": "abc"}, "text/plain": "HBox()"})]
    nb.cells = [cell]
    out = stage_run.staticize_widgets(nb)
    assert "widgets" not in out.metadata
    assert out.cells[0].outputs[0]["data"] == {"text/plain": stage_run.WIDGET_NOTE}
    assert "widgets" in nb.metadata  # the input is not modified


def test_nbconvert_templates_are_found_wherever_pip_put_them(tmp_path, monkeypatch):
    """pip install --target DIR leaves the templates in DIR/share/jupyter, off the data path."""
    import shutil

    import nbconvert
    from jupyter_core import paths

    target = tmp_path / "target"
    fake_pkg = target / "nbconvert"
    fake_pkg.mkdir(parents=True)
    (fake_pkg / "__init__.py").write_text("")
    real = Path(stage_run.nbconvert_template_dirs()[0])
    shutil.copytree(real / "lab", target / "share" / "jupyter" / "nbconvert" / "templates" / "lab")
    monkeypatch.setattr(nbconvert, "__file__", str(fake_pkg / "__init__.py"))
    monkeypatch.setattr(paths, "jupyter_path", lambda *parts: [str(tmp_path / "nowhere")])
    assert stage_run.nbconvert_template_dirs() == [str(target / "share" / "jupyter" / "nbconvert" / "templates")]
    shutil.rmtree(target / "share")
    with pytest.raises(RuntimeError, match="JUPYTER_PATH"):
        stage_run.nbconvert_template_dirs()


def test_a_notebook_left_in_partial_by_a_late_stop_is_scrubbed_into_notebooks(tmp_path, monkeypatch):
    """A Ctrl-C between a stage's end and its collection left the unscrubbed notebook in .partial/
    (seen once in CI after a double Ctrl-C in stage 03); the interrupted run sweeps it."""
    monkeypatch.setenv("HF_TOKEN", "hf_sweepsecret12345")
    partial = tmp_path / PARTIAL_DIR
    partial.mkdir()
    (partial / "03_inference.ipynb").write_text(json.dumps({"cells": [{"source": "hf_sweepsecret12345"}]}))
    assert sweep_partial(tmp_path) == ["03_inference.ipynb"]
    assert not any(partial.iterdir())
    kept = (tmp_path / "notebooks" / "03_inference.ipynb").read_text()
    assert "hf_sweepsecret12345" not in kept and "cells" in json.loads(kept)


def test_a_file_is_scrubbed_in_place_or_into_a_target_and_json_stays_json(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_scrubfilesecret123")
    log, record = tmp_path / "stage.log", tmp_path / "r.json"
    log.write_text("loaded with hf_scrubfilesecret123\n")
    record.write_text(json.dumps({"cmd": "login hf_scrubfilesecret123"}))
    assert scrub_file(log) and log.read_text() == "loaded with [redacted]\n"
    assert scrub_file(record, tmp_path / "out" / "r.json")
    assert json.loads((tmp_path / "out" / "r.json").read_text()) == {"cmd": "login [redacted]"}
    assert "hf_scrubfilesecret123" in record.read_text()  # the source is left as it was
    clean = tmp_path / "clean.txt"
    clean.write_text("nothing secret")
    stamp = clean.stat().st_mtime_ns
    assert scrub_file(clean) and clean.stat().st_mtime_ns == stamp  # unchanged: not rewritten
    assert not scrub_file(tmp_path / "absent.ipynb")


@pytest.mark.slow
def test_a_kernel_killed_during_a_stage_is_a_fail_with_its_memory_diagnosis(tmp_path):
    """The kernel SIGKILLs itself holding 96 MiB: papermill's DeadKernelError, with the
    memory evidence beside it (this kill was no memory exhaustion), in the stage's row."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, signal\nblock = bytearray(96 << 20)\nblock[::4096] = b'x' * len(block[::4096])\n"
        "import time; time.sleep(1.5)  # long enough for a sample of its memory\n"
        "os.kill(os.getpid(), signal.SIGKILL)")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "notebooks" / "09_dies.ipynb"
    path.parent.mkdir()
    nbformat.write(notebook, path)
    outcome = stage_run.run_stage(Stage("09", "dies", path), tmp_path / "run", {}, cell_timeout_s=120,
                                  kernel_name=None, show_inputs=True, progress_bar=False)
    assert outcome.verdict == "FAIL"
    assert outcome.error.startswith("DeadKernelError: Kernel died; "), outcome.error
    assert "no sign of memory exhaustion (peak RSS " in outcome.error, outcome.error
    assert "\n" not in outcome.error  # one line: the terminal shows the first
