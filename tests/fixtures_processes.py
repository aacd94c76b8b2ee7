"""The fast tier starts no process: a test that does must be marked ``slow``.

For every test NOT marked ``slow``, starting a process fails the test with a message naming
it: ``subprocess.Popen`` (and so ``subprocess.run``, papermill's kernels, asyncio's
subprocesses), ``multiprocessing`` (and so ``concurrent.futures.ProcessPoolExecutor``),
``os.fork``/``os.forkpty``, ``os.system``, ``os.posix_spawn``/``os.posix_spawnp``.

It is applied by hook wrappers around each test's setup, call and teardown rather than by
an autouse fixture: a function-scoped autouse fixture is set up *after* the session and
module fixtures a test asks for, so a fast test could start a process from a shared
fixture unseen. The hooks cover every fixture set up for (or torn down after) the test.

A library may catch the error it gets (``except Exception`` around a probe, say) and go
on; each attempt is therefore also remembered, and the test fails after the phase even
when nothing re-raised it.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import platform
import subprocess

import pytest

SLOW = "slow"

# Python's platform.processor() runs `uname -p` the first time it is asked, then caches
# the answer for the process. Asked here, while the session starts, so that a fast test
# of the environment report reads the cache instead of starting that process itself.
platform.processor()


class ProcessInFastTest(RuntimeError):
    """A test of the fast tier tried to start a process."""


def _what(starter: str, args: tuple, kwargs: dict) -> str:
    """A short description of the process asked for (the command when there is one)."""
    command = kwargs.get("args", args[0] if args else None)
    if isinstance(command, (list, tuple)):
        command = " ".join(str(c) for c in command[:4])
    return f"{starter}({command!s:.120})" if command is not None else f"{starter}()"


def _message(nodeid: str, what: str) -> str:
    return (f"{nodeid} started a process ({what}) but is not marked slow: mark it "
            f"@pytest.mark.slow (the fast tier, -m \"not slow\", starts no process)")


@contextlib.contextmanager
def _no_processes(nodeid: str, attempts: list[str]):
    """Replace every process starter with one that records the attempt and raises."""
    def refuse(starter):
        def refused(*args, **kwargs):
            # Popen.__init__ and BaseProcess.start get self first: leave it out of the text.
            shown = args[1:] if starter in ("subprocess.Popen", "multiprocessing.Process.start") else args
            message = _message(nodeid, _what(starter, shown, kwargs))
            attempts.append(message)
            raise ProcessInFastTest(message)
        return refused

    targets = [(subprocess.Popen, "__init__", "subprocess.Popen"),
               (multiprocessing.process.BaseProcess, "start", "multiprocessing.Process.start")]
    targets += [(os, name, f"os.{name}") for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp")
                if hasattr(os, name)]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in targets]
    for owner, name, starter in targets:
        setattr(owner, name, refuse(starter))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@contextlib.contextmanager
def _guarded(item: pytest.Item):
    if item.get_closest_marker(SLOW) is not None:
        yield
        return
    attempts: list[str] = []
    try:
        with _no_processes(item.nodeid, attempts):
            yield
    except BaseException as exc:
        # Whatever the test failed with (an assertion on what the refused process would
        # have done, a skip), the reason to fix first is the process.
        if attempts and not isinstance(exc, ProcessInFastTest):
            raise ProcessInFastTest(attempts[0]) from exc
        raise
    if attempts:
        # Raised here too: the code under test may have swallowed the first error.
        raise ProcessInFastTest(attempts[0])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    with _guarded(item):
        return (yield)
