"""Stopping a stage from the notebook: Kernel → Interrupt and the Stop button end a run the
same way a Ctrl-C ends ``hyport train``.

A stage stopped by ``KeyboardInterrupt`` stops its processes and leaves what finished on the
exception (``exc.partial``: the steps, cards or checks done). :func:`run_stoppable` returns
that partial result instead of a traceback, so the notebook shows and records it
(INTERRUPTED). The Stop button raises the same interrupt from the run's progress callback:
a click on a widget is a message the kernel reads only between cells, so the callback has
the kernel read the waiting messages (``jupyter_ui_poll``) while the stage runs. Under
``hyport report`` the stop is the report's: it goes on, and the report records the stage.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, TypeVar

from hyport_lib.results import RUN_DIR_ENV

R = TypeVar("R")


class StopRequested(KeyboardInterrupt):
    """The Stop button was pressed: the stage stops as on Kernel → Interrupt."""


def run_stoppable(run: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``run(*args, **kwargs)``; stopped (Kernel → Interrupt, the Stop button), the partial
    result the stage left on the exception, with no traceback. An interrupt that left no
    partial result (it came before the stage started anything), or one under ``hyport
    report``, goes on."""
    try:
        return run(*args, **kwargs)
    except KeyboardInterrupt as exc:
        partial = getattr(exc, "partial", None)
        if partial is None or os.environ.get(RUN_DIR_ENV):
            raise
        return partial


class StopButton:
    """A "Stop" button for a stage run from a notebook cell.

    Pass :meth:`watch` the run's ``on_progress`` display: the wrapped callback reads the
    widget messages that arrived since its last call and, once Stop was clicked, raises
    :class:`StopRequested` there, inside the stage's own polling loop, which then stops its
    processes as on any interrupt. ``widget`` is shown above the run's output."""

    def __init__(self, description: str = "Stop"):
        import ipywidgets as widgets

        self.requested = False
        self.live = False  # shown in a notebook: widget messages may arrive
        self.button = widgets.Button(description=description, button_style="danger", icon="stop",
                                     tooltip="stop the run: its processes end, what finished is kept")
        self.button.add_class("hyport-stop")
        self.button.on_click(lambda _: self.request())
        self.widget = self.button

    def show(self) -> "StopButton":
        """Display the button when a notebook cell runs the stage. Not under ``hyport
        report`` (headless: nothing could click it, and the kernel's messages are left
        alone), and not from a widget's own callback (a form's Run: the kernel is answering
        that click, and reading further messages there would hold back every cell after
        it; Kernel → Interrupt stops such a run)."""
        if not os.environ.get(RUN_DIR_ENV) and _in_cell():
            from IPython.display import display

            display(self.widget)
            self.live = True
        return self

    def request(self) -> None:
        """What a click does (callable from code)."""
        self.requested = True
        self.button.disabled = True
        self.button.description = "stopping…"

    def check(self) -> None:
        """Read the waiting widget messages; raise :class:`StopRequested` once Stop was
        clicked. A button never shown (a script, a test, a report) only reads the flag."""
        if not self.requested and self.live:
            from jupyter_ui_poll import ui_events

            with ui_events() as read_messages:
                read_messages(20)
        if self.requested:
            raise StopRequested("stopped from the Stop button")

    def finished(self) -> None:
        """The run ended: the button can no longer stop anything."""
        self.button.disabled = True
        if not self.requested:
            self.button.description = "finished"

    def watch(self, on_progress: Optional[Callable[[Any], None]]) -> Callable[[Any], None]:
        """``on_progress`` that also answers the Stop button; a stop raises before the display
        is drawn again, and a run that ends (not ``running``) disables the button."""

        def watched(progress: Any) -> None:
            if getattr(progress, "running", True):
                self.check()
            else:
                self.finished()
            if on_progress is not None:
                on_progress(progress)

        return watched


def _in_cell() -> bool:
    """Whether this runs in a kernel, for a cell being executed (not for a widget message)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None or not hasattr(kernel, "get_parent"):
        return False
    parent = kernel.get_parent() or {}
    return parent.get("header", {}).get("msg_type") == "execute_request"
