"""Stage 05's rendering (:mod:`hyport_lib.weights.show`): long tables explorable in the lab,
static in a saved notebook, and whole or cut with a note in the report."""

from __future__ import annotations

import pytest

from hyport_lib import display as D
from hyport_lib.checkpoint_files.findings import Finding
from hyport_lib.results import RUN_DIR_ENV
from hyport_lib.weights import show
from hyport_lib.weights.compare import DIFF_COLUMNS


@pytest.fixture
def shown(monkeypatch):
    """What the show functions display, in order."""
    import IPython.display

    items = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: items.append(obj))
    return items


def test_the_tensors_compared_are_explorable_in_the_lab_and_the_largest_changes_in_the_report(
        shown, monkeypatch):
    rows = [{c: None for c in DIFF_COLUMNS} | {"tensor": f"t{i}", "status": "changed", "relative change": i / 100}
            for i in range(52)]
    comparison = type("C", (), {"role": "base", "other_path": "/base", "rows": rows, "bytes_read": 1, "seconds": 0.1,
                                "compared": 0, "to_dict": lambda self: {"statuses": {"changed": 52}},
                                "count": lambda self, status: 0})()
    result = type("R", (), {"comparisons": [comparison], "parity": None, "skipped": ""})()
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    show.show_comparisons(result)
    explorer, static = shown[1], shown[3]
    assert explorer.count.value == "52 of 52 tensors" and explorer.table.value.count("<tr") == 53
    assert isinstance(static, D.FittedTable) and len(static.data) == 15  # a saved notebook keeps it
    assert list(static.data["tensor"][:2]) == ["t51", "t50"]  # the largest changes first
    # the report keeps no widget: the 15 that changed most, and a line saying there are more
    monkeypatch.setenv(RUN_DIR_ENV, "/tmp/run")
    shown.clear()
    show.show_comparisons(result)
    assert not any(hasattr(item, "controls") for item in shown)
    assert "The first 15 of 52 tensors" in shown[1].data and len(shown[2].data) == 15


def test_findings_are_explorable_in_the_lab_and_whole_in_the_report(shown, monkeypatch):
    findings = [Finding(cls="key_removed" if i % 2 else "shape_changed", file=f"model-{i}.safetensors",
                        message=f"finding {i}") for i in range(14)]
    result = type("R", (), {"counts": {"error": 7, "warning": 7, "info": 0}, "findings": findings, "skipped": ""})()
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    show.show_findings(result)
    explorer, static = shown[1], shown[3]
    assert explorer.count.value == "14 of 14 findings" and "The first 10 of 14 findings" in shown[2].data
    explorer.controls[2].value = "model-13"  # the filter box
    assert explorer.count.value == "1 of 14 findings" and "finding 13" in explorer.table.value
    assert isinstance(static, D.FittedTable) and len(static.data) == 10
    # under hyport report the page keeps no widget: every finding, in one static table
    monkeypatch.setenv(RUN_DIR_ENV, "/tmp/run")
    shown.clear()
    show.show_findings(result)
    assert len(shown) == 2 and isinstance(shown[1], D.FittedTable) and len(shown[1].data) == 14
