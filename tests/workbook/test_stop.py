"""Stopping a stage from a notebook: the partial result instead of a traceback, the Stop
button raising the same interrupt from the progress callback."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hyport_lib.results import RUN_DIR_ENV
from hyport_lib.workbook.stop import StopButton, StopRequested, run_stoppable


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


def test_the_stop_button_raises_from_the_progress_callback_once_clicked():
    seen = []
    stop = StopButton()
    watched = stop.watch(seen.append)
    watched(SimpleNamespace(running=True, step=1))
    stop.button.click()  # what the browser's click does in the kernel
    assert stop.requested and stop.button.disabled
    with pytest.raises(StopRequested) as raised:
        watched(SimpleNamespace(running=True, step=2))
    assert isinstance(raised.value, KeyboardInterrupt)  # stopped as on Kernel -> Interrupt
    assert [p.step for p in seen] == [1]  # the display is not drawn again after a stop
    watched(SimpleNamespace(running=False, step=2))  # the last call, once stopped, is shown
    assert [p.step for p in seen] == [1, 2]


def test_a_run_that_ends_retires_the_button():
    stop = StopButton()
    stop.watch(None)(SimpleNamespace(running=False))
    assert stop.button.disabled and stop.button.description == "finished" and not stop.requested


def test_outside_a_notebook_cell_the_button_is_not_shown(monkeypatch):
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    stop = StopButton().show()  # no kernel here: nothing to click it, nothing polled
    assert not stop.live
    stop.check()  # reads only the flag
