"""Stopping a stage from the notebook: the Stop button and Kernel → Interrupt end a run the
same way a Ctrl-C ends ``hyport train``, and the notebook shows and records what finished.

Under a cell, the Stop button interrupts its own kernel from the browser (the Jupyter
server's ``POST /api/kernels/<id>/interrupt``, what Kernel → Interrupt sends): a widget
click the kernel would have to answer cannot work there, the kernel reads widget messages
only between cells, and ipykernel 7 holds them while a cell runs. Under the form (the stage
runs in a worker thread, :mod:`hyport_lib.workbook.form_run`) the kernel is free, so the
click is a widget message (``mode="message"``) that the form run answers.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import anywidget
import traitlets

from hyport_lib.results import RUN_DIR_ENV

R = TypeVar("R")

#: The button's code in the browser: one click, one stop of the run that drew it: an
#: interrupt of the kernel (a cell's run), or a message to it (a form's run).
_STOP_ESM = """
function config() {
  const el = document.getElementById("jupyter-config-data");
  try { return el ? JSON.parse(el.textContent) : {}; } catch (e) { return {}; }
}
async function interrupt(kernel, note) {
  const cfg = config();
  const base = (cfg.baseUrl || "/").replace(/\\/?$/, "/");
  const headers = {};
  if (cfg.token) headers["Authorization"] = "token " + cfg.token;
  const xsrf = document.cookie.match(/(?:^|;\\s*)_xsrf=([^;]+)/);
  if (xsrf) headers["X-XSRFToken"] = decodeURIComponent(xsrf[1]);
  try {
    const reply = await fetch(base + "api/kernels/" + kernel + "/interrupt",
                              { method: "POST", headers, credentials: "same-origin" });
    if (!reply.ok) note.textContent = "the server refused the interrupt (" + reply.status + "): use Kernel → Interrupt";
  } catch (e) {
    note.textContent = "could not reach the server: use Kernel → Interrupt";
  }
}
export default {
  render({ model, el }) {
    const button = document.createElement("button");
    button.className = "hyport-stop jupyter-button mod-danger";
    const note = document.createElement("span");
    note.className = "hyport-stop-note";
    note.style.marginLeft = "0.8em";
    // "stopping" stays in the page: under a cell the kernel hears of the click as an interrupt only
    let clicked = false;
    const draw = () => {
      const state = model.get("state");
      const done = state === "done";
      button.textContent = (clicked || state === "stopping") && !done ? "stopping…" : "■ Stop";
      button.disabled = clicked || done || state === "stopping";
      button.title = done ? "the run has ended" : "stop the run; what finished is kept";
      note.textContent = model.get("note");
    };
    button.addEventListener("click", async () => {
      if (clicked || model.get("state") !== "ready") return;
      if (model.get("mode") === "message") {
        clicked = true;
        draw();
        model.send({ event: "stop" });
        return;
      }
      const kernel = model.get("kernel_id");
      if (!kernel) return;
      clicked = true;
      draw();
      await interrupt(kernel, note);
    });
    model.on("change:state", draw);
    model.on("change:note", draw);
    draw();
    el.appendChild(button);
    el.appendChild(note);
  },
};
"""

#: A retired button looks it: greyed, no hover shadow, a "not allowed" pointer
#: (JupyterLab's button styles give a disabled ``mod-danger`` button its hover and colour).
_STOP_CSS = """
.hyport-stop:disabled, .hyport-stop:disabled:hover {
  opacity: 0.45; filter: grayscale(100%); box-shadow: none; cursor: not-allowed;
}
"""


def run_stoppable(run: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``run(*args, **kwargs)``; stopped, the partial result the stage left on the exception
    (``exc.partial``), with no traceback. An interrupt that left none (it came before the
    stage started anything), or one under ``hyport report``, goes on.

    Given an ``on_progress``, the interrupt is taken at the stage's next progress call (every
    second or so): raised anywhere else, it could land in code that swallows it (a display
    being drawn) and the run would go on (the later interrupts: :func:`_deferring_interrupts`).
    """
    interactive = not os.environ.get(RUN_DIR_ENV)
    deferred = interactive and kwargs.get("on_progress") is not None \
        and threading.current_thread() is threading.main_thread()
    if deferred:
        kwargs["on_progress"], previous = _deferring_interrupts(kwargs["on_progress"])
    try:
        return run(*args, **kwargs)
    except KeyboardInterrupt as exc:
        partial = getattr(exc, "partial", None)
        if partial is None or not interactive:
            raise
        return partial
    finally:
        if deferred:
            signal.signal(signal.SIGINT, previous)


