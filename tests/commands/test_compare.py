"""``hyport compare``: the page it writes into a report run's folder is linked from that run's
index and report.html, as ``hyport report --compare``'s is."""

from __future__ import annotations

import json
from dataclasses import replace

from hyport_lib.commands import main
from hyport_lib.report.bundle import BUNDLE, write_bundle
from hyport_lib.report.index import write_index
from hyport_lib.report.run import ReportRun, StageOutcome
from hyport_lib.results import RESULTS_DIR_ENV, RUN_DIR_ENV, StageRecord, write_record
from hyport_lib.workbook.compare_show import COMPARE_PAGE

LINK = f'<a href="{COMPARE_PAGE}">'


def _report_run(folder, verdict):
    """A finished report run of stage 01 in ``folder``: its result, run.json, index and
    report.html (run.json names the folder it was written in: the run was moved since)."""
    write_record(StageRecord("01_environment", verdict, f"an {verdict} run"), folder / "results")
    run = ReportRun(folder.name, folder, None, {}, [StageOutcome("01_environment", verdict)], {}, "",
                    status="finished")
    (folder / "run.json").write_text(json.dumps(replace(run, run_dir=folder.parent / "moved-from").to_dict()))
    write_index(run)
    write_bundle(run)
    return folder


def test_the_compare_page_written_into_a_report_run_is_linked_from_its_index(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "interactive" / "results"))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    run = _report_run(tmp_path / "outputs" / "20990102-000000-bbbbbb", "PASS")
    other = _report_run(tmp_path / "outputs" / "20990101-000000-aaaaaa", "WARN")
    for name in ("index.html", BUNDLE):
        assert LINK not in (run / name).read_text()
    assert main(["compare", str(run), str(other)]) == 0
    assert (run / COMPARE_PAGE).is_file()
    for name in ("index.html", BUNDLE):
        assert LINK in (run / name).read_text(), name
    assert f"index: {run / 'index.html'}" in capsys.readouterr().out
    assert not (tmp_path / "outputs" / "moved-from").exists()  # written where the run is now
    assert LINK not in (other / "index.html").read_text()  # the other run's folder is left as it was


def test_a_compare_page_written_elsewhere_leaves_the_index_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "interactive" / "results"))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    run = _report_run(tmp_path / "outputs" / "20990102-000000-bbbbbb", "PASS")
    other = _report_run(tmp_path / "outputs" / "20990101-000000-aaaaaa", "WARN")
    before = (run / "index.html").read_text()
    assert main(["compare", str(run), str(other), "--out", str(tmp_path / "page.html")]) == 0
    assert (tmp_path / "page.html").is_file() and (run / "index.html").read_text() == before


def test_an_unreadable_run_json_costs_the_link_not_the_page(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "interactive" / "results"))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    run = _report_run(tmp_path / "outputs" / "20990102-000000-bbbbbb", "PASS")
    other = _report_run(tmp_path / "outputs" / "20990101-000000-aaaaaa", "WARN")
    (run / "run.json").write_text("{half")
    assert main(["compare", str(run), str(other)]) == 0
    assert (run / COMPARE_PAGE).is_file() and LINK not in (run / "index.html").read_text()
    assert "index: not rewritten to link compare.html: " in capsys.readouterr().err
