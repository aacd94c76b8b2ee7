"""A stage run from the form: in a worker thread, so the kernel keeps serving widget
messages while the stage works (the Stop button's click, the live displays' redraws).

What the worker shows goes into the form's output area as widget state
(:mod:`hyport_lib.workbook.output_route`); a cell run meanwhile is not touched.

Stop: the form's Stop button (a widget message) and Kernel → Interrupt (a SIGINT handler
held between messages while a form run works) set the run's stop event; the stage's next
progress call raises ``KeyboardInterrupt``, which the stage turns into its partial result.
A stage that reaches no progress call within :data:`STOP_AT_ONCE_AFTER_S` of the stop (02's
port proof, 05's reload: a child process working), or a stop asked again before it did,
gets the interrupt raised in the worker thread at once (:class:`StoppedAtOnce`), as a
second interrupt does to a cell run; the child-process waits poll in Python, so they are
left within a poll and their ``with`` blocks stop the children.
The kernel says "busy" while the run works: first after ipykernel's "idle" for the click,
again at most each second (a cell or a widget message meanwhile ends with the kernel's own
"idle"), and "idle" at the end unless a cell is under way (its own "idle" follows).

Only the worker thread's output is routed: a thread the stage starts itself does not
inherit the route (Python 3.11 threads start with an empty context), and what it prints or
displays goes where a cell's would. No shipped stage shows anything from a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import threading
import time
from typing import Any, Callable, Optional

from hyport_lib.results import INTERRUPTED
from hyport_lib.workbook.output_route import ROUTE, OutputRoute, RoutedStreams, close_widget, display_publisher
from hyport_lib.workbook.stop import StopButton, StoppedAtOnce, raise_in_thread

#: How long a stop waits for the stage's next progress call (the clean place to take it:
#: the stage's own progress comes each second or so) before it is raised wherever the
#: stage is: long enough for a stage that is between two progress calls, short enough
#: that a Stop during a child process of minutes (02's port proof, 05's reload) is not a
#: "stopping…" of minutes. The button is disabled once clicked, so the grace, not a second
#: click, is what a form user can count on; a second Kernel → Interrupt skips it.
STOP_AT_ONCE_AFTER_S = 5.0

#: How often a working run says "busy" again (a cell run or a widget message meanwhile
#: ends with the kernel's own "idle").
BUSY_EVERY_S = 1.0

OnProgress = Callable[[Any], None]


def _in_message_handler(kernel: Any) -> bool:
    """Whether the kernel's main thread is inside a message handler (a cell that awaits,
    say): ipykernel sets a SIGINT handler of its own around each handler, keeping the one
    it replaced in ``saved_sigint_handler`` to put back after; between messages the two are
    the same (:meth:`_Interrupts.set_between` keeps them so)."""
    saved = getattr(kernel, "saved_sigint_handler", None)
    return saved is not None and signal.getsignal(signal.SIGINT) != saved


class _Interrupts:
    """Kernel → Interrupt during form runs: one SIGINT handler, which stops every working
    form run. It is the kernel's handler between messages (ipykernel ignores SIGINT there),
    set on the kernel's main thread (the only one that gets signals) from its event loop.
    That callback may run inside a message handler (ipykernel 7 serves widget messages
    while a cell awaits): then the handler under way keeps its own, and ours is what it puts
    back when it returns (``saved_sigint_handler``). Put back the same way when the last run
    ended; with no run working it does what the one it replaced did."""

    runs: set["FormRun"] = set()
    previous: Any = signal.SIG_IGN  # the kernel's handler between messages before ours

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
    def take(cls, run: "FormRun", kernel: Any) -> None:
        if run.done.is_set():
            return
        cls.runs.add(run)
        between = cls.between(kernel)
        if between != cls.handle:  # a bound method: equal, not the same object, each time
            cls.previous = between
            cls.set_between(kernel, cls.handle)

    @classmethod
    def release(cls, run: "FormRun", kernel: Any) -> None:
        cls.runs.discard(run)
        if not cls.runs and cls.between(kernel) == cls.handle:  # else someone else's since: theirs
            cls.set_between(kernel, cls.previous)

    @staticmethod
    def between(kernel: Any) -> Any:
        """The kernel's SIGINT handler between messages."""
        return kernel.saved_sigint_handler if _in_message_handler(kernel) else signal.getsignal(signal.SIGINT)

    @staticmethod
    def set_between(kernel: Any, handler: Any) -> None:
        """``handler`` as the kernel's SIGINT handler between messages: what the message
        handler under way puts back, or (between messages) the one now."""
        if not _in_message_handler(kernel):
            signal.signal(signal.SIGINT, handler)
        if kernel is not None:
            kernel.saved_sigint_handler = handler


