"""Tables that fit the pane, verdicts as text, missing values as a dash, diffs side by side
(hyport_lib/display.py and the show modules that use it)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pandas as pd

from hyport_lib import display as D
from hyport_lib.results import RUN_DIR_ENV

REPO = Path(__file__).resolve().parents[1]
#: Pictographs and dingbats (✅ ❌ ⚠ ✓ ...), and the emoji variation selector.
EMOJI = re.compile("[\u2600-\u27bf\u2b50\u2b55\ufe0f\U0001f300-\U0001faff]")


def test_a_fitted_table_scrolls_in_its_box_wraps_long_cells_and_shows_missing_as_a_dash():
    frame = pd.DataFrame([{"case": "a", "max_abs": None, "cosine": float("nan"), "verdict": "PASS",
                           "detail": "<unk> " + "word " * 80}])
    table = D.fit(frame)
    html = table.to_html()
    assert html.startswith('<div class="hyport-table" style="overflow-x: auto; max-width: 100%">')
    assert f"max-width: {D.CELL_MAX_WIDTH}" in html and "overflow-wrap: break-word" in html
    assert "None" not in html and "nan" not in html and html.count(f">{D.MISSING}<") == 2
    assert "&lt;unk&gt;" in html  # a cell's text is text, not markup
    assert table._repr_html_() == html and table.data is frame
    assert D.MISSING in repr(table)  # a text-only front end


def test_verdicts_are_coloured_text_and_no_shown_text_carries_an_emoji():
    label = D.verdict_label("warn")
    assert ">WARN<" in label and D.VERDICT_COLOURS["WARN"] in label
    assert "3 PASS" in D.verdict_label("PASS", "3 PASS")
    assert D.VERDICT_COLOURS["FAIL"] in D.fit(D.styled(pd.DataFrame({"verdict": ["FAIL"]}), colour=("verdict",))).to_html()
    # Without an emoji font an emoji is an empty box: nothing the workbook shows has one.
    found = [f"{path.relative_to(REPO)}:{n}" for folder in ("hyport_lib", "notebooks")
             for path in sorted((REPO / folder).rglob("*")) if path.suffix in (".py", ".ipynb", ".j2")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if EMOJI.search(line)]
    assert found == []


def _diff(before: str, after: str, name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"a/{name}", f"b/{name}"))


def _rows(html: str) -> list[list[str]]:
    """Each row's cells as text (markup dropped)."""
    return [[re.sub("<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", html)]


def test_a_diff_is_shown_side_by_side_with_its_line_numbers_and_changed_characters():
    before = "import torch\n" + "".join(f"x{i} = {i}\n" for i in range(10)) + "dev = torch.device('cuda')\n"
    after = ("import torch\nfrom .hyport_port import accelerator_device\n"
             + "".join(f"x{i} = {i}\n" for i in range(10)) + "dev = accelerator_device()\nif a < b: pass\n")
    unified = _diff(before, after, "model.py") + _diff("a\n", "b\n", "other.py")
    html = D.diff_html(unified)
    assert html.count('<div class="hyport-table"') == 2  # a table per file
    assert "a/model.py → b/model.py" in html and "a/other.py → b/other.py" in html
    rows = _rows(html.split("a/other.py")[0])
    assert ["", "", "2", "from .hyport_port import accelerator_device"] in rows  # added: right only
    assert ["12", "dev = torch.device(&#x27;cuda&#x27;)", "13", "dev = accelerator_device()"] in rows  # one row
    assert ["", "", "14", "if a &lt; b: pass"] in rows  # escaped
    assert rows[2][:3] == ["1", "import torch", "1"]  # context on both sides
    # The words that changed marked, not the letters they share ("tor" of torch / accelerator).
    assert 'background:#ffcdd2">torch.device</span>(' in html
    assert 'background:#a5d6a7">accelerator_device</span>()' in html
    assert D.diff_html("") == ""


def _captured(monkeypatch, module):
    """What ``module``'s show functions display, in order."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    if hasattr(module, "_display"):
        monkeypatch.setattr(module, "_display", shown.append)
    return shown


def test_the_devices_table_shows_a_dash_and_says_why(monkeypatch):
    from hyport_lib.devices.cards import DeviceInfo
    from hyport_lib.environment import show
    from hyport_lib.environment.collect import EnvironmentReport
    from hyport_lib.environment.facts import CannFacts
    from hyport_lib.results import Check

    report = EnvironmentReport(system={}, versions={}, cann=CannFacts(), env_vars={}, device="cpu",
                               devices=[DeviceInfo(0, None, None, "cpu worker 0", None, None, None)],
                               checks=[Check("backend", "PASS", "cpu")])
    shown = _captured(monkeypatch, show)
    show.show_environment(report, system=False)
    devices = next(s for s in shown if hasattr(s, "data") and "chip" in getattr(s.data, "columns", []))
    assert "None" not in devices.to_html() and f">{D.MISSING}<" in devices.to_html()
    note = next(s.data for s in shown if isinstance(getattr(s, "data", None), str) and s.data.startswith(D.MISSING))
    assert "npu" in note and "the CPU backend has no cards" in note
    assert all(isinstance(s, D.FittedTable) for s in shown if hasattr(s, "to_html") and not isinstance(s.data, str))


def test_02_shows_the_model_table_down_the_pane_the_port_side_by_side_and_the_heatmap_labels_on_top(monkeypatch):
    from hyport_lib.attention import show
    from hyport_lib.proof.model_check import ModelComparison
    from hyport_lib.port.codemod import Change
    from hyport_lib.port.tree import PortResult

    model = ModelComparison("tiny", "", "npu-emulated", "float32", "cpu", detail="not run")
    table = show.styled_model(model).data
    assert list(table.columns) == ["field", "value"] and len(table) == len(show.model_table(model).columns)
    assert table.set_index("field").loc["max_abs_logits", "value"] == D.MISSING
    before, after = "x = torch.cuda.current_device()\ny = 'line one\\nline two'\n", "x = current_device()\ny = 'line one\\nline two'\n"
    port = PortResult("src", "dst", changes=[Change("m.py", 1, "cuda_call", "torch.cuda.current_device()\n# more",
                                                    "current_device()")],
                      files_changed=["m.py"], diff=_diff(before, after, "m.py"))
    shown = _captured(monkeypatch, show)
    monkeypatch.setattr(show, "_markdown", lambda text: None)
    show.show_port(port)
    changes, diff = shown[0].to_html(), shown[1].data
    assert "white-space: pre-wrap" in changes and "torch.cuda.current_device()\n# more" in changes  # whole, in lines
    assert diff.startswith("<details open>") and "a/m.py → b/m.py" in diff
    assert "line one\\nline two" in diff  # the file's own escape, not a cell's newline
    fig = show.rows_heatmap(pd.DataFrame([{"case": f"c{i}", "backend": "npu-emulated", "source": "emulated",
                                           "max_abs": 1e-3, "bound": 1e-2, "rmse": 1e-4, "max_rel": 1e-3,
                                           "rel_gt_1e-3": 0.0, "rel_gt_5e-3": 0.0, "cosine": 1.0}
                                          for i in range(45)]))
    top = [t.label2 for t in fig.axes[0].xaxis.get_major_ticks()]
    assert all(label.get_visible() for label in top) and top[0].get_text() == show.HEATMAP_METRICS[0][0]



def test_05s_tensors_can_be_sorted_and_filtered_above_a_static_table(monkeypatch):
    from hyport_lib.weights import show
    from hyport_lib.weights.compare import DIFF_COLUMNS

    frame = pd.DataFrame([{"name": "model.layers.0.q_proj.weight", "relative change": 0.5},
                          {"name": "model.layers.1.k_proj.weight", "relative change": None},
                          {"name": "lm_head.weight", "relative change": 0.9}])
    assert list(D.explore(frame, "relative change")["name"]) == [
        "lm_head.weight", "model.layers.0.q_proj.weight", "model.layers.1.k_proj.weight"]  # missing last
    assert list(D.explore(frame, "relative change", descending=False)["relative change"])[:2] == [0.5, 0.9]
    assert list(D.explore(frame, query="LAYERS.1")["name"]) == ["model.layers.1.k_proj.weight"]
    assert list(D.explore(frame, "name", query="proj")["name"])[0] == "model.layers.1.k_proj.weight"
    box = D.table_explorer(frame, what="tensors")
    sort, descending, query = box.controls
    assert box.count.value == "3 of 3 tensors" and "lm_head" in box.table.value
    sort.value, query.value = "relative change", "proj"  # each change redraws the table
    assert box.count.value == "2 of 3 tensors"
    assert box.table.value.index("q_proj") < box.table.value.index("k_proj") and "lm_head" not in box.table.value

    rows = [{c: None for c in DIFF_COLUMNS} | {"tensor": f"t{i}", "status": "changed", "relative change": i / 100}
            for i in range(52)]
    comparison = type("C", (), {"role": "base", "other_path": "/base", "rows": rows, "bytes_read": 1, "seconds": 0.1,
                                "compared": 0, "to_dict": lambda self: {"statuses": {"changed": 52}},
                                "count": lambda self, status: 0})()
    result = type("R", (), {"comparisons": [comparison], "parity": None})()
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    shown = _captured(monkeypatch, show)
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


def test_05s_findings_are_explorable_in_the_lab_and_whole_in_the_report(monkeypatch):
    from hyport_lib.checkpoint_files.findings import Finding
    from hyport_lib.weights import show

    findings = [Finding(cls="key_removed" if i % 2 else "shape_changed", file=f"model-{i}.safetensors",
                        message=f"finding {i}") for i in range(14)]
    result = type("R", (), {"counts": {"error": 7, "warning": 7, "info": 0}, "findings": findings})()
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    shown = _captured(monkeypatch, show)
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


def test_a_column_of_numbers_and_text_sorts_its_missing_values_last():
    frame = pd.DataFrame({"x": [1, "a", None, float("nan"), 3]})
    order = list(D.explore(frame, "x", descending=False)["x"])
    assert order[:3] == [1, 3, "a"]  # as text: "1" < "3" < "a"
    assert all(v is None or v != v for v in order[3:])  # both missing ones last
