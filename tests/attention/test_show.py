"""Stage 02 in the notebook (attention/show.py): the table with its failing rows first and
every row folded, the heatmap labelled as emulated, the model table down the pane, the port
side by side."""

from __future__ import annotations

import difflib

import pandas as pd
import pytest

from hyport_lib import display as D
from hyport_lib.attention import compare as C
from hyport_lib.attention import show
from hyport_lib.proof.model_check import ModelComparison
from hyport_lib.results import StageSummary


def _diff(before: str, after: str, name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"a/{name}", f"b/{name}"))


@pytest.fixture(scope="module")
def float32_result():
    return C.run_comparison(device="cpu", dtypes=["float32"])


def test_show_renders_table_and_heatmap(float32_result):
    html = show.styled_comparison(float32_result).to_html()
    assert "PASS" in html and "npu-emulated (CPU)" in html
    fig = show.rows_heatmap(float32_result.frame())
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == float32_result.cases
    assert "emulated" in ax.get_title()
    import matplotlib.pyplot as plt

    plt.close(fig)
    with pytest.raises(ValueError, match="backend='npu'"):
        show.rows_heatmap(float32_result.frame(), backend="npu")
    assert "not an NPU measurement" in show.provenance_note(float32_result)


def test_a_skipped_model_check_shows_blanks():
    m = ModelComparison("tiny", "", "npu-emulated", "float32", "cpu", detail="not run")
    html = show.styled_model(m).to_html()  # blanks for the missing figures, no "nan%"
    assert "SKIP" in html and "nan" not in html.lower()
    text = show.summary_markdown(StageSummary("SKIP", "no model", {"a": 1}))
    assert text.startswith("**SKIP** — no model") and "- a: 1" in text


def test_backend_summary_counts_and_folds_the_full_table(float32_result, monkeypatch):
    """The stage shows a per-backend summary, failing rows up front, every row folded."""
    result = float32_result
    frame = result.frame()
    frame.loc[frame.index[-1], "verdict"] = "FAIL"
    monkeypatch.setattr(result, "frame", lambda: frame)
    summary = show.backend_summary(result)
    assert summary["cases"].sum() == len(frame)
    failing = summary[summary["FAIL"] > 0]
    assert len(failing) == 1 and failing.iloc[0]["verdict"] == "FAIL"
    assert failing.iloc[0]["backend"] == frame.iloc[-1]["backend"]
    shown = []
    monkeypatch.setattr(show, "_display", shown.append)
    monkeypatch.setattr(show, "_markdown", shown.append)
    show.show_comparison(result)
    assert "1 row not passing" in shown[2]
    assert shown[3].to_html().count("<tr") == 2  # header + the one failing row
    folded = shown[4].data
    assert folded.startswith("<details>") and folded.count("<tr") == len(frame) + 1


def test_02_shows_the_model_table_down_the_pane_the_port_side_by_side_and_the_heatmap_labels_on_top(monkeypatch):
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
    shown = []
    monkeypatch.setattr(show, "_display", shown.append)
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
