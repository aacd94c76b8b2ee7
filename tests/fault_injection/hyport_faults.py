"""Test-only fault switches for hyport's worker processes; hyport never imports this.

A test that needs a worker to misbehave asks for the ``fault_switches`` fixture
(tests/conftest.py), which puts this folder on the ``PYTHONPATH`` of the processes the
test starts, and sets a switch:

* ``HYPORT_TEST_FAULT="<card>:<mode>[,<card>:<mode>...]"``: the inference worker of that
  card misbehaves before it loads the model, so the grid's isolation is tested without a
  broken model. Modes: ``raise`` (a RuntimeError), ``signal`` (SIGKILL to itself, as the
  out-of-memory killer would), ``exit`` (``os._exit(3)`` without a result), ``hang``
  (starts a sleeping child in its group, prints the child's pid, sleeps forever),
  ``replay=<log file>`` (see :func:`replay_failure`).
* ``HYPORT_TEST_KILL_AT_STEP=<step>:<rank>``: that training rank SIGKILLs itself at the
  end of that step, once per output folder.
* ``HYPORT_TEST_REPLAY_AT_STEP=<step>:<rank>:<log file>``: that rank replays a real
  failure at the end of that step.
* ``HYPORT_TEST_NAN_AT_STEP=<step>``: that step's loss is NaN on every rank.

How: Python imports this folder's ``sitecustomize`` at start-up, which calls
:func:`install`. When a switch is set, a finder answers for the modules of :data:`PATCHES`
and patches each as it loads: the inference worker's function (``run_on_card``, imported
by :func:`hyport_lib.processes.task_main`) fires the card's fault first, the training
worker's ``CountingTrainer`` gains the step faults. The training worker runs as ``python -m
hyport_lib.train.worker``: runpy asks the finder for the code to run as ``__main__`` and
gets a stub that imports the worker as an ordinary module (so patched), then calls its
``main()``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

FOLDER = Path(__file__).resolve().parent
FAULT_ENV = "HYPORT_TEST_FAULT"
KILL_FAULT_ENV = "HYPORT_TEST_KILL_AT_STEP"
REPLAY_FAULT_ENV = "HYPORT_TEST_REPLAY_AT_STEP"
NAN_FAULT_ENV = "HYPORT_TEST_NAN_AT_STEP"
SWITCHES = (FAULT_ENV, KILL_FAULT_ENV, REPLAY_FAULT_ENV, NAN_FAULT_ENV)

FAULT_MODES = ("raise", "signal", "exit", "hang")
#: ``replay=<log file>``: replay a real failure's log lines, then raise.
REPLAY_MODE = "replay="
#: Exit status of the ``exit`` fault, distinct from Python's own 1 (uncaught exception).
FAULT_EXIT_CODE = 3


def with_fault_switches(environ: dict) -> dict:
    """``environ`` with this folder first on its ``PYTHONPATH``: the processes started with
    it obey the switches."""
    path = os.pathsep.join(p for p in (str(FOLDER), environ.get("PYTHONPATH", "")) if p)
    return {**environ, "PYTHONPATH": path}


# -- replaying a real failure ----------------------------------------------------------
class ReplayedFailure(RuntimeError):
    """Raised after the replayed lines; its message names the log it came from."""


def replay_failure(log_path: os.PathLike, switch: str, stream: Optional[TextIO] = None) -> None:
    """Write ``log_path``'s lines to ``stream`` (stderr), as CANN and torch_npu would have,
    then raise :class:`ReplayedFailure`.

    A CPU cannot fail the way an NPU does: the suite replays a real failure's log instead
    (``tests/data/npu_logs/``, each copied from a public issue thread), for the failure
    triage to read.

    Raises:
        ReplayedFailure: always, after the lines are written and flushed.
        FileNotFoundError: ``log_path`` does not exist (named with the switch).
    """
    path = Path(log_path)
    if not path.is_file():
        raise FileNotFoundError(f"{switch}: no log to replay at {path}")
    stream = sys.stderr if stream is None else stream
    sys.stdout.flush()
    stream.write(path.read_text(encoding="utf-8", errors="replace").rstrip("\n") + "\n")
    stream.flush()
    raise ReplayedFailure(f"test fault: the lines above were replayed from {path.name} ({switch})")


# -- the inference worker ----------------------------------------------------------------
def parse_faults(text: Optional[str]) -> dict[int, str]:
    """``"1:raise,2:hang"`` -> ``{1: "raise", 2: "hang"}``; errors name the variable."""
    faults: dict[int, str] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        card, sep, mode = item.partition(":")
        mode = mode.strip()
        if not mode.startswith(REPLAY_MODE):  # a replayed log's path keeps its case
            mode = mode.lower()
        if not sep or not card.strip().isdigit() or \
                (mode not in FAULT_MODES and not (mode.startswith(REPLAY_MODE) and len(mode) > len(REPLAY_MODE))):
            raise ValueError(
                f"{FAULT_ENV}={text!r}: expected '<card>:<mode>' items with mode one of "
                f"{', '.join(FAULT_MODES)} or {REPLAY_MODE}<log file>; got {item!r}")
        faults[int(card)] = mode
    return faults


def inject_fault(card: int) -> None:
    """Misbehave as ``HYPORT_TEST_FAULT`` asks for this card."""
    mode = parse_faults(os.environ.get(FAULT_ENV)).get(int(card))
    if mode is None:
        return
    print(f"[hyport worker] test fault {mode!r} injected on card {card} ({FAULT_ENV})", flush=True)
    if mode.startswith(REPLAY_MODE):
        replay_failure(mode[len(REPLAY_MODE):], FAULT_ENV)
    if mode == "raise":
        raise RuntimeError(f"injected test fault on card {card} ({FAULT_ENV})")
    sys.stdout.flush()
    sys.stderr.flush()
    if mode == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "exit":
        os._exit(FAULT_EXIT_CODE)
    if mode == "hang":
        # A child in the same process group: the launcher must kill the whole group.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"[hyport worker] hang: child pid {child.pid}", flush=True)
        while True:
            time.sleep(3600)


def _patch_inference_worker(module) -> None:
    run_on_card = module.run_on_card

    def faulty_run_on_card(spec: dict) -> dict:
        inject_fault(int(spec["card"]))
        return run_on_card(spec)

    module.run_on_card = faulty_run_on_card


# -- the training worker -----------------------------------------------------------------
def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def _say(message: str) -> None:
    print(f"[hyport train rank {_rank()}] {message}", flush=True)


def parse_replay_switch(raw: str) -> tuple[int, int, str]:
    """``"<step>:<rank>:<log file>"`` -> ``(step, rank, log file)``; errors name the switch."""
    step, rank, log_path = (raw.split(":", 2) + ["", ""])[:3]
    if not (step.isdigit() and rank.isdigit() and log_path):
        raise ValueError(f"{REPLAY_FAULT_ENV}={raw!r}: expected <step>:<rank>:<log file>")
    return int(step), int(rank), log_path


def _step_fault_callbacks() -> list:
    from transformers import TrainerCallback

    callbacks = []
    kill = os.environ.get(KILL_FAULT_ENV, "").strip()
    if kill:
        step, _, rank = kill.partition(":")

        class KillOnce(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                marker = Path(args.output_dir) / ".hyport_test_killed"
                if state.global_step == int(step) and _rank() == int(rank or 0) and not marker.exists():
                    marker.write_text(str(state.global_step))
                    _say(f"test fault: SIGKILL at step {state.global_step} ({KILL_FAULT_ENV})")
                    os.kill(os.getpid(), signal.SIGKILL)

        callbacks.append(KillOnce())
    replay = os.environ.get(REPLAY_FAULT_ENV, "").strip()
    if replay:
        replay_step, replay_rank, log_path = parse_replay_switch(replay)

        class ReplayFailure(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == replay_step and _rank() == replay_rank:
                    _say(f"test fault: replaying {log_path} at step {state.global_step} ({REPLAY_FAULT_ENV})")
                    replay_failure(log_path, REPLAY_FAULT_ENV)

        callbacks.append(ReplayFailure())
    return callbacks


def _patch_train_worker(module) -> None:
    raw = os.environ.get(NAN_FAULT_ENV, "").strip()
    nan_step = int(raw) if raw.isdigit() else None

    class FaultyTrainer(module.CountingTrainer):
        def __init__(self, *args, callbacks=None, **kwargs):
            super().__init__(*args, callbacks=[*(callbacks or []), *_step_fault_callbacks()], **kwargs)

        def compute_loss(self, model, inputs, *args, **kwargs):
            result = super().compute_loss(model, inputs, *args, **kwargs)
            if nan_step is None or self.state.global_step + 1 != nan_step:
                return result
            print(f"[hyport train] test fault: NaN loss at step {nan_step} ({NAN_FAULT_ENV})", flush=True)
            if isinstance(result, tuple):
                return (result[0] * float("nan"), *result[1:])
            return result * float("nan")

    module.CountingTrainer = FaultyTrainer


# -- the hook ----------------------------------------------------------------------------
PATCHES: dict[str, Callable] = {
    "hyport_lib.models.generation": _patch_inference_worker,
    "hyport_lib.train.worker": _patch_train_worker,
}


def run_patched(name: str) -> None:
    """What ``python -m <name>`` runs instead: the worker imported (and so patched) as a
    module, then its ``main()``, as its own ``__main__`` block would."""
    sys.exit(importlib.import_module(name).main())


class _PatchingLoader:
    """The worker's own loader, patching the module once it has run; to runpy it hands the
    stub that runs the patched module's ``main()``."""

    def __init__(self, loader, name: str):
        self.loader = loader
        self.name = name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        PATCHES[self.name](module)

    def get_code(self, name: str):
        return compile(f"import hyport_faults\nhyport_faults.run_patched({name!r})\n",
                       self.loader.get_filename(name), "exec")

    def is_package(self, name: str) -> bool:
        return False


class _WorkerFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _PatchingLoader(spec.loader, name)
                return spec
        return None


def install() -> None:
    """Put the finder first when a switch is set (called by ``sitecustomize``)."""
    if any(os.environ.get(name, "").strip() for name in SWITCHES):
        sys.meta_path.insert(0, _WorkerFinder())
