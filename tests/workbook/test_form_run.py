"""A form run works in a worker thread: what it shows lands in the form's output area as
widget state (displays, their updates, clears, prints), nothing from elsewhere; Stop and
Kernel → Interrupt end it as INTERRUPTED with what finished; one run at a time; the kernel
says busy while it works. ipykernel's own display publisher, on a socket that records."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.display import clear_output, display, update_display
from ipykernel.zmqshell import ZMQDisplayPublisher
from jupyter_client.session import Session

from hyport_lib.display import LiveDisplay
from hyport_lib.params import StageParams, param
from hyport_lib.results import INTERRUPTED, RUN_DIR_ENV, StageSummary
from hyport_lib.workbook import form as form_module
from hyport_lib.workbook.form import running_line, stage_form, stage_runner
from hyport_lib.workbook import form_run as form_run_module
from hyport_lib.workbook.form_run import _Interrupts
from hyport_lib.workbook.output_route import ROUTE

WAIT_S = 60  # a guard against a hang, never a timing under test

CLICK = {"header": {"msg_id": "click-1", "msg_type": "comm_msg", "session": "s", "username": "u",
                    "date": "2026-01-01T00:00:00Z", "version": "5.3"}}


@dataclass
class Demo(StageParams):
    steps: int = param(20, "optimizer steps", min=1)


class RecordingSocket:
    """An IOPub socket: every message sent, decoded."""

    def __init__(self):
        self.sent: list[dict] = []

    def send_multipart(self, parts, *args, **kwargs):
        frames = [bytes(p) for p in parts]
        at = frames.index(b"<IDS|MSG>")
        header, parent, _metadata, content = (json.loads(f) for f in frames[at + 2:at + 6])
        self.sent.append({"type": header["msg_type"], "parent": parent.get("msg_id"), "content": content})

    def types(self) -> list[str]:
        return [m["type"] for m in self.sent]


@pytest.fixture
def kernel(monkeypatch):
    """An IPython shell as a kernel has it: ipykernel's display publisher, and a kernel
    whose session sends status on IOPub (a socket that records)."""
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    shell = InteractiveShell.instance()
    socket, session = RecordingSocket(), Session(key=b"")
    shell.display_pub = ZMQDisplayPublisher(shell=shell, session=session, pub_socket=socket)
    shell.kernel = SimpleNamespace(session=session, iopub_socket=socket, get_parent=lambda channel: CLICK)
    yield socket
    InteractiveShell.clear_instance()


@pytest.fixture
def recorded(monkeypatch):
    results = []
    monkeypatch.setattr(form_module, "record", lambda stage, result, params=None: results.append(result) or "r.json")
    return results


def _stage(steps_before_stop=None, partial=True, gate=None):
    """A stage that steps (a progress call each) until stopped; stopped, what finished on
    ``exc.partial`` (unless ``partial`` is False). ``gate``: an event set at each step."""

    class Stage:
        STAGE = "99_demo"
        plan = staticmethod(lambda params: params.steps)

        @staticmethod
        def run(plan, on_progress=None):
            done = 0
            try:
                while True:
                    on_progress(SimpleNamespace(running=True, done=done))
                    done += 1
                    if gate is not None:
                        gate.set()
                    threading.Event().wait(0.01)
            except KeyboardInterrupt as exc:
                if partial:
                    exc.partial = f"{done} steps"
                raise

        summarize = staticmethod(lambda result: StageSummary(verdict=INTERRUPTED, summary=result))

    return Stage


def _outputs(area) -> list[dict]:
    """The area's outputs, each child Output (a display_id's) replaced by its outputs."""
    from ipywidgets.widgets.widget import _instances

    flat = []
    for output in area.outputs:
        view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
        child = _instances.get(view["model_id"]) if view else None
        flat += list(child.outputs) if child is not None and hasattr(child, "outputs") else [output]
    return flat


def _texts(area) -> list[str]:
    return [o["text"] if o["output_type"] == "stream" else o.get("data", {}).get("text/plain", "")
            for o in _outputs(area)]


def test_what_the_worker_shows_goes_to_the_form_and_nothing_else_does(kernel):
    handles = []

    def run(params):
        display("first")
        line = LiveDisplay(min_interval_s=0)
        line.update("step 1")
        line.update("step 2")
        handles.append(line)
        print("a printed line")
        return StageSummary(verdict="PASS", summary="done")

    form = stage_form(Demo, {}, run)
    display("from the cell")  # the main thread's: sent to the front end as ever
    started = form.submit()
    assert started.wait(WAIT_S)
    assert _texts(form.output) == ["'first'", "'step 2'", "a printed line\n"]
    assert kernel.types().count("display_data") == 1  # the cell's, none of the worker's
    assert not [m for m in kernel.sent if m["type"] in ("update_display_data", "clear_output", "stream")]
    # each display_id has its own child Output: an update redraws that child only
    child_views = [o for o in form.output.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(child_views) == 1
    assert sys.stdout.__class__.__name__ != "_RoutedStream"  # the streams are back once the run ended
    print("after the run")  # reaches the real stdout, not the form
    assert "after the run" not in "".join(_texts(form.output))


def test_a_clear_output_in_the_worker_clears_the_form_area(kernel):
    def run(params):
        display("gone")
        clear_output()
        display("kept")
        clear_output(wait=True)  # cleared when the next output comes
        assert _texts(form.output) == ["'kept'"]
        print("last")
        return StageSummary(verdict="PASS", summary="done")

    form = stage_form(Demo, {}, run)
    assert form.submit().wait(WAIT_S) and form.run.error is None
    assert _texts(form.output) == ["last\n"]


def test_an_update_of_an_id_shown_elsewhere_is_not_the_forms(kernel):
    def run(params):
        update_display("nowhere", display_id="not-shown-here")
        return StageSummary(verdict="PASS", summary="done")

    form = stage_form(Demo, {}, run)
    assert form.submit().wait(WAIT_S)
    assert _texts(form.output) == []


def test_the_stop_button_ends_the_run_with_what_finished_recorded_interrupted(kernel, recorded):
    gate = threading.Event()
    form = stage_form(Demo, {}, stage_runner(_stage(gate=gate), progress=lambda p: None))
    run = form.submit()
    assert run.stop_button is not None and run.stop_button.mode == "message"
    assert "■ Stop or Kernel → Interrupt ends it; what finished is kept" in form.status.value
    assert gate.wait(WAIT_S)
    run.stop_button._clicked(run.stop_button, {"event": "stop"}, [])  # the click's widget message
    assert run.wait(WAIT_S)
    assert recorded and recorded[0].endswith(" steps")
    assert form.status.value.count("INTERRUPTED: ") == 1 and recorded[0] in form.status.value
    assert run.stop_button.state == "done" and "stopped" in run.stop_button.note
    assert not form.button.disabled


def test_a_stage_whose_progress_never_says_finished_still_retires_its_stop_button(kernel, recorded):
    # as 05's scan display: running stays True to the end
    class Stage:
        STAGE = "99_demo"
        plan = staticmethod(lambda params: params)
        run = staticmethod(lambda plan, on_progress=None: on_progress(SimpleNamespace(running=True)) or "all")
        summarize = staticmethod(lambda result: StageSummary(verdict="PASS", summary=result))

    form = stage_form(Demo, {}, stage_runner(Stage, progress=lambda p: None))
    run = form.submit()
    assert run.wait(WAIT_S) and recorded == ["all"]
    assert run.stop_button.state == "done" and run.stop_button.note == "finished"


def test_a_stage_that_keeps_nothing_is_said_interrupted_and_records_nothing(kernel, recorded):
    gate = threading.Event()
    runner = stage_runner(_stage(gate=gate, partial=False), progress=lambda p: None, keeps_partial=False)
    form = stage_form(Demo, {}, runner)
    run = form.submit()
    assert "this stage keeps nothing when stopped" in form.status.value and "what finished" not in form.status.value
    assert gate.wait(WAIT_S)
    run.stop("■ Stop")
    assert run.wait(WAIT_S) and recorded == []
    assert "INTERRUPTED: nothing kept: stage 99 keeps no partial result" in form.status.value
    assert "INTERRUPTED: nothing kept" in "".join(_texts(form.output))


def test_a_stage_without_progress_has_no_stop_and_its_status_says_so(kernel):
    class Stage:
        STAGE = "99_demo"

    assert running_line(stage_runner(Stage)) == "running… (this stage has no Stop: it ends by itself)"
    assert "Stop" in running_line(stage_runner(Stage, progress=lambda p: None))


def test_a_second_run_is_refused_while_one_works(kernel):
    release = threading.Event()
    form = stage_form(Demo, {}, lambda p: release.wait(WAIT_S) and StageSummary(verdict="PASS", summary="done"))
    first = form.submit()
    assert first.running and form.button.disabled
    assert form.submit() is None
    assert "under way" in form.status.value
    release.set()
    assert first.wait(WAIT_S) and first.result.verdict == "PASS"
    second = form.submit()
    assert second is not None and second is not first and second.wait(WAIT_S)


def test_kernel_interrupt_stops_a_form_run_and_the_sigint_handler_is_put_back(kernel, recorded):
    # In a kernel the click's handler runs on the event loop; the handler is taken after
    # it returned (ipykernel puts back the one it saved around each message handler).
    gate = threading.Event()
    form = stage_form(Demo, {}, stage_runner(_stage(gate=gate), progress=lambda p: None))
    before = signal.getsignal(signal.SIGINT)

    async def scenario():
        run = form.submit()
        assert signal.getsignal(signal.SIGINT) is before  # not inside the click's handler
        await asyncio.sleep(0)
        assert signal.getsignal(signal.SIGINT) == _Interrupts.handle
        return await _interrupted_once_working(gate, run)

    def on_a_loop():  # as the kernel's (asyncio.run would put a SIGINT handler of its own)
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(scenario())
        finally:
            loop.close()

    run = on_a_loop()
    assert signal.getsignal(signal.SIGINT) is before
    assert run.stopped_by == "Kernel → Interrupt" and recorded and "INTERRUPTED: " in form.status.value
    # the tenth time as the first
    for _ in range(2):
        gate.clear()
        recorded.clear()
        again = on_a_loop()
        assert again.stopped_by == "Kernel → Interrupt" and len(recorded) == 1
        assert signal.getsignal(signal.SIGINT) is before


def test_a_click_handled_on_a_subshell_thread_still_takes_kernel_interrupt(kernel, recorded):
    # ipykernel 7.4 sends a comm's messages to the subshell that last published on it: the
    # click's handler may run in a thread of its own, and only the main thread gets SIGINT
    from tornado.ioloop import IOLoop

    gate = threading.Event()
    form = stage_form(Demo, {}, stage_runner(_stage(gate=gate), progress=lambda p: None))
    before = signal.getsignal(signal.SIGINT)

    async def scenario():
        InteractiveShell.instance().kernel.io_loop = IOLoop.current()  # the kernel's main loop
        loop = asyncio.get_running_loop()
        run = await loop.run_in_executor(None, form.submit)  # the subshell's thread
        await loop.run_in_executor(None, gate.wait, WAIT_S)
        assert signal.getsignal(signal.SIGINT) == _Interrupts.handle
        signal.raise_signal(signal.SIGINT)
        assert await loop.run_in_executor(None, run.wait, WAIT_S)
        await asyncio.sleep(0)
        return run

    loop = asyncio.new_event_loop()
    try:
        run = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert run.stopped_by == "Kernel → Interrupt" and len(recorded) == 1
    assert signal.getsignal(signal.SIGINT) is before


def test_with_no_form_run_working_the_handler_does_what_the_one_it_replaced_did(monkeypatch):
    monkeypatch.setattr(_Interrupts, "runs", set())
    _Interrupts.previous = signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        _Interrupts.handle(signal.SIGINT, None)
    _Interrupts.previous = signal.SIG_IGN
    _Interrupts.handle(signal.SIGINT, None)  # ignored, as ipykernel does between messages


def test_the_kernel_says_busy_while_a_form_run_works_and_idle_when_it_ended(kernel):
    release = threading.Event()
    form = stage_form(Demo, {}, lambda p: release.wait(WAIT_S) and StageSummary(verdict="PASS", summary="done"))
    run = form.submit()
    release.set()
    assert run.wait(WAIT_S)
    states = [(m["content"]["execution_state"], m["parent"]) for m in kernel.sent if m["type"] == "status"]
    assert states == [("busy", "click-1"), ("idle", "click-1")]  # as the reply to the click


async def _interrupted_once_working(gate, run):
    """Kernel → Interrupt once the stage works (``gate`` set by it); ``run`` once it ended."""
    await asyncio.get_running_loop().run_in_executor(None, gate.wait, WAIT_S)
    signal.raise_signal(signal.SIGINT)  # Kernel → Interrupt
    assert await asyncio.get_running_loop().run_in_executor(None, run.wait, WAIT_S)
    await asyncio.sleep(0)
    return run


def _on_a_loop(scenario):
    """``scenario()`` on an event loop as the kernel's (asyncio.run would put a SIGINT handler of its own)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()


