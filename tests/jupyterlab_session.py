"""Start a throw-away JupyterLab server and drive a notebook in it with Playwright.

The server runs from the test's own interpreter (``sys.executable -m jupyter lab``) on a
free 127.0.0.1 port with a random token. Every per-user Jupyter folder points into a
temporary directory, so nothing is read from or written to ``~/.jupyter`` or the repo;
the environment's own ``share/jupyter`` (kernelspec, ipywidgets' lab extension) stays
on the data path because jupyter_core always lists ``sys.prefix/share/jupyter``.

Selectors and the readiness sequence follow docs/browser_checks.md
(JupyterLab 4.6).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psutil

#: Seconds allowed for the server to answer, a kernel to start, a run-all to finish,
#: the kernels to stop.
SERVER_START_S = 120
KERNEL_START_S = 120
RUN_ALL_S = 240
KERNEL_STOP_S = 60

#: Settings that keep JupyterLab quiet and offline: no news or update fetch, no toasts.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True},
}

LOCAL_HOSTS = ("127.0.0.1",)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabServer:
    """A running ``jupyter lab`` process started by :func:`start_lab`."""

    proc: subprocess.Popen
    port: int
    token: str
    root_dir: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def notebook_url(self, relative: str) -> str:
        """The URL opening ``relative`` (under root_dir) in a fresh workspace."""
        return f"{self.base_url}/lab/tree/{relative}?reset&token={self.token}"

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def jupyter_env(base: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: every per-user Jupyter/IPython folder under ``base``."""
    dirs = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data",
            "JUPYTER_RUNTIME_DIR": "runtime", "JUPYTERLAB_SETTINGS_DIR": "lab-settings",
            "JUPYTERLAB_WORKSPACES_DIR": "lab-workspaces", "IPYTHONDIR": "ipython"}
    env = dict(os.environ)
    for var, name in dirs.items():
        folder = base / name
        folder.mkdir(parents=True, exist_ok=True)
        env[var] = str(folder)
    # keep the environment's own share/jupyter (kernelspec, lab extensions) first
    env["JUPYTER_PREFER_ENV_PATH"] = "1"
    env.update(extra or {})
    for rel, values in LAB_SETTINGS.items():
        path = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return env


def start_lab(root_dir: Path, base: Path, extra_env: dict[str, str] | None = None) -> LabServer:
    """Start ``jupyter lab`` serving ``root_dir``; return once its API answers.

    Args:
        root_dir: the folder the server shows (``--ServerApp.root_dir``).
        base: a scratch folder for the Jupyter folders and the server log.
        extra_env: variables added to the server's (and so the kernels') environment.

    Raises:
        RuntimeError: the server exited or did not answer within ``SERVER_START_S``;
            the message ends with its log. The process is stopped before raising.
    """
    env = jupyter_env(base, extra_env)
    log_path = base / "jupyter-lab.log"
    for attempt in range(3):  # free_port() can race with another process taking the port
        server = _launch(root_dir, env, log_path)
        try:
            _wait_for_api(server)
            return server
        except BaseException:
            stop_lab(server)
            if attempt == 2 or "already in use" not in server.log_tail():
                raise
    raise AssertionError("unreachable")