def _deferring_interrupts(on_progress: Callable[[Any], None]):
    """``on_progress`` raising the interrupt a SIGINT noted, and the SIGINT handler it replaces."""
    asked, raised = [], []

    def stop(message: str) -> None:
        raised.append(time.monotonic())
        raise KeyboardInterrupt(message)

    def note(signum, frame):
        if raised:  # stopping already: a fresh interrupt would lose what finished
            return
        if asked:  # asked twice before the stage polled: now, wherever the run is
            stop("stopped at once from the notebook")
        asked.append(time.monotonic())

    def checked(progress: Any) -> None:
        running = getattr(progress, "running", True)
        # A stage that stops says so (running False); one still running after the raise
        # had the interrupt swallowed somewhere: raised again here, or it could never stop.
        if running and (raised or asked):
            stop("stopped from the notebook")
        on_progress(progress)

    return checked, signal.signal(signal.SIGINT, note)


class StoppedAtOnce(KeyboardInterrupt):
    """A stop raised in a form run's worker thread wherever it is (:func:`raise_in_thread`):
    the stage reached no progress call to take it at."""


def raise_in_thread(thread_id: int, exc_type: Optional[type] = StoppedAtOnce) -> bool:
    """``exc_type`` raised in the thread ``thread_id`` at its next bytecode (CPython's
    ``PyThreadState_SetAsyncExc``: a wait that polls in Python, as the child-process waits of
    :mod:`hyport_lib.processes` do, is left within a poll; a long call into C only when it
    returns). None: a pending one is dropped. Whether the thread was found."""
    found = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exc_type is None else ctypes.py_object(exc_type))
    return found == 1


def kernel_id() -> str:
    """This kernel's id, from its connection file's name (``kernel-<id>.json``); empty outside a kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:  # not in a kernel (a script, a test): nothing to interrupt
        return ""
    match = re.fullmatch(r"kernel-([0-9A-Za-z-]+)\.json", name)
    return match.group(1) if match else ""


class StopButton(anywidget.AnyWidget):
    """Under a cell (``mode="interrupt"``) a click interrupts this kernel, which
    :func:`run_stoppable` turns into the stage's partial result; under a form
    (``mode="message"``) it calls the ``on_stop`` given."""

    _esm = _STOP_ESM
    _css = _STOP_CSS
    kernel_id = traitlets.Unicode("").tag(sync=True)
    mode = traitlets.Enum(("interrupt", "message"), "interrupt").tag(sync=True)
    state = traitlets.Unicode("ready").tag(sync=True)  # ready | stopping | done (the run ended)
    note = traitlets.Unicode("").tag(sync=True)

    def __init__(self, on_stop: Optional[Callable[[], None]] = None, **kwargs: Any):
        super().__init__(kernel_id=kernel_id(), mode="message" if on_stop else "interrupt", **kwargs)
        self._on_stop = on_stop
        self._state_lock = threading.Lock()  # "stopping" (main thread) never overwrites "done" (the run's)
        if on_stop is not None:
            self.on_msg(self._clicked)

    def _clicked(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("event") == "stop" and self.mark_stopping():
            self._on_stop()

    def mark_stopping(self) -> bool:
        """The button says "stopping…" (a stop was asked, by a click or Kernel → Interrupt);
        False when it was not ready (stopping already, or retired)."""
        with self._state_lock:
            if self.state != "ready":
                return False
            self.state = "stopping"
            return True

    def show(self) -> "StopButton":
        """Displayed, except under ``hyport report`` (headless: nothing can click it)."""
        if not os.environ.get(RUN_DIR_ENV):
            from IPython.display import display

            display(self)
        return self

    def retire(self, note: str) -> None:
        """The run ended: the button is disabled (and looks it), ``note`` beside it."""
        with self._state_lock:
            self.state = "done"
            self.note = note

    def watch(self, on_progress: Optional[Callable[[Any], None]]) -> Callable[[Any], None]:
        """``on_progress`` that also retires the button once the run ended, saying how."""

        def watched(progress: Any) -> None:
            if not getattr(progress, "running", True):
                self.retire("stopped: what finished is kept" if getattr(progress, "stopped", False)
                            else "finished")
            if on_progress is not None:
                on_progress(progress)

        return watched