@pytest.fixture
def between_messages():
    """SIGINT ignored, as ipykernel has it between messages; put back after."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_run_started_while_a_cell_awaits_is_stopped_by_kernel_interrupt_after_the_cell(
        kernel, recorded, between_messages):
    # ipykernel 7 serves widget messages while a cell awaits: the run's main-thread callback
    # runs inside the cell's message handler, whose SIGINT handler is put back when it returns
    from ipykernel.kernelbase import Kernel

    ipykernel = InteractiveShell.instance().kernel
    gate = threading.Event()
    form = stage_form(Demo, {}, stage_runner(_stage(gate=gate), progress=lambda p: None))

    async def scenario():
        Kernel.pre_handler_hook(ipykernel)  # a cell starts, and awaits
        run = form.submit()  # the click, served meanwhile
        await asyncio.sleep(0)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # still the cell's
        Kernel.post_handler_hook(ipykernel)  # the cell ended
        assert signal.getsignal(signal.SIGINT) == _Interrupts.handle
        return await _interrupted_once_working(gate, run)

    run = _on_a_loop(scenario)
    assert run.stopped_by == "Kernel → Interrupt" and len(recorded) == 1
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_two_runs_one_started_while_a_cell_awaits_leave_sigint_ignored_between_messages(
        kernel, recorded, between_messages):
    from ipykernel.kernelbase import Kernel

    ipykernel = InteractiveShell.instance().kernel
    gates = [threading.Event(), threading.Event()]
    forms = [stage_form(Demo, {}, stage_runner(_stage(gate=gate), progress=lambda p: None)) for gate in gates]

    async def scenario():
        loop = asyncio.get_running_loop()
        first = forms[0].submit()  # between messages
        await asyncio.sleep(0)
        Kernel.pre_handler_hook(ipykernel)  # a cell awaits
        second = forms[1].submit()
        await asyncio.sleep(0)
        Kernel.post_handler_hook(ipykernel)
        assert signal.getsignal(signal.SIGINT) == _Interrupts.handle
        for gate in gates:
            await loop.run_in_executor(None, gate.wait, WAIT_S)
        signal.raise_signal(signal.SIGINT)  # stops both
        for run in (first, second):
            assert await loop.run_in_executor(None, run.wait, WAIT_S)
        await asyncio.sleep(0)
        return first, second

    runs = _on_a_loop(scenario)
    assert [run.stopped_by for run in runs] == ["Kernel → Interrupt"] * 2 and len(recorded) == 2
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # not the cell's, left behind


def test_busy_is_said_after_the_clicks_handler_and_idle_never_while_a_cell_works(kernel, between_messages):
    from ipykernel.kernelbase import Kernel

    ipykernel = InteractiveShell.instance().kernel
    started, release = threading.Event(), threading.Event()

    def work(params):
        started.set()
        release.wait(WAIT_S)
        return StageSummary(verdict="PASS", summary="done")

    form = stage_form(Demo, {}, work)

    def states():
        return [m["content"]["execution_state"] for m in kernel.sent if m["type"] == "status"]

    async def scenario():
        loop = asyncio.get_running_loop()
        run = form.submit()  # the click's handler: the kernel says "idle" when it returned
        assert started.wait(WAIT_S)
        assert states() == []  # nothing before that "idle"
        await asyncio.sleep(0)
        assert states() == ["busy"]
        Kernel.pre_handler_hook(ipykernel)  # a cell starts, and awaits
        release.set()
        assert await loop.run_in_executor(None, run.wait, WAIT_S)
        await asyncio.sleep(0)
        assert states() == ["busy"]  # no "idle" while the cell works: its own comes at its end
        Kernel.post_handler_hook(ipykernel)

    _on_a_loop(scenario)


def test_kernel_interrupt_makes_the_stop_button_say_stopping(kernel, recorded, between_messages):
    holding, hold = threading.Event(), threading.Event()

    def progress(params):
        def shown(p):
            if p.done == 1:  # the stage is busy within its step 1
                holding.set()
                hold.wait(WAIT_S)
        return shown

    form = stage_form(Demo, {}, stage_runner(_stage(), progress=progress))

    async def scenario():
        loop = asyncio.get_running_loop()
        run = form.submit()
        await asyncio.sleep(0)
        await loop.run_in_executor(None, holding.wait, WAIT_S)
        signal.raise_signal(signal.SIGINT)  # Kernel → Interrupt
        await asyncio.sleep(0)
        assert run.stop_button.state == "stopping"  # before the stage took the stop
        hold.set()
        assert await loop.run_in_executor(None, run.wait, WAIT_S)
        await asyncio.sleep(0)
        return run

    run = _on_a_loop(scenario)
    assert run.stopped_by == "Kernel → Interrupt" and run.stop_button.state == "done"


def test_a_clear_closes_the_outputs_it_drops_and_the_next_run_closes_the_last_ones_widgets(kernel):
    children = []

    def run(params):
        LiveDisplay(min_interval_s=0).update("step 1")  # a display id: a child Output
        display("kept", display_id="cleared")
        children.extend(child for shown in ROUTE.get().handles.values() for child in shown)
        clear_output()
        return StageSummary(verdict="PASS", summary="done")

    assert stage_form(Demo, {}, run).submit().wait(WAIT_S)
    assert len(children) == 2 and all(child.comm is None and child.layout.comm is None for child in children)

    form = stage_form(Demo, {}, stage_runner(_stage(), progress=lambda p: None))
    runs = []
    for _ in range(2):
        run = form.submit()
        run.stop("■ Stop")
        assert run.wait(WAIT_S)
        runs.append(run)
    assert runs[0].stop_button.comm is None and runs[0].stop_button.layout.comm is None  # by the second submit
    assert runs[1].stop_button.comm is not None  # the latest run's stays, shown


def _quiet_stage(work, gate, partial=True):
    """A stage (as 02's port proof, 05's reload) that makes one progress call, then works
    (``work()``) with none; stopped, what finished and the interrupt's type on
    ``exc.partial`` (unless ``partial`` is False)."""

    class Stage:
        STAGE = "99_demo"
        plan = staticmethod(lambda params: params)

        @staticmethod
        def run(plan, on_progress=None):
            on_progress(SimpleNamespace(running=True))
            gate.set()
            try:
                return work()
            except KeyboardInterrupt as exc:
                if partial:
                    exc.partial = f"kept ({type(exc).__name__})"
                raise

        summarize = staticmethod(lambda result: StageSummary(
            verdict=INTERRUPTED if result.startswith("kept") else "PASS", summary=result))

    return Stage


def _forever():
    while True:  # a wait that polls in Python, as ChildGroup.wait does
        threading.Event().wait(0.01)


def test_a_stop_after_the_stages_last_progress_call_is_said_to_have_come_too_late(kernel, recorded, monkeypatch):
    monkeypatch.setattr(form_run_module, "STOP_AT_ONCE_AFTER_S", 3600.0)  # the stage ends first
    gate, release = threading.Event(), threading.Event()
    form = stage_form(Demo, {}, stage_runner(_quiet_stage(lambda: release.wait(WAIT_S) and "all checks done",
                                                          gate), progress=lambda p: None))
    run = form.submit()
    assert gate.wait(WAIT_S)
    run.stop_button._clicked(run.stop_button, {"event": "stop"}, [])
    release.set()
    assert run.wait(WAIT_S) and recorded == ["all checks done"]
    assert not run.stopped
    assert "PASS: all checks done (■ Stop came after the stage&#x27;s last step: it finished)" in form.status.value
    assert run.stop_button.note == "finished: ■ Stop came after its last step"
    assert "stopped" not in run.stop_button.note


def test_a_stop_asked_again_before_the_stage_took_it_is_raised_at_once(kernel, recorded, monkeypatch):
    monkeypatch.setattr(form_run_module, "STOP_AT_ONCE_AFTER_S", 3600.0)  # only the second ask
    gate = threading.Event()
    form = stage_form(Demo, {}, stage_runner(_quiet_stage(_forever, gate), progress=lambda p: None))
    run = form.submit()
    assert gate.wait(WAIT_S)
    run.stop_button._clicked(run.stop_button, {"event": "stop"}, [])
    assert not run.wait(0.2)  # the first ask waits for a progress call the stage never makes
    run.stop("Kernel → Interrupt")  # asked again (the disabled button cannot be): now
    assert run.wait(WAIT_S)
    assert recorded == ["kept (StoppedAtOnce)"] and run.stopped
    assert "INTERRUPTED: kept (StoppedAtOnce)" in form.status.value
    assert run.stop_button.note == "stopped (■ Stop)"


def test_a_stop_the_stage_reaches_no_progress_call_for_is_raised_after_the_grace(kernel, recorded, monkeypatch):
    monkeypatch.setattr(form_run_module, "STOP_AT_ONCE_AFTER_S", 0.05)
    gate = threading.Event()
    runner = stage_runner(_quiet_stage(_forever, gate, partial=False), progress=lambda p: None,
                          keeps_partial=False)
    form = stage_form(Demo, {}, runner)
    run = form.submit()
    assert gate.wait(WAIT_S)
    run.stop_button._clicked(run.stop_button, {"event": "stop"}, [])  # once
    assert run.wait(WAIT_S) and recorded == [] and run.stopped
    assert "INTERRUPTED: nothing kept: stage 99 keeps no partial result" in form.status.value
    assert run.stop_button.note == "stopped (■ Stop)"


@pytest.mark.slow
def test_a_stop_at_once_during_a_child_process_leaves_no_process(kernel, recorded, monkeypatch, tmp_path):
    import os

    import psutil

    from hyport_lib.processes import run_child

    monkeypatch.setattr(form_run_module, "STOP_AT_ONCE_AFTER_S", 0.05)
    log = tmp_path / "child.log"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            "print('grandchild', p.pid, flush=True); time.sleep(600)")
    gate = threading.Event()
    stage = _quiet_stage(lambda: run_child([sys.executable, "-c", code], env={**os.environ}, log_path=log,
                                           poll_interval_s=0.05, kill_grace_s=0.5) and "finished", gate)
    form = stage_form(Demo, {}, stage_runner(stage, progress=lambda p: None))
    run = form.submit()
    assert gate.wait(WAIT_S)
    lines = []
    while not lines:  # the child and its grandchild started (a guard against a hang: WAIT_S)
        text = log.read_text() if log.exists() else ""
        lines = [line for line in text.splitlines() if line.startswith("grandchild")]
        assert not run.wait(0.05)
    grandchild = psutil.Process(int(lines[0].split()[1]))
    children = psutil.Process().children(recursive=True)
    assert grandchild in children
    run.stop_button._clicked(run.stop_button, {"event": "stop"}, [])
    assert run.wait(WAIT_S) and run.stopped and recorded == ["kept (StoppedAtOnce)"]
    left = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []
