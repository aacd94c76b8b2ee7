"""report.html, the index and every stage page in one file to send, and the zip of a run
(hyport_lib/report/bundle.py)."""

from __future__ import annotations

import json
import re
import zipfile

from hyport_lib.report.bundle import render_bundle, zip_run

from .test_index import _run


def _page(heading: str, table: str = "") -> str:
    return ('<html><head><style>.jp-Cell{margin:0}</style></head><body class="jp-Notebook"><main>'
            f'<h2 id="Parameters">{heading}<a class="anchor-link" href="#Parameters">¶</a></h2>'
            f'<a href="https://x.org/#y">out</a>{table}</main></body></html>')


def test_the_bundle_inlines_every_stage_page_with_its_own_anchors(tmp_path):
    """No frames: each page's body is in the file, the shared styles once, and two pages'
    "Parameters" headings stay two anchors; a styled table keeps the ids its CSS names."""
    run = _run(tmp_path, {"01_environment": "PASS", "03_inference": "WARN"})
    (tmp_path / "html").mkdir()
    styled = ('<style>#T_1_row0_col0{background:#c8e6c9}</style><table id="T_1"><tr>'
              '<th id="T_1_h">decode_tokens_per_s</th><td id="T_1_row0_col0">/opt/run/x</td></tr></table>')
    for stage, table in (("01_environment", ""), ("03_inference", styled)):
        (tmp_path / "html" / f"{stage}.html").write_text(_page(f"{stage} parameters", table))
        run.stages[-1 if stage.startswith("03") else 0].html = f"html/{stage}.html"
    text = render_bundle(run)
    assert "<iframe" not in text and "srcdoc" not in text
    assert text.count(".jp-Cell{margin:0}") == 1
    for stage in ("01_environment", "03_inference"):
        assert f'<section class="hy-stage" id="page-{stage}">' in text
        assert f'id="{stage}--Parameters"' in text and f'href="#{stage}--Parameters"' in text
        assert f"{stage} parameters" in text
    assert 'id="T_1_row0_col0"' in text and "#T_1_row0_col0{" in text
    assert "https://x.org/#y" in text
    assert re.search(r'<body[^>]*><a id="top"></a>', text)  # "(top)" goes to the top of the file
    assert "@media print" in text and "break-before:page" in text


def test_the_zip_leaves_out_the_lock_partial_notebooks_and_temporary_files(tmp_path):
    run_dir = tmp_path / "20300101-000000-abcdef"
    for name in ("index.html", "results/01.json", ".runner.lock", ".partial/01.ipynb",
                 "results/.01.json.abc.tmp", "train/model.safetensors"):
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(json.dumps({"name": name}))
    archive = zip_run(run_dir)
    with zipfile.ZipFile(archive) as packed:
        names = sorted(packed.namelist())
        assert names == [f"{run_dir.name}/{n}" for n in ("index.html", "results/01.json",
                                                         "train/model.safetensors")]
        assert packed.getinfo(f"{run_dir.name}/train/model.safetensors").compress_type == zipfile.ZIP_STORED
    assert not list(tmp_path.glob(".*.tmp"))
