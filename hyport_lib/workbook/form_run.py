"""A stage run from the form: in a worker thread, so the kernel keeps serving widget
messages while the stage works (the Stop button's click, the live displays' redraws).

What the worker shows goes into the form's output area as widget state, ipywidgets' way to
write to an ``Output`` from a background thread: its ``display()`` / ``update_display`` /
``clear_output`` through a hook on the kernel's display publisher (ipykernel's hooks are
thread-local: the worker's messages only), its ``print`` through a stream that routes the
worker's text (a context variable says whose). Each ``display_id`` gets a child ``Output``,
so a redrawn progress line does not redraw the plot beside it. A cell run meanwhile is not
touched.

Stop: the form's Stop button (a widget message) and Kernel → Interrupt (a SIGINT handler
held while a form run works) set the run's stop event; the stage's next progress call
raises ``KeyboardInterrupt``, which the stage turns into its partial result. The kernel
says "busy" while the run works (ipykernel says "idle" once the click's handler returned).
"""

from __future__ import annotations

import asyncio
import contextvars
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional

from hyport_lib.workbook.stop import StopButton

#: The output route of the form run the current thread works for (None: not a form run).
_ROUTE: contextvars.ContextVar[Optional["OutputRoute"]] = contextvars.ContextVar("hyport_form_route", default=None)

#: How often a working run says "busy" again (a cell run or a widget message meanwhile
#: ends with the kernel's own "idle").
BUSY_EVERY_S = 1.0

OnProgress = Callable[[Any], None]


class OutputRoute:
    """Display messages and text of a form run, made outputs of ``area`` (an
    ``ipywidgets.Output``)."""

    def __init__(self, area: Any):
        self.area = area
        self.handles: dict[str, list[Any]] = {}  # display_id -> the child Outputs showing it
        self._lock = threading.RLock()
        self._clear_on_next = False

    def append(self, output: dict) -> None:
        with self._lock:
            if self._clear_on_next:
                self.clear()
            self.area.outputs = self.area.outputs + (output,)

    def clear(self, wait: bool = False) -> None:
        with self._lock:
            self._clear_on_next = wait
            if not wait:
                self.area.outputs = ()
                self.handles = {}

    def show(self, obj: Any) -> None:
        """``obj`` (a widget, say) as ``display(obj)`` would show it."""
        from IPython.core.formatters import format_display_data

        data, metadata = format_display_data(obj)
        self.append({"output_type": "display_data", "data": data, "metadata": metadata})

    def message(self, msg: dict) -> Optional[dict]:
        """A display publisher hook: a display message taken as an output (None: not sent)."""
        kind = msg["header"]["msg_type"]
        content = msg["content"]
        if kind == "clear_output":
            self.clear(bool(content.get("wait")))
            return None
        if kind not in ("display_data", "update_display_data"):
            return msg
        output = {"output_type": "display_data", "data": content["data"], "metadata": content.get("metadata", {})}
        display_id = (content.get("transient") or {}).get("display_id")
        with self._lock:
            if kind == "update_display_data":
                for child in self.handles.get(display_id, ()):  # an id never shown: nothing, as Jupyter does
                    child.outputs = (output,)
            elif display_id is None:
                self.append(output)
            else:
                import ipywidgets as widgets

                child = widgets.Output()
                child.outputs = (output,)
                self.handles.setdefault(display_id, []).append(child)
                self.show(child)
        return None

    def write(self, name: str, text: str) -> None:
        """Text of ``name`` (stdout, stderr), joined to the last output when that is the same stream."""
        if not text:
            return
        with self._lock:
            last = self.area.outputs[-1] if self.area.outputs and not self._clear_on_next else None
            if last is not None and last.get("output_type") == "stream" and last.get("name") == name:
                self.area.outputs = self.area.outputs[:-1] + ({**last, "text": last["text"] + text},)
            else:
                self.append({"output_type": "stream", "name": name, "text": text})

    def error(self, exc: BaseException) -> None:
        """``exc`` with its traceback, as a cell shows one."""
        try:
            from IPython import get_ipython

            shell = get_ipython()
            lines = shell.InteractiveTB.structured_traceback(type(exc), exc, exc.__traceback__) if shell else None
        except Exception:  # a traceback that fails to format: the plain one below
            lines = None
        lines = lines or traceback.format_exception(type(exc), exc, exc.__traceback__)
        self.append({"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": lines})


