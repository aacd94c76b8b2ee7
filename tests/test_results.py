"""Stage records (hyport_lib/results.py): every interactive record kept under
``history/<run-id>/`` with its parameters, the latest still where stage 05 and the show
modules read it; a report run keeps its own. Verdicts, checks and provenance as recorded."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hyport_lib.results import (HISTORY_DIR, RESULTS_DIR_ENV, RUN_DIR_ENV, Check, Provenance, StageRecord,
                                StageSummary, UnreadableResult, ensure_results_dir, history_dir, load_record,
                                read_record, read_result, record, worst_verdict, write_record)
from hyport_lib.train.params import Params as TrainParams

#: A stage whose result is its summary: what :func:`record` asks of a stage module.
TRAIN = SimpleNamespace(STAGE="04_train", summarize=lambda summary: summary)


@pytest.fixture
def interactive(tmp_path, monkeypatch):
    """An interactive session: the results folder of a checkout, no report run."""
    results = tmp_path / "interactive" / "results"
    monkeypatch.setenv(RESULTS_DIR_ENV, str(results))
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    return results


def test_each_interactive_run_is_kept_with_its_effective_parameters(interactive):
    first = record(TRAIN, StageSummary("PASS", "20 steps"), params=TrainParams(max_steps=20))
    second = record(TRAIN, StageSummary("FAIL", "NaN at step 3"), params=TrainParams(max_steps=3))
    assert first == second == interactive / "04_train.json"  # the latest stays where 05 reads it
    latest = read_result(second)
    assert latest["verdict"] == "FAIL" and latest["params"]["max_steps"] == 3
    # every field, not only the one changed: the run can be told apart later
    assert set(latest["params"]) == set(TrainParams().to_dict()) and "model_path" in latest["params"]

    runs = sorted(history_dir().iterdir())
    assert history_dir() == interactive.parent / HISTORY_DIR and len(runs) == 2
    kept = [read_result(run / "04_train.json") for run in runs]
    assert {k["run_id"] for k in kept} == {run.name for run in runs}
    assert [k["params"]["max_steps"] for k in sorted(kept, key=lambda k: k["verdict"])] == [3, 20]
    assert kept[[k["run_id"] for k in kept].index(latest["run_id"])] == latest  # the latest is one of them
    assert all("04_train" in run.name for run in runs)


def test_a_report_run_keeps_its_own_results_and_no_history(interactive, tmp_path, monkeypatch):
    run = tmp_path / "20250101-run"
    monkeypatch.setenv(RUN_DIR_ENV, str(run))
    monkeypatch.setenv(RESULTS_DIR_ENV, str(run / "results"))
    path = write_record(StageRecord("03_inference", "PASS", "2 cards agree"))
    assert path == run / "results" / "03_inference.json"
    assert read_result(path)["run_id"] == "" and not (run / HISTORY_DIR).exists()
    assert not (interactive.parent / HISTORY_DIR).exists()


def test_a_record_into_a_chosen_folder_is_not_kept_twice(interactive, tmp_path):
    path = write_record(StageRecord("02_attention", "WARN", "1 case"), directory=tmp_path / "mine")
    assert path.is_file() and not history_dir().exists()


def test_an_older_record_without_parameters_still_loads(tmp_path):
    old = tmp_path / "01_environment.json"
    old.write_text(json.dumps({"stage": "01_environment", "verdict": "PASS", "summary": "ok"}))
    result = load_record(old)
    assert result.params == {} and result.run_id == ""


def test_the_worst_verdict_counts_skip_only_alone():
    assert worst_verdict(["PASS", "SKIP", "WARN"]) == "WARN" and worst_verdict(["FAIL", "WARN"]) == "FAIL"
    assert worst_verdict(["SKIP"]) == worst_verdict([]) == "SKIP"


def test_a_check_says_its_verdict_in_capitals_on_one_line_and_refuses_an_unknown_one():
    check = Check("torch_npu_compat", "warn", "torch 2.5\n  and torch_npu 2.1")
    assert check.verdict == "WARN" and check.reason == "torch 2.5 and torch_npu 2.1"
    with pytest.raises(ValueError, match="Check 'x': verdict='MAYBE'"):
        Check("x", "MAYBE", "")


def test_a_cpu_or_emulated_figure_is_never_labelled_an_npu_one():
    assert Provenance("npu").label == "NPU" and Provenance("cuda").label == "CUDA GPU"
    assert Provenance("cpu").label == "CPU (not an NPU measurement)"
    assert Provenance("cpu", emulated=True).label == "NPU-emulated on CPU (not an NPU measurement)"


def test_a_record_without_a_stage_or_with_an_odd_verdict_is_refused_and_not_written(tmp_path):
    with pytest.raises(ValueError, match="verdict='MAYBE'"):
        write_record(StageRecord("01_environment", "MAYBE"), directory=tmp_path)
    with pytest.raises(ValueError, match="stage must be"):
        write_record(StageRecord(None, "PASS"), directory=tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_half_written_or_odd_result_is_named_and_an_odd_verdict_still_reads(tmp_path):
    half = tmp_path / "03_inference.json"
    half.write_text("{ half")
    with pytest.raises(UnreadableResult, match="03_inference.json"):
        read_result(half)
    with pytest.raises(ValueError, match="not a valid hyport result"):
        load_record(half)
    odd = tmp_path / "02_attention.json"
    odd.write_text(json.dumps({"stage": "02_attention", "verdict": "GREAT", "headline": {"cases": 3}}))
    assert read_record(read_result(odd)).verdict == "GREAT" and read_record({}).figure("cases") is None
    with pytest.raises(ValueError, match="verdict='GREAT'"):
        load_record(odd)


def test_an_unwritable_results_folder_is_named_with_the_variable_that_chose_it(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv(RESULTS_DIR_ENV, str(blocker / "results"))
    with pytest.raises(PermissionError, match=r"results folder .*a-file/results \(\$HYPORT_RESULTS_DIR\)"):
        ensure_results_dir()
    assert ensure_results_dir(tmp_path / "ok") == tmp_path / "ok"



def _holds(written, recorded, where: str = "data") -> list[str]:
    """Where ``written`` (a record read back and written again) says something else than
    ``recorded``: every key it writes with the recorded value (keys a stage derives when it
    records, its verdict for one, may be missing)."""
    if isinstance(written, dict) and isinstance(recorded, dict):
        return [d for k, v in written.items() for d in ([f"{where}/{k}: not recorded"] if k not in recorded
                                                        else _holds(v, recorded[k], f"{where}/{k}"))]
    if isinstance(written, list) and isinstance(recorded, list):
        if len(written) != len(recorded):
            return [f"{where}: {len(recorded)} recorded, {len(written)} read back"]
        return [d for i, (w, r) in enumerate(zip(written, recorded)) for d in _holds(w, r, f"{where}[{i}]")]
    return [] if written == recorded else [f"{where}: {recorded!r} recorded, {written!r} read back"]


@pytest.mark.slow
def test_every_record_of_a_real_run_reads_back_as_its_stage_result_with_what_it_holds(default_report):
    """Each stage's record, read back as its RESULT (what the report's pages and compare
    read) and written again, holds the recorded values: a nested class that writes its
    fields under other names must read them back (a 05 finding's ``class``)."""
    from hyport_lib.stages import read_stage_record
    from hyport_lib.utils.typed_records import to_mapping

    _, run_dir = default_report
    records = sorted((run_dir / "results").glob("*.json"))
    assert len(records) == 5
    for path in records:
        raw = json.loads(path.read_text(encoding="utf-8"))
        read = read_stage_record(path.stem, raw)
        written = json.loads(json.dumps(to_mapping(read.data), default=str))
        assert not _holds(written, raw["data"]), (path.name, _holds(written, raw["data"])[:5])


def test_interactive_results_go_under_the_current_folder_or_hyport_outputs_never_the_checkout(tmp_path,
                                                                                                monkeypatch):
    """``hyport env`` run from another folder writes there, not into the repository an
    editable install lies in; ``HYPORT_OUTPUTS`` moves every interactive folder and is where
    report runs are looked up; ``HYPORT_RESULTS_DIR`` (a report run's own) still wins."""
    from pathlib import Path

    import hyport_lib
    from hyport_lib.results import OUTPUTS_ENV, fresh_folder_beside_results, outputs_dir, results_dir
    from hyport_lib.workbook.compare import list_runs

    checkout = Path(hyport_lib.__file__).resolve().parents[1]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for name in (RESULTS_DIR_ENV, RUN_DIR_ENV, OUTPUTS_ENV):
        monkeypatch.delenv(name, raising=False)
    assert results_dir() == elsewhere / "outputs" / "interactive" / "results"
    assert history_dir() == elsewhere / "outputs" / "interactive" / HISTORY_DIR
    assert not fresh_folder_beside_results("logs").is_relative_to(checkout)
    path = write_record(StageRecord("01_environment", "PASS", "ok"))
    assert path == elsewhere / "outputs" / "interactive" / "results" / "01_environment.json"
    assert len(list(history_dir().iterdir())) == 1

    monkeypatch.setenv(OUTPUTS_ENV, str(tmp_path / "mine"))
    assert outputs_dir() == tmp_path / "mine"
    assert results_dir() == tmp_path / "mine" / "interactive" / "results"
    report = tmp_path / "mine" / "20990101-000000-x" / "results"
    write_record(StageRecord("02_attention", "PASS", "ok"), directory=report)
    write_record(StageRecord("02_attention", "WARN", "1 case"))
    assert sorted(r.kind for r in list_runs()) == ["interactive", "report"]  # both under HYPORT_OUTPUTS
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "run" / "results"))
    assert results_dir() == tmp_path / "run" / "results"
