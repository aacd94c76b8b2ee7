"""End to end: `hyport report --only 01` on the default profile, secrets, offline HTML.

One real run (module fixture) serves three checks: the files it must leave, that no
secret value reaches any file, and that its HTML opens in a network-blocked browser
without a single request or console error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from browser import chromium_path, visit

MARKER = "hyport-marker-9f3c1e7a"
SECRETS = {"HF_TOKEN": MARKER + "-hf", "WANDB_API_KEY": MARKER + "-wandb",
           "MY_SECRET": MARKER + "-mine", "HCCL_DB_PASSWORD": MARKER + "-hccl"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    env = {**os.environ, **SECRETS, "HCCL_CONNECT_TIMEOUT": "240"}
    proc = subprocess.run(
        [sys.executable, "-m", "hyport_lib", "report", "--profile", "default", "--only", "01",
         "--output-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=600, cwd=str(out))
    runs = [p for p in out.iterdir() if p.is_dir()]
    return proc, (runs[0] if len(runs) == 1 else None)


def test_report_only_01_succeeds_and_leaves_its_files(env_run):
    proc, run_dir = env_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    assert (run_dir / "index.html").exists()
    assert (run_dir / "html" / "01_environment.html").exists()
    assert (run_dir / "notebooks" / "01_environment.ipynb").exists()
    result = json.loads((run_dir / "results" / "01_environment.json").read_text())
    assert result["stage"] == "01_environment" and result["verdict"] in ("PASS", "WARN")
    assert "01_environment" in proc.stderr  # per-stage progress in the terminal
    # the non-secret HCCL variable is collected, so the environment really was read
    assert "HCCL_CONNECT_TIMEOUT" in (run_dir / "results" / "01_environment.json").read_text()


def test_no_secret_reaches_any_file(env_run):
    _, run_dir = env_run
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 6
    leaks = []
    for path in files:
        data = path.read_bytes()
        if MARKER.encode() in data:
            leaks.append(str(path.relative_to(run_dir)))
        for name in SECRETS:
            if name.encode() in data:
                leaks.append(f"{path.relative_to(run_dir)} (names {name})")
    assert not leaks, leaks


@pytest.mark.skipif(chromium_path() is None and not os.environ.get("CI"),
                    reason="Debian chromium not installed (scripts/setup.sh --browser installs it)")
@pytest.mark.parametrize("page,selectors", [
    ("index.html", {"rows": "#stages tbody tr", "verdict": "#stages td.verdict", "title": "h1"}),
    ("html/01_environment.html", {"cells": ".jp-Cell", "tables": "table", "title": "h1"}),
])
def test_html_opens_offline_in_chromium(env_run, page, selectors, tmp_path):
    _, run_dir = env_run
    shot = tmp_path / "page.png"
    seen = visit(run_dir / page, selectors, screenshot=shot)
    assert seen.blocked == [], f"network requests attempted: {seen.blocked}"
    assert seen.failed == []
    assert seen.console_errors == [] and seen.page_errors == []
    assert seen.counts["title"] >= 1 and seen.texts["title"].strip()
    if page == "index.html":
        assert seen.counts["rows"] == 1
        assert seen.texts["verdict"].strip() in ("PASS", "WARN")
    else:
        assert seen.counts["cells"] >= 3 and seen.counts["tables"] >= 1
    assert shot.stat().st_size > 5000