class _KernelStatus:
    """"busy" / "idle" on the kernel's IOPub channel, as the reply to the click's message
    (what JupyterLab's kernel status follows); nothing outside a kernel."""

    def __init__(self):
        from IPython import get_ipython

        self.kernel = getattr(get_ipython(), "kernel", None)
        self.parent = self.kernel.get_parent("shell") if self.kernel is not None else None
        self.said = time.monotonic()  # the first tick a second on: "busy" is said at the start

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
    """One run of a form's stage: ``work(run)`` in a worker thread, its output in ``area``.
    The work wraps its stage's progress callback in ``run.watch`` (takes a stop, keeps the
    kernel busy) and its stage's run in ``run.interruptible()`` (where a stop may be raised
    at once); ``on_end(run)`` is called in the worker when the work ended (``result`` or
    ``error`` set), its output still routed. ``stop_button``, shown first in the area,
    stops the run; it is retired when the run ends, saying whether the stop ended it."""

    def __init__(self, area: Any, work: Callable[["FormRun"], Any],
                 on_end: Callable[["FormRun"], None], stoppable: bool = False):
        self.route = OutputRoute(area)
        self.work = work
        self.on_end = on_end
        self.stopping = threading.Event()
        self.stopped_by = ""
        self.done = threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.stop_button: Optional[StopButton] = None
        # a stop raised in the worker (at a progress call, or at once) and where it may be
        # raised at once: changed under the lock, which the SIGINT handler may take on the
        # main thread while it holds it (a reentrant one)
        self._raise_lock = threading.RLock()
        self._stop_raised = False
        self._interruptible = False
        self._raised_at_once = False
        self._grace: Optional[threading.Timer] = None
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
        """From the click's handler (the kernel's main thread, or a subshell's): returns at once."""
        if self.stop_button is not None:
            self.route.show(self.stop_button)
        RoutedStreams.take()
        self._on_main_thread = _main_thread_scheduler(self._status.kernel)
        if self._on_main_thread is not None:  # after the click's handler returned (on the main shell)
            self._on_main_thread(self._begin)
        self._thread.start()
        return self

    def stop(self, how: str) -> None:
        """Asks the stage to stop at its next progress call, or at once when it reached none
        within :data:`STOP_AT_ONCE_AFTER_S` or this is asked again; the Stop button says
        "stopping…"."""
        if self.stopping.is_set():
            self._stop_at_once()  # asked twice before the stage took it: now, wherever it is
            return
        self.stopped_by = how
        self.stopping.set()
        self._grace = threading.Timer(STOP_AT_ONCE_AFTER_S, self._stop_at_once)
        self._grace.daemon = True
        self._grace.start()
        if self.stop_button is not None and not self.done.is_set():
            # from a SIGINT handler too: the widget's message is sent from the event loop,
            # never from inside whatever the signal interrupted
            if self._on_main_thread is not None:
                self._on_main_thread(self.stop_button.mark_stopping)
            else:
                self.stop_button.mark_stopping()

    @property
    def stopped(self) -> bool:
        """Whether the run ended by its stop (the work was interrupted, or its stage said
        INTERRUPTED), not merely had one asked after its last step."""
        return self.stopping.is_set() and (
            isinstance(self.error, KeyboardInterrupt) or getattr(self.result, "verdict", None) == INTERRUPTED)

    @contextlib.contextmanager
    def interruptible(self):
        """Around the stage's run: where a stop may be raised at once. A stop asked before it
        (while the stage was planned) is raised on entering; one raised at once that had not
        landed when the stage returned is dropped (the run finished)."""
        with self._raise_lock:
            if self.stopping.is_set() and not self._stop_raised:
                self._stop_raised = True
                raise KeyboardInterrupt(f"stopped from the notebook ({self.stopped_by})")
            self._interruptible = True
        try:
            yield
        finally:
            with self._raise_lock:
                self._interruptible = False
                if self._raised_at_once:
                    raise_in_thread(threading.get_ident(), None)

    def _stop_at_once(self) -> None:
        """The stop raised in the worker thread now, unless the stage took it already (it
        is stopping: a fresh interrupt would lose what finished) or is not running."""
        with self._raise_lock:
            if self._stop_raised or not self._interruptible or self.done.is_set():
                return
            self._stop_raised = self._raised_at_once = True
            raise_in_thread(self._thread.ident, StoppedAtOnce)

    def close(self) -> None:
        """Closes the widgets the run made (its Stop button, the display ids' Outputs):
        before its output is cleared, once it ended."""
        if self.stop_button is not None:
            close_widget(self.stop_button)
        self.route.close()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether the run ended within ``timeout`` seconds."""
        return self.done.wait(timeout)

    def watch(self, on_progress: Optional[OnProgress]) -> OnProgress:
        """``on_progress`` raising ``KeyboardInterrupt`` once a stop was asked (while the stage
        says it is running: one that says it stopped is let finish), saying "busy" meanwhile."""

        def checked(progress: Any) -> None:
            self._status.tick()
            if self.stopping.is_set() and getattr(progress, "running", True):
                with self._raise_lock:
                    self._stop_raised = True
                    if self._raised_at_once:  # raised at once and not landed yet: this one instead
                        raise_in_thread(threading.get_ident(), None)
                raise KeyboardInterrupt(f"stopped from the notebook ({self.stopped_by})")
            if on_progress is not None:
                on_progress(progress)

        return checked

    def _begin(self) -> None:
        """On the kernel's main thread: Kernel → Interrupt taken, "busy" said (after the
        kernel's "idle" for the click)."""
        if self.done.is_set():  # ended already: _finish follows
            return
        _Interrupts.take(self, self._status.kernel)
        self._status.say("busy")

    def _finish(self) -> None:
        """On the kernel's main thread: Kernel → Interrupt put back with the last run, and
        "idle" said unless another run works or a cell is under way (its "idle" follows)."""
        kernel = self._status.kernel
        _Interrupts.release(self, kernel)
        if not _Interrupts.runs and not _in_message_handler(kernel):
            self._status.say("idle")

    def _run(self) -> None:
        ROUTE.set(self.route)
        publisher = display_publisher()
        if publisher is not None:
            publisher.register_hook(self.route.message)  # this thread's displays only
        if self._on_main_thread is None:  # not in a kernel's event loop: said from here
            self._status.say("busy")
        try:
            try:
                self.result = self.work(self)
            except BaseException as exc:  # said by on_end: a refusal, a stop, a defect
                self.error = exc
            self.on_end(self)
        except BaseException as exc:  # on_end itself failed: shown, never lost
            self.route.error(exc)
        finally:
            if self._grace is not None:
                self._grace.cancel()
            if self.stop_button is not None:
                self.stop_button.retire(self.ending())
            if publisher is not None:
                publisher.unregister_hook(self.route.message)
            RoutedStreams.release()
            if self._on_main_thread is not None:
                # soon after ``done``, once the main thread is free: a cell that waits for the
                # run (on the main thread) must not wait for this
                self._on_main_thread(self._finish)
            else:
                self._status.say("idle")
            self.done.set()

    def ending(self) -> str:
        """How the run ended, in a few words (beside the retired Stop button): "stopped"
        only when the stop ended it."""
        if self.stopped:
            return f"stopped ({self.stopped_by})"
        if self.error is not None:
            return f"ended: {type(self.error).__name__}"
        if self.stopping.is_set():
            return f"finished: {self.stopped_by} came after its last step"
        return "finished"


def _main_thread_scheduler(kernel: Any) -> Optional[Callable[..., None]]:
    """A thread-safe way to call a function on the kernel's main thread (signal handlers
    are set there only): its event loop. The click's thread will not always do: ipykernel
    7.4 sends a comm's messages to the subshell that last published on it (``Comm.
    _reply_subshell_for``), whose handlers run in a thread of their own. Outside a kernel,
    the running event loop of the main thread; else None."""
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
