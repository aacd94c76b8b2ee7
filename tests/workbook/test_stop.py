"""Stopping a stage from a notebook: the partial result instead of a traceback; the Stop
button interrupts its own kernel from the browser and is retired when the run ends."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from hyport_lib.results import RUN_DIR_ENV
from hyport_lib.workbook import stop as stop_module
from hyport_lib.workbook.stop import StopButton, run_stoppable


def _stopped_with(partial):
    def run(*args, **kwargs):
        exc = KeyboardInterrupt()
        if partial is not None:
            exc.partial = partial
        raise exc

    return run


def test_a_stopped_stage_gives_its_partial_result(monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    assert run_stoppable(_stopped_with("3 of 20 steps"), "plan", on_progress=None) == "3 of 20 steps"
    assert run_stoppable(lambda plan, k: (plan, k), "plan", k=1) == ("plan", 1)


def test_a_stop_with_nothing_finished_goes_on(monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    with pytest.raises(KeyboardInterrupt):
        run_stoppable(_stopped_with(None))


def test_under_the_report_the_stop_is_the_reports(monkeypatch, tmp_path):
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        run_stoppable(_stopped_with("partial"))


def test_the_button_names_the_kernel_the_server_knows(monkeypatch):
    monkeypatch.setattr("ipykernel.connect.get_connection_file",
                        lambda: "/run/jupyter/kernel-3f2a9c1e-77b0-4c4e-9a53-0d2b1c9e8f10.json")
    assert stop_module.kernel_id() == "3f2a9c1e-77b0-4c4e-9a53-0d2b1c9e8f10"
    assert StopButton().kernel_id == "3f2a9c1e-77b0-4c4e-9a53-0d2b1c9e8f10"
    monkeypatch.setattr("ipykernel.connect.get_connection_file", lambda: "/tmp/odd-name.json")
    assert stop_module.kernel_id() == ""  # nothing the button could interrupt


def test_the_esm_interrupts_through_the_servers_api():
    esm = StopButton._esm
    assert 'api/kernels/" + kernel + "/interrupt' in esm and 'method: "POST"' in esm
    assert "X-XSRFToken" in esm and "jupyter-config-data" in esm


def test_the_button_is_retired_when_the_run_ends_and_says_how():
    seen = []
    stop = StopButton()
    watched = stop.watch(seen.append)
    watched(SimpleNamespace(running=True, step=1))
    assert stop.state == "ready" and stop.note == ""
    watched(SimpleNamespace(running=False, stopped=True, step=2))
    assert stop.state == "done" and stop.note.startswith("stopped")
    assert [p.step for p in seen] == [1, 2]  # the display hears every call
    other = StopButton()
    other.watch(None)(SimpleNamespace(running=False, stopped=False))
    assert other.state == "done" and other.note == "finished"


def test_under_the_report_the_button_is_not_shown(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    StopButton().show()
    assert capsys.readouterr().out == ""


def test_an_interrupt_is_taken_at_the_stages_next_progress_call(monkeypatch):
    # A SIGINT (the Stop button, Kernel -> Interrupt) is noted, and raised where the stage
    # polls: never inside whatever the run was doing when it came.
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    before, seen, steps = signal.getsignal(signal.SIGINT), [], []

    def run(on_progress):
        on_progress(SimpleNamespace(running=True, step=1))
        signal.raise_signal(signal.SIGINT)
        steps.append("went on after the signal")
        try:
            on_progress(SimpleNamespace(running=True, step=2))
        except KeyboardInterrupt as exc:
            exc.partial = "1 step"
            on_progress(SimpleNamespace(running=False, step=1))  # the stage says how it ended
            raise
        return "ran to the end"

    assert run_stoppable(run, on_progress=seen.append) == "1 step"
    assert steps == ["went on after the signal"] and [p.step for p in seen] == [1, 1]
    assert signal.getsignal(signal.SIGINT) is before  # the kernel's own handler is back


def test_a_second_interrupt_stops_at_once(monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    steps = []

    def run(on_progress):
        signal.raise_signal(signal.SIGINT)
        steps.append("noted")
        try:
            signal.raise_signal(signal.SIGINT)
            steps.append("never")
        except KeyboardInterrupt as exc:
            exc.partial = "stopped at once"
            raise

    assert run_stoppable(run, on_progress=lambda p: None) == "stopped at once" and steps == ["noted"]


def test_interrupts_while_the_stage_stops_keep_what_finished(monkeypatch):
    # Kernel -> Interrupt pressed again while the stage stops its workers (up to their grace):
    # a fresh interrupt there would lose the partial result and show a traceback.
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    before, steps = signal.getsignal(signal.SIGINT), []

    def run(on_progress):
        try:
            signal.raise_signal(signal.SIGINT)
            on_progress(SimpleNamespace(running=True, step=1))
        except KeyboardInterrupt as exc:
            exc.partial = "1 step"
            signal.raise_signal(signal.SIGINT)  # pressed again while the workers stop
            signal.raise_signal(signal.SIGINT)
            steps.append("workers stopped")
            raise

    assert run_stoppable(run, on_progress=lambda p: None) == "1 step" and steps == ["workers stopped"]
    assert signal.getsignal(signal.SIGINT) is before


def test_after_a_second_interrupt_stopped_at_once_a_third_changes_nothing(monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    steps = []

    def run(on_progress):
        signal.raise_signal(signal.SIGINT)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt as exc:
            exc.partial = "stopped at once"
            signal.raise_signal(signal.SIGINT)
            steps.append("workers stopped")
            raise

    assert run_stoppable(run, on_progress=lambda p: None) == "stopped at once" and steps == ["workers stopped"]


def test_an_interrupt_swallowed_by_the_stage_is_raised_again_at_its_next_progress_call(monkeypatch):
    # The stop landed in code that swallows it (a display being drawn): the stage reports it
    # is still running, so it gets the stop again there; it could never be stopped otherwise.
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    steps = []

    def run(on_progress):
        signal.raise_signal(signal.SIGINT)
        try:
            signal.raise_signal(signal.SIGINT)  # "stop at once", swallowed
        except KeyboardInterrupt:
            steps.append("swallowed")
        for step in range(3):
            try:
                on_progress(SimpleNamespace(running=True, step=step))
            except KeyboardInterrupt as exc:
                exc.partial = f"stopped at step {step}"
                raise
            steps.append(step)
        return "ran to the end"

    assert run_stoppable(run, on_progress=lambda p: None) == "stopped at step 0" and steps == ["swallowed"]
