"""Expensive runs made once per session and read by every test that checks their outputs.

- ``default_report``: ``hyport report --profile default --zip``, the five stages on the
  embedded default, with planted secrets in its environment (read by test_offline_report,
  test_blog, test_notebooks).
- ``zero2_run``: one torchrun + DeepSpeed ZeRO-2 training on 2 CPU processes, 6 steps with a
  checkpoint every 2 (read by test_training_run, where it is also the reference run of the
  killed-and-resumed test, and by tests/weights/test_zero.py).
- ``papermill_04``: the user's ``papermill 04_train.ipynb out.ipynb -p max_steps 20`` from
  the repository root or from notebooks/, each at most once (test_training_run,
  test_notebooks).

A shared run is read-only: a test that changes files copies them into its ``tmp_path``
first. Each fixture fingerprints its folder when made and checks it again at the end of
the session, so a test that wrote into a shared run fails the session instead of quietly
changing what later tests read.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Planted in the default report's environment: no file of the run may hold them.
MARKER = "hyport-marker-9f3c1e7a"
SECRETS = {"HF_TOKEN": MARKER + "-hf", "WANDB_API_KEY": MARKER + "-wandb",
           "MY_SECRET": MARKER + "-mine", "HCCL_DB_PASSWORD": MARKER + "-hccl"}


def fingerprint(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``folder``."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_unchanged(folder: Path, before: dict[str, str], what: str) -> None:
    after = fingerprint(folder)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, (f"a test changed the shared {what} in {folder} (copy it to tmp_path first): "
                         f"{changed[:10]}")


def run_report_command(out: Path, *args: str, env: Optional[dict] = None) -> tuple[subprocess.CompletedProcess,
                                                                                  Optional[Path]]:
    """``hyport report --profile default ARGS --output-dir out`` started in ``out``, with the
    planted secrets. Returns the finished process and the one run folder (None if not one)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **SECRETS, "HCCL_CONNECT_TIMEOUT": "240", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "hyport_lib", "report", "--profile", "default", *args,
         "--output-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=900, cwd=str(out))
    runs = [p for p in out.iterdir() if p.is_dir()]
    return proc, (runs[0] if len(runs) == 1 else None)


@pytest.fixture(scope="session")
def default_report(tmp_path_factory):
    """The main job, once: every stage on the embedded default, and the zip to send.

    Returns ``(finished process, run folder or None)``; the tests assert on both.
    """
    proc, run_dir = run_report_command(tmp_path_factory.mktemp("default-report"), "--zip")
    before = fingerprint(run_dir) if run_dir else {}
    yield proc, run_dir
    if run_dir:
        assert_unchanged(run_dir, before, "default report run")


#: Steps of the shared ZeRO-2 run: test_training_run's killed-and-resumed test compares
#: its 6 steps, step by step, with this run.
ZERO2_STEPS = 6


@pytest.fixture(scope="session")
def zero2_run(tmp_path_factory):
    """One real ZeRO-2 run (6 steps, a checkpoint every 2): its result object.

    The output folder is ``result.final_dir`` (``<tmp>/run``); ``result.last_checkpoint``
    is its checkpoint-6.
    """
    from hyport_lib.train import stage
    from hyport_lib.train.params import Params

    out = tmp_path_factory.mktemp("zero2") / "run"
    result = stage.run(stage.plan(Params(output_dir=str(out), zero_stage=2, max_steps=ZERO2_STEPS,
                                         save_steps=2, resume_from="none")))
    before = fingerprint(out) if out.is_dir() else {}
    yield result
    if out.is_dir():
        assert_unchanged(out, before, "ZeRO-2 training run")


@dataclass
class PapermillRun:
    """One ``papermill 04_train.ipynb`` command: the process, its output notebook and the
    results folder it recorded into."""

    proc: subprocess.CompletedProcess
    notebook: Path
    results: Path


@pytest.fixture(scope="session")
def papermill_04(tmp_path_factory) -> Callable[[str], PapermillRun]:
    """``papermill_04(where)``: the user's command, from ``"root"`` (``papermill
    notebooks/04_train.ipynb out.ipynb -p max_steps 20``) or ``"notebooks"`` (``papermill
    04_train.ipynb out.ipynb -p max_steps 20`` in notebooks/), run the first time it is
    asked for and shared after."""
    done: dict[str, PapermillRun] = {}

    def run(where: str) -> PapermillRun:
        if where not in done:
            cwd = {"root": REPO, "notebooks": REPO / "notebooks"}[where]
            notebook = "notebooks/04_train.ipynb" if where == "root" else "04_train.ipynb"
            folder = tmp_path_factory.mktemp(f"papermill-04-{where}")
            out, results = folder / "out.ipynb", folder / "results"
            env = {**os.environ, "HYPORT_RESULTS_DIR": str(results)}
            papermill = Path(sys.executable).with_name("papermill")
            proc = subprocess.run([str(papermill), notebook, str(out), "-p", "max_steps", "20"], cwd=cwd,
                                  env=env, capture_output=True, text=True, timeout=900)
            done[where] = PapermillRun(proc, out, results)
        return done[where]

    return run