class _RoutedStream:
    """``sys.stdout`` / ``sys.stderr`` while a form run works: a form run's text goes to its
    route, anyone else's to the stream it replaced (whose attributes it lends)."""

    def __init__(self, name: str, original: Any):
        self._name = name
        self._original = original

    def write(self, text: str) -> int:
        route = _ROUTE.get()
        if route is None:
            return self._original.write(text)
        route.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        if _ROUTE.get() is None:
            self._original.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class _Streams:
    """The routed streams, in place while at least one form run works."""

    lock = threading.Lock()
    users = 0

    @classmethod
    def take(cls) -> None:
        with cls.lock:
            cls.users += 1
            for name in ("stdout", "stderr"):
                if not isinstance(getattr(sys, name), _RoutedStream):
                    setattr(sys, name, _RoutedStream(name, getattr(sys, name)))

    @classmethod
    def release(cls) -> None:
        with cls.lock:
            cls.users -= 1
            if cls.users:
                return
            for name in ("stdout", "stderr"):
                stream = getattr(sys, name)
                if isinstance(stream, _RoutedStream):  # someone replaced it since: theirs to restore
                    setattr(sys, name, stream._original)


class _Interrupts:
    """Kernel → Interrupt during form runs: one SIGINT handler, which stops every working
    form run. Set on the kernel's main thread (the only one that gets signals), from its
    event loop after the click's handler returned (ipykernel puts back the handler it saved
    around each message handler), and removed the same way when the last run ended; with no
    run working it does what the handler it replaced did (ipykernel ignores SIGINT between
    messages). A click's handler may run on a subshell's thread: a handler set or an
    interrupt awaited there never sees the signal (why, before, the second form run in a
    kernel could not be stopped)."""

    runs: set["FormRun"] = set()
    previous: Any = signal.SIG_IGN

    @classmethod
    def handle(cls, signum: int, frame: Any) -> None:
        runs = list(cls.runs)
        for run in runs:
            run.stop("Kernel → Interrupt")
        if runs or cls.previous in (signal.SIG_IGN, None):
            return
        if callable(cls.previous):
            cls.previous(signum, frame)
        else:  # SIG_DFL: what Python does by default
            raise KeyboardInterrupt

    @classmethod
    def take(cls, run: "FormRun") -> None:
        if run.done.is_set():
            return
        cls.runs.add(run)
        current = signal.getsignal(signal.SIGINT)
        if current != cls.handle:  # a bound method: equal, not the same object, each time
            cls.previous = current
            signal.signal(signal.SIGINT, cls.handle)

    @classmethod
    def release(cls, run: "FormRun") -> None:
        cls.runs.discard(run)
        # not ours now: a message handler under way saved it, and puts it back when it
        # returns; with no run working, ours then does what the one it replaced did
        if not cls.runs and signal.getsignal(signal.SIGINT) == cls.handle:
            signal.signal(signal.SIGINT, cls.previous)


class _KernelStatus:
    """"busy" / "idle" on the kernel's IOPub channel, as the reply to the click's message
    (what JupyterLab's kernel status follows); nothing outside a kernel."""

    def __init__(self):
        from IPython import get_ipython

        self.kernel = getattr(get_ipython(), "kernel", None)
        self.parent = self.kernel.get_parent("shell") if self.kernel is not None else None
        self.said = 0.0

    def say(self, state: str) -> None:
        if self.kernel is None or self.kernel.session is None:
            return
        self.kernel.session.send(self.kernel.iopub_socket, "status", {"execution_state": state},
                                 parent=self.parent)
        self.said = time.monotonic()

    def tick(self) -> None:
        if time.monotonic() - self.said >= BUSY_EVERY_S:
            self.say("busy")


