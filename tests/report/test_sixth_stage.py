"""A stage is its notebook and its package: the report shows a sixth one with no other edit.

The report knows no stage by name (a fast test reads its sources); a throw-away stage
``06_extra`` (a package ``hyport_lib.extra`` in a temporary folder and a notebook beside
copies of the real ones) then runs through ``run_report`` and appears in ``index.html``,
``report.html`` and both drafts, drawn by its own ``show`` module.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from hyport_lib.stages import discover_stages
from blog_drafts import english_runs, unsourced

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "hyport_lib" / "report"
WORKBOOK = REPO / "hyport_lib" / "workbook"



def test_the_report_and_the_workbook_name_no_stage():
    """No stage name (as a string or a package), no stage id, anywhere in report/ or in
    workbook/ (the comparison of runs asks each stage's ``compare`` hook)."""
    found = set()
    paths = sorted([*REPORT.rglob("*.py"), *WORKBOOK.rglob("*.py")])
    assert paths
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for stage in discover_stages():
            for pattern in (f'"{stage.name}"', f"'{stage.name}'", f"hyport_lib.{stage.name}", stage.id):
                if pattern in text:
                    found.add((str(path.relative_to(REPO)), pattern))
    assert not found, sorted(found)


# --------------------------------------------------------------------------- the sixth stage
STAGE_PY = '''
    """Stage 06: count widgets (a stand-in for a new stage)."""

    from dataclasses import dataclass, field

    from hyport_lib.results import Provenance, StageSummary

    STAGE = "06_extra"


    @dataclass
    class Widgets:
        widgets: int = 0
        notes: list[str] = field(default_factory=list)

        @property
        def provenance(self) -> Provenance:
            return Provenance(device="cpu")


    RESULT = Widgets


    def plan(params):
        return params


    def run(count: int) -> Widgets:
        return Widgets(count, ["widgets were counted on the CPU"])


    def summarize(result: Widgets) -> StageSummary:
        return StageSummary("PASS", f"counted {result.widgets} widgets", {"widgets": result.widgets})
'''

PARAMS_PY = '''
    from dataclasses import dataclass

    from hyport_lib.params import StageParams, param


    @dataclass
    class Params(StageParams):
        count: int = param(7, "widgets to count", min=0)
'''

SHOW_PY = '''
    """Stage 06 in the report: its card, its notes, its figure (its draft section is
    blog.md.j2 beside this module, its Chinese text blog.zh.po)."""

    from hyport_lib.drafting.values import fmt_value
    from hyport_lib.extra.stage import Widgets
    from hyport_lib.results import StageRecord


    def glance(record: StageRecord[Widgets]) -> list[tuple[str, str]]:
        return [("widgets", fmt_value(record.data.widgets))]


    def blog_notes(record: StageRecord[Widgets]) -> list[str]:
        return record.data.notes


    def blog_figures(record: StageRecord[Widgets]) -> dict:
        return {"widgets": lambda: _bars(record.data.widgets)}


    def _bars(widgets: int):
        from matplotlib.figure import Figure

        fig = Figure(figsize=(2, 2))
        fig.subplots().bar([0], [widgets])
        return fig
'''

#: The stage's draft section (one template for every language) and its Chinese text.
BLOG = {"blog.md.j2": '''
    {% macro title() %}{{ _("Extra checks") }}{% endmacro %}
    {% macro section(r, x) %}
    {{ _("The extra stage counted %(widgets)s widgets.", widgets=r.data.widgets|num) }}

    {% if figures.widgets %}
    ![{{ _("Widgets") }}]({{ figures.widgets }})
    {% endif %}
    {% endmacro %}
''', "blog.zh.po": '''
    msgid "Extra checks"
    msgstr "额外检查"

    msgid "The extra stage counted %(widgets)s widgets."
    msgstr "额外阶段数出 %(widgets)s 个部件。"

    msgid "Widgets"
    msgstr "部件"
'''}

def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("count = 7")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# 06 Extra checks"), params,
                nbformat.v4.new_code_cell("from hyport_lib.extra import stage\nfrom hyport_lib.results import record\n\n"
                                          "result = stage.run(count)\nprint(record(stage, result))")]
    nbformat.write(nb, str(path))


@pytest.fixture
def sixth_stage(tmp_path, stage_packages):
    """A notebooks folder with the five real notebooks and ``06_extra.ipynb``, and the
    package ``hyport_lib.extra`` importable here and in the papermill kernel."""
    package = stage_packages / "extra"
    package.mkdir()
    (package / "__init__.py").write_text('"""A throw-away sixth stage."""\n')
    for name, text in {"params.py": PARAMS_PY, "stage.py": STAGE_PY, "show.py": SHOW_PY, **BLOG}.items():
        (package / name).write_text(textwrap.dedent(text).lstrip())
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for stage in discover_stages():
        shutil.copy(stage.path, notebooks / stage.path.name)
    _notebook(notebooks / "06_extra.ipynb")
    return notebooks


@pytest.mark.slow
def test_a_sixth_stage_shows_in_the_index_the_bundle_and_both_drafts(sixth_stage, tmp_path):
    from hyport_lib.report.runner import run_report

    run = run_report(profile=None, only=["06"], notebooks_dir=sixth_stage, output_root=tmp_path / "out",
                     cell_timeout_s=300, progress=lambda m: None)
    assert [(s.stage, s.verdict) for s in run.stages] == [("06_extra", "PASS")], run.stages
    assert run.left_out == [s.id for s in discover_stages()]
    run_dir = run.run_dir
    record = json.loads((run_dir / "results" / "06_extra.json").read_text())
    assert record["data"]["widgets"] == 7

    index = (run_dir / "index.html").read_text(encoding="utf-8")
    card = re.search(r'<div class="card" id="glance-06_extra">(.*?)</div></div>', index, re.S)
    assert card and "<dt>widgets</dt><dd>7</dd>" in card.group(1)
    bundle = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "<dt>widgets</dt><dd>7</dd>" in bundle and 'id="page-06_extra"' in bundle

    en, zh = (run_dir / "blog.en.md").read_text(), (run_dir / "blog.zh.md").read_text()
    assert "## 06 Extra checks — PASS" in en and "The extra stage counted 7 widgets." in en
    assert "## 06 额外检查 — 通过" in zh and "额外阶段数出 7 个部件。" in zh
    assert "> widgets were counted on the CPU" in en  # its notes among the caveats
    for draft in (en, zh):
        assert "![" in draft and "(figures/widgets.png)" in draft
        assert not unsourced(draft, run_dir)
    assert (run_dir / "figures" / "widgets.png").read_bytes()[:4] == b"\x89PNG"
    assert "Extra checks" not in zh and not english_runs(zh), english_runs(zh)
    # the stages left out are named by their own titles, in both languages
    assert "02 Attention swap" in en and "02 注意力替换" in zh
    assert (run_dir / "blog.md").read_text() == en
