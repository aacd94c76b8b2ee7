"""``hyport verify`` refuses what cannot apply and says when it is not the model it seems:
flags without their checkpoint (exit 2), a base that is another model (an error), a
reload that had to fall back from ``architectures`` to ``model_type`` (a WARN)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _verify(*args: str):
    return subprocess.run([sys.executable, "-m", "hyport_lib", "verify", *args, "--no-record"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("flag", ["--logits", "--consolidate"])
def test_a_checkpoint_flag_without_a_checkpoint_is_a_usage_error(flag):
    from hyport_lib.models.tiny import ensure_tiny_model

    done = _verify(str(ensure_tiny_model()), flag)
    assert done.returncode == 2 and done.stderr.strip() == (
        f"hyport verify: {flag} compares with a checkpoint: give --checkpoint PATH")


def test_a_base_that_is_another_model_is_an_error_and_a_class_fallback_a_warning(zoo, tmp_path):
    done = _verify(str(zoo["qwen3"]), "--base", str(zoo["gemma3"]))
    assert done.returncode == 1 and "FAIL: base_mismatch" in done.stdout, done.stdout[-1500:]
    renamed = shutil.copytree(zoo["qwen3"], tmp_path / "renamed")
    config = json.loads((renamed / "config.json").read_text())
    config["architectures"] = ["Qwen3ForFancyLM"]
    (renamed / "config.json").write_text(json.dumps(config))
    done = _verify(str(renamed), "--reload")
    assert done.returncode == 0 and "reload_class_fallback" in done.stdout, done.stdout[-1500:]
    assert "WARN" in done.stdout.splitlines()[-1] and "Qwen3ForFancyLM" in done.stdout