class FormRun:
    """One run of a form's stage: ``work(watch)`` in a worker thread, its output in ``area``.
    ``watch(on_progress)`` gives the stage's progress callback that takes a stop and keeps
    the kernel busy; ``on_end(run)`` is called in the worker when the work ended (``result``
    or ``error`` set), its output still routed. ``stop_button``, shown first in the area,
    stops the run; it is retired when the run ends, however the stage ended."""

    def __init__(self, area: Any, work: Callable[[Callable[[OnProgress], OnProgress]], Any],
                 on_end: Callable[["FormRun"], None], stoppable: bool = False):
        self.route = OutputRoute(area)
        self.work = work
        self.on_end = on_end
        self.stopping = threading.Event()
        self.stopped_by = ""
        self.done = threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.stop_button = None
        if stoppable:
            self.stop_button = StopButton(on_stop=lambda: self.stop("■ Stop"))
        self._status = _KernelStatus()
        self._on_main_thread: Optional[Callable[..., None]] = None
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                        name="hyport-form-run", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.done.is_set()

    def start(self) -> "FormRun":
        """From the click's handler (the kernel's main thread, or the subshell JupyterLab
        sends widget messages on): returns at once."""
        if self.stop_button is not None:
            self.route.show(self.stop_button)
        _Streams.take()
        self._on_main_thread = _main_thread_scheduler(self._status.kernel)
        if self._on_main_thread is not None:  # after the click's handler returned
            self._on_main_thread(_Interrupts.take, self)
        self._thread.start()
        return self

    def stop(self, how: str) -> None:
        """Asks the stage to stop at its next progress call."""
        if not self.stopping.is_set():
            self.stopped_by = how
            self.stopping.set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether the run ended within ``timeout`` seconds."""
        return self.done.wait(timeout)

    def watch(self, on_progress: Optional[OnProgress]) -> OnProgress:
        """``on_progress`` raising ``KeyboardInterrupt`` once a stop was asked (while the stage
        says it is running: one that says it stopped is let finish), saying "busy" meanwhile."""

        def checked(progress: Any) -> None:
            self._status.tick()
            if self.stopping.is_set() and getattr(progress, "running", True):
                raise KeyboardInterrupt(f"stopped from the notebook ({self.stopped_by})")
            if on_progress is not None:
                on_progress(progress)

        return checked

    def _run(self) -> None:
        _ROUTE.set(self.route)
        publisher = _display_publisher()
        if publisher is not None:
            publisher.register_hook(self.route.message)  # this thread's displays only
        self._status.say("busy")
        try:
            try:
                self.result = self.work(self.watch)
            except BaseException as exc:  # said by on_end: a refusal, a stop, a defect
                self.error = exc
            self.on_end(self)
        except BaseException as exc:  # on_end itself failed: shown, never lost
            self.route.error(exc)
        finally:
            if self.stop_button is not None:
                self.stop_button.retire(self.ending())
            if publisher is not None:
                publisher.unregister_hook(self.route.message)
            _Streams.release()
            if self._on_main_thread is not None:
                self._on_main_thread(_Interrupts.release, self)  # before ``done``: waiters see it
            self._status.say("idle")
            self.done.set()

    def ending(self) -> str:
        """How the run ended, in a few words (beside the retired Stop button)."""
        if self.stopping.is_set():
            return f"stopped ({self.stopped_by})"
        return "finished" if self.error is None else f"ended: {type(self.error).__name__}"


def _main_thread_scheduler(kernel: Any) -> Optional[Callable[..., None]]:
    """A thread-safe way to call a function on the kernel's main thread (signal handlers
    are set there only): its event loop. JupyterLab 4.6 sends widget messages on a kernel
    subshell, whose handlers run in a thread of their own, so the click's thread will not
    do. Outside a kernel, the running event loop of the main thread; else None."""
    io_loop = getattr(kernel, "io_loop", None)
    if io_loop is not None:
        return io_loop.add_callback
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no event loop (a script): no kernel to interrupt
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    return lambda function, *args: None if loop.is_closed() else loop.call_soon_threadsafe(function, *args)


def _display_publisher() -> Any:
    """The kernel's display publisher when it takes hooks (ipykernel's), else None."""
    from IPython import get_ipython

    shell = get_ipython()
    publisher = getattr(shell, "display_pub", None)
    return publisher if hasattr(publisher, "register_hook") else None
