"""The N-card inference grid (inference/grid.py): isolation of failing workers, consistency,
no worker outliving its launcher, no secret in what the workers write; the card choice the
grid runs on (devices/) and the process helpers it uses.

Grids of real worker processes are marked slow. The fault cases use the test-only switch
``HYPORT_TEST_FAULT`` (tests/fault_injection); most of them fire before the model is
loaded, so they cost an interpreter start, not a model load.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from hyport_lib.backend import Backend, CpuBackend, get_backend
from hyport_lib.devices.card_plan import available_cards, plan_grid
from hyport_lib.devices.visible_devices import inherited_card_ids
from hyport_lib.inference import stage
from hyport_lib.inference.grid import COLUMNS, FALLBACK_MARKER, consistency, run_grid, scan_fallbacks
from hyport_lib.inference.params import Params
from hyport_lib.models.tiny import ensure_tiny_model
from hyport_lib.utils.scrub_log import scrub_log
from hyport_lib.utils.typed_records import to_mapping
from hyport_lib.processes import last_exception
from fault_injection.hyport_faults import FAULT_ENV, parse_faults

DATA = Path(__file__).parents[1] / "data"
SMALL = dict(max_new_tokens=4)


def _plan(**kw):
    return stage.plan(Params(**{**SMALL, **kw}))


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


@pytest.mark.slow
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


class _FakeCuda(Backend):
    kind = "cuda"
    visible_devices_var = "CUDA_VISIBLE_DEVICES"

    def num_cards(self):
        return 2


@pytest.mark.parametrize("value, expected", [
    ("2,3", [2, 3]), ("2,3,", [2, 3]), (" 1, 0 ", [1, 0]), ("5", [5]),
])
def test_cuda_visible_devices_that_map_to_indices(monkeypatch, value, expected):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert available_cards(_FakeCuda()) == expected


@pytest.mark.parametrize("var, value, says", [
    ("CUDA_VISIBLE_DEVICES", "GPU-1a2b3c4d-0000-1111-2222-333344445555,GPU-99", "UUID"),
    ("CUDA_VISIBLE_DEVICES", "MIG-5f2c", "indices"),
    ("CUDA_VISIBLE_DEVICES", "0-1", "ranges"),
    ("CUDA_VISIBLE_DEVICES", "3,3", "card 3 more than once"),
    ("CUDA_VISIBLE_DEVICES", "0,GPU-1a2b", "UUID"),
    ("CUDA_VISIBLE_DEVICES", "-1", "hides every card"),
    ("CUDA_VISIBLE_DEVICES", "", "hides every card"),
    ("CUDA_VISIBLE_DEVICES", "0,,1", "empty entry"),
    ("CUDA_VISIBLE_DEVICES", "0,one", "'one' is not a card index"),
    ("ASCEND_RT_VISIBLE_DEVICES", "4-5", "ranges"),
    ("ASCEND_RT_VISIBLE_DEVICES", "4,4", "card 4 more than once"),
    ("ASCEND_RT_VISIBLE_DEVICES", "4,\t5", "spaces"),
])
def test_unmappable_visible_devices_name_the_variable(var, value, says):
    with pytest.raises(ValueError) as info:
        inherited_card_ids(var, value)
    message = str(info.value)
    assert f"{var}={value!r}" in message and says in message


def test_scrub_log_rewrites_only_secret_values(tmp_path):
    environ = {"MY_API_TOKEN": "tok-4f9e1c2d", "PLAIN": "harmless-value"}
    log = tmp_path / "card0.log"
    log.write_bytes(b"loading /models/tok-4f9e1c2d/ckpt\nharmless-value \xff\n")
    assert scrub_log(log, environ) is True
    text = log.read_text(encoding="utf-8")
    assert "tok-4f9e1c2d" not in text and "/models/[redacted]/ckpt" in text
    assert "harmless-value" in text
    assert scrub_log(log, environ) is False  # nothing left to scrub: untouched
    assert scrub_log(tmp_path / "missing.log", environ) is False


def test_cli_turns_stop_signals_into_stopped():
    from hyport_lib.utils.signals import Stopped, stop_signals_raise

    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(Stopped) as info:
        with stop_signals_raise():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)  # the handler runs at the next bytecode, long before this ends
    assert info.value.signum == signal.SIGHUP
    assert signal.getsignal(signal.SIGHUP) == before  # restored on the way out


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


# --------------------------------------------------------------------------- real processes
@pytest.mark.slow
def test_busy_cards_are_skipped_and_workers_pinned_on_the_npu_double(
        fake_npu, npu_smi_sample, fault_switches, monkeypatch, tmp_path):
    monkeypatch.setenv("HYPORT_FAKE_NPU_COUNT", "3")
    npu_smi_sample((DATA / "npu_smi" / "910b_24x_classic.txt").read_text())
    # The double cannot run a model: the free cards fail on purpose, before loading.
    def broken_display(progress):
        raise ZeroDivisionError("display broke")

    with pytest.warns(RuntimeWarning, match="on_progress failed"):  # a broken display abandons nothing
        result = run_grid(_plan(device="npu", infer_timeout_s=60, log_dir=str(tmp_path)),
                          extra_env={FAULT_ENV: "0:raise,2:exit"}, on_progress=broken_display)
    assert _status(result) == {0: "failed", 1: "skipped-busy", 2: "failed"}
    busy = _row(result, 1)
    assert "pid 576489" in busy["error"] and pd.isna(busy["log_path"])
    assert not (tmp_path / "card1.log").exists()  # nothing was started on the busy card
    assert "RuntimeError: injected test fault" in _row(result, 0)["error"]
    assert _row(result, 2)["error"].startswith("exit code 3 without result")
    assert "'ASCEND_RT_VISIBLE_DEVICES': '2'" in (tmp_path / "card2.log").read_text()
    assert stage.summarize(result).verdict == "FAIL"


@pytest.fixture(scope="module")
def eight_cards(tmp_path_factory):
    updates = []
    log_dir = tmp_path_factory.mktemp("grid8")
    result = stage.run(_plan(device="cpu", num_cards=8, infer_timeout_s=240, log_dir=str(log_dir)),
                       on_progress=lambda p: updates.append((p.done, p.total, p.card, p.status, p.running,
                                                             dict(p.elapsed_s))))
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
    assert frame["diagnosis"].isna().all() and result.to_dict()["diagnoses"] == {}  # nothing failed
    assert frame["single_output"].str.len().gt(0).all()
    assert all(len(b) == 2 for b in frame["batch_outputs"])
    for card in range(8):
        assert (result.log_dir / f"card{card}.log").is_file()
        raw = json.loads((result.log_dir / f"card{card}.json").read_text())
        assert raw["status"] == "ok" and raw["card"] == card
    # one update at the start, one per card as it finishes (the seconds each running card
    # has run said between), and a last one when everything is done
    finished = [u for u in updates if u[2] is not None]
    assert updates[0][:2] == (0, 8) and [u[0] for u in finished] == list(range(1, 9))
    assert sorted(u[2] for u in finished) == list(range(8))
    assert all(u[4] for u in updates[:-1]) and updates[-1][:1] == (8,) and updates[-1][4] is False
    assert all(set(u[5]) <= set(range(8)) and all(s >= 0 for s in u[5].values()) for u in updates)
    assert updates[-1][5] == {}  # nothing runs any more
    assert stage.summarize(result).verdict == "PASS"
    headline = stage.summarize(result).headline
    assert headline["cards ok"] == "8/8" and headline["consistent"] is True
    assert "All 8 finished cards produced identical outputs" in result.consistency_line
    data = json.loads(json.dumps(result.to_dict(), default=str))
    assert data["counts"]["ok"] == 8 and len(data["rows"]) == 8


@pytest.mark.slow
def test_faults_are_isolated_and_reported(eight_cards, fault_switches, tmp_path):
    ok_wall = eight_cards[0].wall_s
    # Five cards: two healthy ones and one of each fault (fewer workers than the eight
    # above, so their wall time is long enough for the healthy ones, short for a test).
    timeout_s = max(20.0, 1.1 * ok_wall)
    started = time.monotonic()
    result = run_grid(_plan(device="cpu", num_cards=5, infer_timeout_s=timeout_s, log_dir=str(tmp_path)),
                      extra_env={FAULT_ENV: "1:raise,3:signal,4:hang"}, kill_grace_s=1.0)
    elapsed = time.monotonic() - started
    status = _status(result)
    assert status == {0: "ok", 1: "failed", 2: "ok", 3: "failed", 4: "timeout"}, \
        (timeout_s, result.frame[["card", "status", "wall_s", "error"]])
    assert _row(result, 1)["error"].startswith("RuntimeError: injected test fault on card 1")
    assert _row(result, 3)["error"].startswith("killed by signal SIGKILL (-9); ")
    assert "no sign of memory exhaustion (peak RSS " in _row(result, 3)["error"]
    assert _row(result, 4)["error"].startswith(f"timeout after {timeout_s:g}s")
    assert result.consistent and result.differing_cards == []
    assert elapsed < timeout_s + 15, f"grid took {elapsed:.1f}s for timeout {timeout_s:.1f}s"
    # The hung worker's child was in its process group and died with it.
    log4 = (tmp_path / "card4.log").read_text()
    child = int(log4.split("hang: child pid")[1].split()[0])
    # SIGKILL is delivered asynchronously: give the kernel a moment to finish it off.
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and time.monotonic() < deadline:
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    if psutil.pid_exists(child):
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert stage.summarize(result).verdict == "FAIL"
    assert stage.summarize(result).headline["cards ok"] == "2/5"


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
def test_grid_returns_when_every_worker_hangs(fault_switches, tmp_path):
    started = time.monotonic()
    result = run_grid(_plan(device="cpu", num_cards=2, infer_timeout_s=3, log_dir=str(tmp_path)),
                      extra_env={FAULT_ENV: "0:hang,1:hang"}, kill_grace_s=1.0)
    assert _status(result) == {0: "timeout", 1: "timeout"}
    assert time.monotonic() - started < 3 + 1 + 5
    assert consistency(result.frame)[0] is False
    assert "No card finished" in result.consistency_line
    assert "Card 0: " in result.consistency_line  # says why, not only that nothing finished


@pytest.mark.slow
def test_a_grid_stopped_before_its_cards_finished_says_none_finished(tmp_path, monkeypatch):
    """Stop while both cards run (the interrupt arrives in the grid's first progress call),
    then while the second card's worker is being started: the cards are counted finished,
    stopped running and not started, never "2/2 cards finished"."""
    from hyport_lib.inference import grid
    from hyport_lib.inference.show import grid_progress_line

    def stopped_grid(plan, **kw):
        seen = []

        def stop_once(progress):
            seen.append(progress)
            if progress.running and len(seen) == 1:
                raise KeyboardInterrupt  # the Stop button's SIGINT, as the grid's wait gets it

        with pytest.raises(KeyboardInterrupt) as stopped:
            run_grid(plan, on_progress=stop_once, kill_grace_s=1.0, **kw)
        assert seen[-1].stopped and not seen[-1].running
        return stopped.value.partial, seen[-1]

    plan = _plan(device="cpu", num_cards=2, infer_timeout_s=120, log_dir=str(tmp_path / "a"))
    result, last = stopped_grid(plan)
    assert _status(result) == {0: "interrupted", 1: "interrupted"}
    assert grid_progress_line(last) == "0/2 cards finished, 2 stopped (interrupted: the cards that finished are kept)"
    judged = stage.summarize(result)
    assert judged.verdict == "INTERRUPTED"
    assert judged.summary.startswith("Stopped: 0 of 2 cards finished (2 stopped running, 0 not started).")

    launch = grid._launch

    def stopped_at_card_1(group, backend, card, *args):
        if card == 1:
            raise KeyboardInterrupt
        return launch(group, backend, card, *args)

    monkeypatch.setattr(grid, "_launch", stopped_at_card_1)
    result, last = stopped_grid(_plan(device="cpu", num_cards=2, infer_timeout_s=120, log_dir=str(tmp_path / "b")))
    assert _status(result) == {0: "interrupted", 1: "not-started"}
    assert grid_progress_line(last) == ("0/2 cards finished, 1 stopped, 1 not started "
                                        "(interrupted: the cards that finished are kept)")
    assert stage.summarize(result).summary.startswith("Stopped: 0 of 2 cards finished (1 stopped running, "
                                                      "1 not started).")
    assert psutil.Process().children(recursive=True) == []  # no worker left


# --------------------------------------------------------------------------- launcher death
_HANGING_GRID = """
import sys
from hyport_lib.inference import stage
from hyport_lib.inference.params import Params
stage.run(stage.plan(Params(device="cpu", num_cards=2, max_new_tokens=2, infer_timeout_s=600,
                            log_dir=sys.argv[1])))
"""


def _wait_for_hung_workers(parent: subprocess.Popen, log_dir: Path) -> list[psutil.Process]:
    """Once both workers hang: the worker, guard and hang-child processes, from the logs."""
    pids: list[int] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and parent.poll() is None:
        logs = [log_dir / f"card{c}.log" for c in (0, 1)]
        texts = [p.read_text() if p.is_file() else "" for p in logs]
        if all("hang: child pid" in t for t in texts):
            for text in texts:
                pids.append(int(text.split("[hyport worker] card ")[1].split(" pid ")[1].split()[0]))
                pids.append(int(text.split(" guard pid ")[1].split()[0]))
                pids.append(int(text.split("hang: child pid")[1].split()[0]))
            break
        time.sleep(0.2)
    assert len(pids) == 6, f"workers did not reach the hang (rc {parent.poll()})"
    procs = [psutil.Process(pid) for pid in pids]
    # All of them descend from the launcher we started: only those are ever killed here.
    ours = {p.pid for p in psutil.Process(parent.pid).children(recursive=True)}
    assert set(pids) <= ours
    return procs


def _alive(procs: list[psutil.Process]) -> list[int]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def _kill_leftovers(parent: subprocess.Popen, procs: list[psutil.Process]) -> None:
    """Test hygiene after a failure: kill what this test started and is still running."""
    for proc in [*procs, psutil.Process(parent.pid) if parent.poll() is None else None]:
        if proc is None:
            continue
        try:
            if proc.is_running():  # same pid *and* start time: still the process we started
                proc.kill()
        except psutil.NoSuchProcess:
            continue
    parent.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["cli-sigterm", "launcher-sigkill"])
def test_workers_do_not_outlive_the_launcher(fault_switches, tmp_path, how):
    """SIGTERM to `hyport infer` runs the grid's cleanup; even SIGKILL of the launcher
    (no cleanup at all) takes the workers and their children along, via the guard."""
    log_dir = tmp_path / "logs"
    env = {**os.environ, FAULT_ENV: "0:hang,1:hang", "HYPORT_RESULTS_DIR": str(tmp_path / "results")}
    if how == "cli-sigterm":
        cmd = [sys.executable, "-m", "hyport_lib", "infer", "--device", "cpu",
               "--num-cards", "2", "--infer-timeout-s", "600", "--log-dir", str(log_dir), "--no-record"]
        sig, expected_rc = signal.SIGTERM, 130
    else:
        cmd = [sys.executable, "-c", _HANGING_GRID, str(log_dir)]
        sig, expected_rc = signal.SIGKILL, -signal.SIGKILL
    parent = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    procs: list[psutil.Process] = []
    try:
        procs = _wait_for_hung_workers(parent, log_dir)
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=30)
        assert parent.returncode == expected_rc, err[-2000:]
        deadline = time.monotonic() + 5
        while _alive(procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _alive(procs) == [], f"still running after the launcher died: {_alive(procs)}"
    finally:
        _kill_leftovers(parent, procs)


# --------------------------------------------------------------------------- secrets
SECRET_NAME = "HYPORT_GRID_TEST_SECRET_TOKEN"
SECRET = "s3cr3t-9c41d7aa"


def _files_with_secret(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if SECRET.encode() in p.read_bytes()]


@pytest.mark.slow
def test_secret_values_stay_out_of_logs_configs_and_results(tmp_path, monkeypatch):
    # The checkpoint only loads under its real (secret-bearing) path: an ok card proves
    # the worker got the real configuration, not the scrubbed copy on disk.
    model = tmp_path / f"ckpt-{SECRET}"
    model.symlink_to(ensure_tiny_model(), target_is_directory=True)
    prompt = f"Say hello to {SECRET}."
    ok_dir = tmp_path / "ok"
    result = run_grid(_plan(model_path=str(model), single_prompt=prompt, max_new_tokens=2, device="cpu",
                            num_cards=1, infer_timeout_s=120, log_dir=str(ok_dir)),
                      extra_env={SECRET_NAME: SECRET})  # a secret only the workers have
    assert _status(result) == {0: "ok"}, result.frame[["status", "error"]].to_dict()
    assert _files_with_secret(ok_dir) == []
    record = json.loads((ok_dir / "card0.config.json").read_text())
    assert record["inference"]["model_path"].endswith("ckpt-[redacted]")
    assert record["inference"]["single_prompt"] == "Say hello to [redacted]."
    assert SECRET not in json.dumps(result.to_dict(), default=str)
    assert SECRET not in json.dumps(to_mapping([result.outputs, result.diagnoses]), default=str)

    # A load that fails in the worker (the folder passes the preflight, its model type is
    # unknown to transformers): the error quotes the secret-bearing model type; the log and
    # the row show it scrubbed.
    monkeypatch.setenv(SECRET_NAME, SECRET)
    broken = tmp_path / SECRET / "model"
    shutil.copytree(ensure_tiny_model(), broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "model_type": f"arch-{SECRET}"}))
    failed_dir = tmp_path / "failed"
    result = run_grid(_plan(model_path=str(broken), device="cpu", num_cards=1, infer_timeout_s=120,
                            log_dir=str(failed_dir)))
    assert _status(result) == {0: "failed"}
    assert _files_with_secret(failed_dir) == []
    log = (failed_dir / "card0.log").read_text()
    assert "Traceback" in log and "[redacted]" in log
    assert "[redacted]" in _row(result, 0)["error"] and SECRET not in _row(result, 0)["error"]
    # The plan could not size the model either: its note says so, scrubbed too.
    (note,) = [n for n in result.notes if n.startswith("memory:")]
    assert "not planned (the model's size could not be read" in note and "[redacted]" in note
    assert SECRET not in json.dumps(result.to_dict(), default=str)
