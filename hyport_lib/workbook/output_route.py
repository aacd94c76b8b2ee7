"""Where a form run's output goes: the form's output area, as widget state (ipywidgets' way to
write to an ``Output`` from a background thread). The worker's ``display()`` /
``update_display`` / ``clear_output`` arrive through a hook on the kernel's display publisher
(ipykernel's hooks are thread-local: the worker's messages only), its ``print`` through a
stream that routes the text of the thread whose context holds a route (:data:`ROUTE`). Each
``display_id`` gets a child ``Output``, so a redrawn progress line does not redraw the plot
beside it.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import traceback
from typing import Any, Optional

#: The output route of the form run the current thread works for (None: not a form run).
ROUTE: contextvars.ContextVar[Optional["OutputRoute"]] = contextvars.ContextVar("hyport_form_route", default=None)


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
                self.close()

    def close(self) -> None:
        """Closes the child Outputs made for display ids (a widget not closed lives as long
        as the kernel)."""
        with self._lock:
            for children in self.handles.values():
                for child in children:
                    close_widget(child)
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
        route = ROUTE.get()
        if route is None:
            return self._original.write(text)
        route.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        if ROUTE.get() is None:
            self._original.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


class RoutedStreams:
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


def close_widget(widget: Any) -> None:
    """``widget`` closed, with its ``layout`` (a widget of its own, which ``close`` leaves open)."""
    widget.close()
    widget.layout.close()


def display_publisher() -> Any:
    """The kernel's display publisher when it takes hooks (ipykernel's), else None."""
    from IPython import get_ipython

    shell = get_ipython()
    publisher = getattr(shell, "display_pub", None)
    return publisher if hasattr(publisher, "register_hook") else None
