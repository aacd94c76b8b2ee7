"""Tables that fit the pane, verdicts as text, missing values as a dash, diffs side by side
(hyport_lib/display.py and the show modules that use it)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pandas as pd

from hyport_lib import display as D

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


def test_a_table_can_be_sorted_and_filtered_above_a_static_table():
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
    assert sort.index == 0 and sort.label == "as listed"  # never a blank dropdown
    sort.value, query.value = "relative change", "proj"  # each change redraws the table
    assert box.count.value == "2 of 3 tensors"
    assert box.table.value.index("q_proj") < box.table.value.index("k_proj") and "lm_head" not in box.table.value
    sort.index = 0  # back to "as listed": the rows' own order, and the dropdown says so
    assert sort.label == "as listed" and box.table.value.index("q_proj") < box.table.value.index("k_proj")
    query.value = ""
    assert box.table.value.index("model.layers.1") < box.table.value.index("lm_head")


def test_a_column_of_numbers_and_text_sorts_its_missing_values_last():
    frame = pd.DataFrame({"x": [1, "a", None, float("nan"), 3]})
    order = list(D.explore(frame, "x", descending=False)["x"])
    assert order[:3] == [1, 3, "a"]  # as text: "1" < "3" < "a"
    assert all(v is None or v != v for v in order[3:])  # both missing ones last


def test_a_picture_slow_to_draw_does_not_stretch_the_redraw_interval(monkeypatch):
    """The interval counts from when the picture began to be made: drawn in 0.8 s every 2 s,
    not every 2.8 s."""
    import hyport_lib.display as display_module
    from IPython import display as ipython_display

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj)

    clock = [100.0]
    monkeypatch.setattr(display_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(ipython_display, "display", lambda obj, display_id=None: shown.append(obj) or Handle())
    live = display_module.LiveDisplay(min_interval_s=2.0)
    for picture in ("first", "second"):
        started = clock[0]
        clock[0] += 0.8  # drawing it
        assert live.update(picture, started=started)
        clock[0] += 1.2  # 2 s after the drawing began
        assert live.due()
    assert shown == ["first", "second"]
    plain = display_module.LiveDisplay(min_interval_s=2.0)  # without started: from the end
    plain.update("third")
    clock[0] += 1.2
    assert not plain.due()
