"""Every committed notebook runs headless with papermill and no parameters at all.

"No parameters" means the notebook's own defaults, on the CPU backend (``device`` pinned
to cpu wherever this runs; on a CPU-only host the notebooks' own ``"auto"`` is that). A headless papermill run of the session that passed a
notebook nothing but those values is such a run already, and is read instead of running
the notebook again: the five-stage ``default_report`` (for a stage the default profile
gives only its own defaults) and the user's ``papermill 04_train.ipynb out.ipynb -p
max_steps 20`` from notebooks/ (20 being its default). Which run qualifies is computed
from the parameters papermill injected into the executed notebook, never assumed; any
other notebook is run here by itself, as before.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Optional

import pytest

from conftest import HOST_KIND

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: What the tests pin besides the notebook's defaults: the assertions are about CPU provenance.
PINNED = {"device": "cpu"}
#: Defaults that already mean the pinned value on this host: a notebook's own ``device =
#: "auto"`` picks the CPU backend on a CPU-only host, so a run that left it alone (the
#: user's ``-p max_steps 20``) is a run on the pinned device there, and nowhere else.
SAME_AS_PINNED = {"device": {"auto"}} if HOST_KIND == "cpu" else {}


def _cell_values(notebook: dict, tag: str) -> Optional[dict]:
    """name -> literal value of the assignments in the code cell tagged ``tag``."""
    cells = [c for c in notebook["cells"] if tag in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        return None
    tree = ast.parse("".join(cells[0]["source"]))
    return {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def ran_without_parameters(committed: Path, executed: Path) -> bool:
    """Whether ``executed`` is ``committed`` run by papermill with nothing but its own
    defaults (and ``PINNED``, for a notebook that has those parameters)."""
    if not executed.is_file():
        return False
    own = _cell_values(json.loads(committed.read_text()), "parameters")
    if own is None:
        return False
    injected = _cell_values(json.loads(executed.read_text()), "injected-parameters") or {}
    expected = {k: v for k, v in PINNED.items() if k in own}

    def pinned(name: str, value) -> bool:
        ran_with = injected.get(name, own.get(name))
        return ran_with == value or ran_with in SAME_AS_PINNED.get(name, ())

    return all(pinned(k, v) for k, v in expected.items()) \
        and all(k in expected or (k in own and own[k] == v) for k, v in injected.items())


@pytest.fixture(scope="module")
def without_parameters(default_report, papermill_04, tmp_path_factory):
    """``executed(path) -> (executed notebook, results folder)`` of a run of the committed
    notebook ``path`` without parameters: a shared run where one qualifies, else its own."""

    def shared(path: Path):
        _, run_dir = default_report
        if run_dir is not None:
            yield run_dir / "notebooks" / path.name, run_dir / "results"
        if path.name == "04_train.ipynb":
            done = papermill_04("notebooks")
            yield done.notebook, done.results

    def executed(path: Path) -> tuple[Path, Path]:
        for notebook, results in shared(path):
            if ran_without_parameters(path, notebook):
                return notebook, results
        return _run_alone(path, tmp_path_factory.mktemp(path.stem))

    return executed


def _run_alone(path: Path, folder: Path) -> tuple[Path, Path]:
    import papermill

    results = folder / "results"
    out = folder / path.name
    saved = os.environ.get("HYPORT_RESULTS_DIR")
    os.environ["HYPORT_RESULTS_DIR"] = str(results)
    here = os.getcwd()
    os.chdir(folder)  # as a user would: papermill from some other folder
    try:
        own = papermill.inspect_notebook(str(path))
        papermill.execute_notebook(str(path), str(out), execution_timeout=600, progress_bar=False,
                                   cwd=str(path.parent), parameters={k: v for k, v in PINNED.items() if k in own})
    finally:
        os.chdir(here)
        if saved is None:
            os.environ.pop("HYPORT_RESULTS_DIR", None)
        else:
            os.environ["HYPORT_RESULTS_DIR"] = saved
    return out, results


def test_the_sharing_check_can_fail(tmp_path):
    """ran_without_parameters refuses a run given another value, or a parameter the
    notebook does not have; it accepts the pinned device and the notebook's own values."""
    path = REPO / "notebooks" / "04_train.ipynb"
    own = _cell_values(json.loads(path.read_text()), "parameters")

    def executed(injected: str) -> Path:
        nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["injected-parameters"]},
                         "source": injected}]}
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.ipynb"
        out.write_text(json.dumps(nb))
        return out

    assert ran_without_parameters(path, executed(f"device = 'cpu'\nmax_steps = {own['max_steps']!r}\n"))
    assert not ran_without_parameters(path, executed(f"max_steps = {own['max_steps'] + 1}\n"))
    # "auto", given or the notebook's own (the user's -p max_steps 20), is the CPU on a CPU host only
    assert ran_without_parameters(path, executed("device = 'auto'\n")) == (HOST_KIND == "cpu")
    assert ran_without_parameters(path, executed(f"max_steps = {own['max_steps']!r}\n")) == (HOST_KIND == "cpu")
    assert not ran_without_parameters(path, executed("device = 'cuda'\n"))
    assert not ran_without_parameters(path, executed("device = 'cpu'\nnot_a_parameter = 1\n"))
    assert not ran_without_parameters(path, tmp_path / "missing.ipynb")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_parameters(path, without_parameters):
    out, results = without_parameters(path)
    nb = json.loads(out.read_text())
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    recorded = json.loads((results / f"{path.stem}.json").read_text())
    assert recorded["stage"] == path.stem
    assert recorded["verdict"] in ("PASS", "WARN", "SKIP")
    assert recorded["provenance"] and recorded["provenance"]["label"]
    # no figure from this CPU host may be presented as an NPU measurement
    assert recorded["provenance"]["device"] != "npu"
    assert os.path.getsize(out) > 2000
