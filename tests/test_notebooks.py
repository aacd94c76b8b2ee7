"""Every committed notebook runs headless with papermill and no parameters at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_parameters(path, tmp_path, monkeypatch):
    import papermill

    results = tmp_path / "results"
    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(results))
    monkeypatch.chdir(tmp_path)  # as a user would: papermill from some other folder
    out = tmp_path / path.name
    # Defaults, but on the CPU backend wherever this runs (a GPU host's "auto" is cuda):
    # the assertions below are about CPU provenance.
    pinned = {"device": "cpu"} if "device" in papermill.inspect_notebook(str(path)) else {}
    papermill.execute_notebook(str(path), str(out), execution_timeout=600, progress_bar=False,
                               cwd=str(path.parent), parameters=pinned)
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