def _launch(root_dir: Path, env: dict[str, str], log_path: Path) -> LabServer:
    port, token = free_port(), secrets.token_hex(24)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
           "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}"]
    with open(log_path, "wb") as log:
        # own session: the process group can be killed without touching the test runner
        proc = subprocess.Popen(cmd, env=env, cwd=str(root_dir), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return LabServer(proc, port, token, root_dir, log_path)


def _wait_for_api(server: LabServer) -> None:
    url = f"{server.base_url}/api/status?token={server.token}"
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {server.proc.returncode}:\n"
                               f"{server.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet
        time.sleep(0.25)
    raise RuntimeError(f"jupyter lab did not answer on port {server.port} within "
                       f"{SERVER_START_S} s:\n{server.log_tail()}")


def stop_lab(server: LabServer, timeout: float = 30) -> None:
    """Stop the server by its own PID; kill its group and kernels only if they linger.

    Kernels run in sessions of their own, so they are found as the server's children
    before it is stopped; a clean SIGTERM shuts them down, and any still alive after
    the server exited is killed by its PID (each was started by this server).
    """
    proc = server.proc
    if proc.poll() is not None:
        return
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group exists: proc is its leader and alive
        proc.wait(timeout=timeout)
    _, alive = psutil.wait_procs(children, timeout=15)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass  # exited between the wait and the kill


@dataclass
class NetworkLog:
    """What the page asked for: everything, and what was aborted for leaving 127.0.0.1."""

    requests: list[str] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def off_host(self) -> list[str]:
        """Every request or websocket URL whose host is not local."""
        return [u for u in self.requests + self.websockets if not is_local(u)]


def is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob") or parts.hostname in LOCAL_HOSTS


class NetworkGuard:
    """Aborts and records any request of a browser context not for 127.0.0.1.

    Installed once per context; :meth:`watch` starts a fresh :class:`NetworkLog` for a
    page (its websockets and page errors, and from then on every request of the
    context), so that pages opened one after another in one context, sharing its HTTP
    cache, are each checked on their own.

    The route handler runs in this Python process, only while a Playwright call is in
    progress: wait with Playwright (``page.wait_for_*``), never ``time.sleep``, or the
    page's requests stall meanwhile.
    """

    def __init__(self, context):
        self.log = NetworkLog()
        context.route("**/*", self._route)
        context.on("request", lambda r: self.log.requests.append(r.url))

    def _route(self, r) -> None:
        if is_local(r.request.url):
            r.continue_()
        else:
            self.log.blocked.append(r.request.url)
            r.abort()

    def watch(self, page) -> NetworkLog:
        self.log = log = NetworkLog()
        page.on("websocket", lambda ws: log.websockets.append(ws.url))
        page.on("pageerror", lambda e: log.page_errors.append(str(e)))
        return log


def guard_network(context, page) -> NetworkLog:
    """Abort and record any request not for 127.0.0.1; record all requests and sockets
    (one page in its own context; see :class:`NetworkGuard`)."""
    return NetworkGuard(context).watch(page)


def open_notebook(page, server: LabServer, relative: str) -> None:
    """Open the notebook and return once its kernel has started and is idle."""
    page.goto(server.notebook_url(relative), wait_until="domcontentloaded",
              timeout=SERVER_START_S * 1000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=SERVER_START_S * 1000)
    # the indicator reads idle before any kernel exists: first wait for a kernel name
    page.wait_for_function(
        """() => { const el = document.querySelector('.jp-NotebookPanel .jp-Toolbar-kernelName');
                   return el && el.textContent.trim() && !/No Kernel/i.test(el.textContent); }""",
        timeout=KERNEL_START_S * 1000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]',
                           timeout=KERNEL_START_S * 1000)


def run_all_cells(page) -> list[str]:
    """Run → Run All Cells; return the code cells' prompts once the run has ended.

    Run All marks every code cell ``[*]`` at once; the run has ended when none is left
    so and at least one has a count. A cell that raises stops the run early (the
    kernel drops the rest, whose prompts go back to ``[ ]``), so a failing notebook
    ends quickly rather than at the timeout; callers check the outputs and prompts.
    """
    start_run_all(page)
    return wait_for_run_all(page)


def start_run_all(page) -> None:
    """Run → Run All Cells, returning at once (the run goes on: see :func:`wait_for_run_all`)."""
    page.click('.lm-MenuBar-itemLabel:text-is("Run")')
    page.click('.lm-Menu-item[data-command="runmenu:run-all"]')


def wait_for_run_all(page) -> list[str]:
    """The code cells' prompts once a Run All has ended (see :func:`run_all_cells`)."""
    prompts = "[...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputArea-prompt')]"
    page.wait_for_function(
        f"""() => {{ const p = {prompts}.map(e => e.textContent.trim());
                    return !p.includes('[*]:') && p.some(t => /^\\[\\d+\\]:$/.test(t)); }}""",
        timeout=RUN_ALL_S * 1000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]',
                           timeout=RUN_ALL_S * 1000)
    return page.evaluate(f"() => {prompts}.map(e => e.textContent.trim())")


