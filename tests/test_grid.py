"""The N-card inference grid: preflight, isolation of failing workers, consistency, CLI.

Grids of real worker processes are marked slow. The fault cases use the worker's
test-only switch ``HYPORT_TEST_FAULT``; most of them fire before the model is loaded,
so they cost an interpreter start, not a model load.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from hyport_lib.backend import CpuBackend, get_backend
from hyport_lib.inference import grid as grid_mod
from hyport_lib.inference.grid import (
    COLUMNS,
    FALLBACK_MARKER,
    available_cards,
    consistency,
    last_exception,
    plan_grid,
    run_grid,
    scan_fallbacks,
)
from hyport_lib.inference.worker import FAULT_ENV, parse_faults

DATA = Path(__file__).parent / "data"
SMALL = dict(max_new_tokens=4)


def _config(**kw):
    from hyport_lib.inference.generate import InferenceConfig

    return InferenceConfig(**{**SMALL, **kw})


def _status(result) -> dict[int, str]:
    return dict(zip(result.frame["card"], result.frame["status"]))


def _row(result, card: int) -> dict:
    return result.frame[result.frame["card"] == card].iloc[0].to_dict()


# --------------------------------------------------------------------------- fast units
def test_parse_faults_accepts_modes_and_rejects_typos():
    assert parse_faults("1:raise, 3:signal,5:HANG,6:exit") == {1: "raise", 3: "signal", 5: "hang", 6: "exit"}
    assert parse_faults("") == {}
    with pytest.raises(ValueError, match=FAULT_ENV):
        parse_faults("1:explode")
    with pytest.raises(ValueError, match="x:raise"):
        parse_faults("x:raise")


def test_plan_skips_busy_cards_unless_allowed():
    busy = {1: [{"pid": 4242, "name": "python", "memory_mb": 60703}]}
    plan = plan_grid(CpuBackend(), num_cards=3, busy=busy)
    assert plan.to_run == [0, 2]
    assert "pid 4242" in plan.cards[1].busy_reason and "60703 MB" in plan.cards[1].busy_reason
    assert plan_grid(CpuBackend(), num_cards=3, busy=busy, allow_busy_cards=True).to_run == [0, 1, 2]


def test_plan_reads_busy_cards_from_npu_smi(fake_npu, npu_smi_sample, monkeypatch):
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "3")
    npu_smi_sample((DATA / "npu_smi" / "910b_24x_classic.txt").read_text())
    backend = get_backend("npu")
    plan = plan_grid(backend)
    assert [c.card for c in plan.cards] == [0, 1, 2]
    assert plan.to_run == [0, 2]
    assert plan.cards[1].busy_processes[0]["pid"] == 576489
    assert plan.preflight_error is None
    assert plan_grid(backend, allow_busy_cards=True).to_run == [0, 1, 2]


def test_available_cards_follow_inherited_visible_devices(fake_npu, monkeypatch):
    backend = get_backend("npu")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "2")  # what the runtime shows under that variable
    assert available_cards(backend) == [4, 5]
    assert available_cards(backend, 1) == [4]
    with pytest.raises(ValueError, match="num_cards=3"):
        available_cards(backend, 3)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4, 5")
    with pytest.raises(ValueError, match="ASCEND_RT_VISIBLE_DEVICES"):
        available_cards(backend)
    with pytest.raises(ValueError, match="num_cards=0"):
        available_cards(CpuBackend(), 0)


def _frame(rows):
    return pd.DataFrame([{**{c: None for c in COLUMNS}, **r} for r in rows], columns=COLUMNS)


def test_consistency_names_the_cards_that_differ():
    frame = _frame([
        {"card": 0, "status": "ok", "output_hash": "aaa"},
        {"card": 1, "status": "ok", "output_hash": "bbb"},
        {"card": 2, "status": "ok", "output_hash": "aaa"},
        {"card": 3, "status": "failed", "output_hash": None},
    ])
    assert consistency(frame) == (False, [1], "aaa")
    frame.loc[1, "output_hash"] = "aaa"
    assert consistency(frame) == (True, [], "aaa")
    assert consistency(_frame([{"card": 0, "status": "timeout"}]))[0] is False


def test_scan_fallbacks_counts_warnings_and_names_ops(tmp_path):
    log = tmp_path / "card0.log"
    warning = ("[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator '{op}' is not "
               "currently supported on the NPU backend and " + FALLBACK_MARKER + ". This may have "
               "performance implications.")
    log.write_text("\n".join([warning.format(op="aten::isin.Tensor_Tensor_out"), "noise",
                              warning.format(op="aten::_unique2"),
                              warning.format(op="aten::isin.Tensor_Tensor_out")]))
    count, ops = scan_fallbacks(log)
    assert count == 3
    assert ops == ["aten::_unique2", "aten::isin.Tensor_Tensor_out"]
    assert scan_fallbacks(tmp_path / "missing.log") == (0, [])


def test_last_exception_finds_the_traceback_line():
    text = "Traceback (most recent call last):\n  File x\nRuntimeError: NPU out of memory\nbye"
    assert last_exception(text) == "RuntimeError: NPU out of memory"
    assert last_exception("all fine\n") is None


def test_cli_batch_prompts_keep_order_and_image_flags():
    from hyport_lib.commands import build_parser
    from hyport_lib.commands.infer import _config

    args = build_parser().parse_args(["infer", "--batch-prompt", "a", "--batch-image-prompt", "b",
                                      "--batch-prompt", "c", "--max-new-tokens", "3"])
    config = _config(args)
    assert config.batch_prompts == (("a", False), ("b", True), ("c", False))
    assert config.max_new_tokens == 3 and config.model_path == "tiny"


def test_bad_timeout_is_refused():
    with pytest.raises(ValueError, match="timeout_s"):
        run_grid(device="cpu", timeout_s=0)


# --------------------------------------------------------------------------- real processes
@pytest.mark.slow
def test_busy_cards_are_skipped_and_workers_pinned_on_the_npu_double(
        fake_npu, npu_smi_sample, monkeypatch, tmp_path):
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "3")
    npu_smi_sample((DATA / "npu_smi" / "910b_24x_classic.txt").read_text())
    # The double cannot run a model: the free cards fail on purpose, before loading.
    def broken_display(progress):
        raise ZeroDivisionError("display broke")

    with pytest.warns(RuntimeWarning, match="on_update failed"):  # a broken display abandons nothing
        result = run_grid(_config(), device="npu", timeout_s=60, log_dir=tmp_path,
                          extra_env={FAULT_ENV: "0:raise,2:exit"}, on_update=broken_display)
    assert _status(result) == {0: "failed", 1: "skipped-busy", 2: "failed"}
    busy = _row(result, 1)
    assert "pid 576489" in busy["error"] and pd.isna(busy["log_path"])
    assert not (tmp_path / "card1.log").exists()  # nothing was started on the busy card
    assert "RuntimeError: injected test fault" in _row(result, 0)["error"]
    assert _row(result, 2)["error"].startswith("exit code 3 without result")
    assert "'ASCEND_RT_VISIBLE_DEVICES': '2'" in (tmp_path / "card2.log").read_text()
    assert grid_mod.grid_verdict(result) == "FAIL"


@pytest.fixture(scope="module")
def eight_cards(tmp_path_factory):
    updates = []
    log_dir = tmp_path_factory.mktemp("grid8")
    result = run_grid(_config(), device="cpu", num_cards=8, timeout_s=240, log_dir=log_dir,
                      on_update=lambda p: updates.append((p.done, p.total, p.card, p.status)))
    return result, updates


@pytest.mark.slow
def test_eight_cpu_workers_agree(eight_cards):
    result, updates = eight_cards
    frame = result.frame
    assert list(frame["card"]) == list(range(8))
    assert (frame["status"] == "ok").all(), frame[["card", "status", "error"]]
    assert frame["output_hash"].nunique() == 1 and result.consistent and result.differing_cards == []
    assert (frame["tokens_per_s"] > 0).all() and (frame["load_s"] > 0).all()
    assert (frame["peak_memory_mb"] > 50).all() and set(frame["memory_source"]) == {"process-rss"}
    assert (frame["cpu_fallback_warnings"] == 0).all()
    assert frame["single_output"].str.len().gt(0).all()
    assert all(len(b) == 2 for b in frame["batch_outputs"])
    for card in range(8):
        assert (result.log_dir / f"card{card}.log").is_file()
        raw = json.loads((result.log_dir / f"card{card}.json").read_text())
        assert raw["status"] == "ok" and raw["card"] == card
    # one update at the start, then one per card, ending with everything done
    assert updates[0][:2] == (0, 8) and [u[0] for u in updates] == list(range(9))
    assert sorted(u[2] for u in updates[1:]) == list(range(8))
    assert grid_mod.grid_verdict(result) == "PASS"
    headline = grid_mod.grid_headline(result)
    assert headline["cards ok"] == "8/8" and headline["consistent"] is True
    assert "All 8 finished cards produced identical outputs" in result.consistency_line
    data = json.loads(json.dumps(result.to_dict(), default=str))
    assert data["counts"]["ok"] == 8 and len(data["rows"]) == 8


@pytest.mark.slow
def test_faults_are_isolated_and_reported(eight_cards, tmp_path):
    ok_wall = eight_cards[0].wall_s
    # Long enough for five healthy workers (fewer than the eight above), short for a test.
    timeout_s = max(20.0, 1.1 * ok_wall)
    started = time.monotonic()
    result = run_grid(_config(), device="cpu", num_cards=8, timeout_s=timeout_s, log_dir=tmp_path,
                      extra_env={FAULT_ENV: "1:raise,3:signal,6:hang"}, kill_grace_s=1.0)
    elapsed = time.monotonic() - started
    status = _status(result)
    assert status == {0: "ok", 1: "failed", 2: "ok", 3: "failed", 4: "ok", 5: "ok",
                      6: "timeout", 7: "ok"}, (timeout_s, result.frame[["card", "status", "wall_s", "error"]])
    assert _row(result, 1)["error"].startswith("RuntimeError: injected test fault on card 1")
    assert _row(result, 3)["error"].startswith("killed by signal SIGKILL (-9)")
    assert _row(result, 6)["error"].startswith(f"timeout after {timeout_s:g}s")
    assert result.consistent and result.differing_cards == []
    assert elapsed < timeout_s + 15, f"grid took {elapsed:.1f}s for timeout {timeout_s:.1f}s"
    # The hung worker's child was in its process group and died with it.
    log6 = (tmp_path / "card6.log").read_text()
    child = int(log6.split("hang: child pid")[1].split()[0])
    if psutil.pid_exists(child):
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert grid_mod.grid_verdict(result) == "FAIL"
    assert grid_mod.grid_headline(result)["cards ok"] == "5/8"


@pytest.mark.slow
def test_show_renders_table_log_tails_and_picker(eight_cards):
    from hyport_lib.inference import show

    result, _ = eight_cards
    compact = show.compact_frame(result.frame)
    assert set(compact["same_output"]) == {"yes"}
    assert compact["output_hash"].str.len().eq(12).all()
    html = show.grid_styler(result.frame).to_html()
    assert "#c8e6c9" in html  # ok cells coloured
    tails = show.log_tails_html(result, lines=5)
    assert tails.count("<h4>card") == 8 and "[hyport worker] card 7" in tails
    picker = show.card_log_picker(result)
    dropdown = picker.children[0]
    assert len(dropdown.options) == 8
    dropdown.value = 5  # picking a card renders its tail in the Output
    assert "card 5" in picker.children[1].outputs[-1]["text"]


@pytest.mark.slow
def test_cli_reports_failures_with_nonzero_exit(monkeypatch, tmp_path, capsys):
    from hyport_lib.commands import main

    monkeypatch.setenv("HYPORT_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv(FAULT_ENV, "0:exit,1:raise")
    code = main(["infer", "--device", "cpu", "--num-cards", "2", "--max-new-tokens", "2",
                 "--timeout-s", "60", "--log-dir", str(tmp_path / "logs")])
    captured = capsys.readouterr()
    assert code == 1
    assert "exit code 3 without result" in captured.out and "RuntimeError" in captured.out
    assert "No card finished" in captured.out
    assert "cards" in captured.err  # the progress bar
    recorded = json.loads((tmp_path / "results" / "03_inference.json").read_text())
    assert recorded["verdict"] == "FAIL" and recorded["headline"]["cards ok"] == "0/2"
    assert recorded["provenance"]["device"] == "cpu"
    assert os.path.isfile(tmp_path / "logs" / "card0.log")


@pytest.mark.slow
def test_grid_returns_when_every_worker_hangs(tmp_path):
    started = time.monotonic()
    result = run_grid(_config(), device="cpu", num_cards=2, timeout_s=3, log_dir=tmp_path,
                      extra_env={FAULT_ENV: "0:hang,1:hang"}, kill_grace_s=1.0)
    assert _status(result) == {0: "timeout", 1: "timeout"}
    assert time.monotonic() - started < 3 + 1 + 5
    assert consistency(result.frame)[0] is False
    assert "No card finished" in result.consistency_line