def save_notebook(page) -> None:
    """File → Save Notebook; return once the server has the file (tab no longer dirty)."""
    page.click('.lm-MenuBar-itemLabel:text-is("File")')
    page.click('.lm-Menu-item[data-command="docmanager:save"]')
    page.wait_for_function(
        "() => !document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-dirty')",
        timeout=SERVER_START_S * 1000)


def api(server: LabServer, method: str, path: str, timeout: float = 10):
    """One call to the server's REST API (``path`` under ``/api/``); the decoded JSON body,
    or None for an empty one."""
    request = urllib.request.Request(f"{server.base_url}/api/{path}", method=method,
                                     headers={"Authorization": f"token {server.token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
    return json.loads(body) if body else None


def shutdown_kernels(server: LabServer, timeout: float = KERNEL_STOP_S) -> None:
    """End every session (and so its kernel) of the server; return once none is left.

    A module that shares one server between tests calls this after each notebook, so
    that an idle kernel holding torch does not stay in memory for the next one.

    Raises:
        TimeoutError: kernels were still listed after ``timeout`` seconds.
    """
    for session in api(server, "GET", "sessions"):
        api(server, "DELETE", f"sessions/{session['id']}")
    deadline = time.monotonic() + timeout
    while (kernels := api(server, "GET", "kernels")):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"kernels still running {timeout:g} s after their sessions "
                               f"ended: {[k['id'] for k in kernels]}")
        time.sleep(0.25)


def copy_notebook(source: Path, folder: Path, parameters: dict | None = None,
                  replace: dict[str, str] | None = None) -> Path:
    """Copy ``source`` into ``folder`` with outputs untouched (a committed notebook has
    none) and, in the copy only, some parameters and code changed.

    Args:
        parameters: name -> value; the line ``name = ...`` of the cell tagged
            ``parameters`` becomes ``name = <repr(value)>``.
        replace: old -> new text in the code cells; each ``old`` must occur exactly once,
            so a changed notebook fails here rather than running unedited.

    Raises:
        ValueError: a parameter is not assigned in the parameters cell, or a replaced
            text does not occur exactly once.
    """
    nb = json.loads(source.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for name, value in (parameters or {}).items():
        cell = next(c for c in code if "parameters" in c.get("metadata", {}).get("tags", []))
        text = "".join(cell["source"])
        pattern = re.compile(rf"^{re.escape(name)} = .*$", re.MULTILINE)
        if len(pattern.findall(text)) != 1:
            raise ValueError(f"{source.name}: no single line '{name} = ...' in its parameters cell")
        text = pattern.sub(lambda _: f"{name} = {value!r}  # set by the browser test", text)
        cell["source"] = text.splitlines(keepends=True)
    for old, new in (replace or {}).items():
        found = sum("".join(c["source"]).count(old) for c in code)
        if found != 1:
            raise ValueError(f"{source.name}: {old!r} occurs {found} times in its code cells, not once")
        for cell in code:
            text = "".join(cell["source"])
            if old in text:
                cell["source"] = text.replace(old, new).splitlines(keepends=True)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    target.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    return target


#: JupyterLab 4.6 renders error outputs with the stderr mime type, like warnings; the
#: error mime type is checked too in case a later version tells them apart.
ERROR_OUTPUT = ('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"], '
                '.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]')


def page_errors(page) -> list[str]:
    """Error outputs and tracebacks rendered in the open notebook (their first lines)."""
    found = page.locator(ERROR_OUTPUT).all_inner_texts()
    found += page.locator(".jp-NotebookPanel .jp-OutputArea-output",
                          has_text="Traceback (most recent call last)").all_inner_texts()
    return [text.strip()[:500] for text in found]


def saved_errors(notebook: dict) -> list[str]:
    """``ename: evalue`` of every error output in a saved notebook."""
    return [f"{o['ename']}: {o['evalue']}" for c in notebook["cells"] for o in c.get("outputs", [])
            if o["output_type"] == "error"]
