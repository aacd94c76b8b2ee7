"""Checkpoints built once into hyport's cache (models/model_cache.py): one build however many
processes ask, under the modes a plain mkdir/open gives, nothing left behind by a failed build.
SmolLM2's conversion is exercised with its real weights in test_pretrained.py."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hyport_lib.models import model_cache
from hyport_lib.models.tiny import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]


def test_a_folder_is_built_once_under_a_name_carrying_transformers_major(tmp_path, monkeypatch):
    monkeypatch.setenv(model_cache.CACHE_ENV_VAR, str(tmp_path))
    folder = model_cache.cache_folder("thing", tail="-x")
    assert folder == tmp_path / f"thing-tf{model_cache.transformers_major()}-x"
    builds = []

    def build(out: Path) -> None:
        builds.append(out)
        (out / "weights.bin").write_bytes(b"w")
        (out / "done.json").write_text("{}")

    assert model_cache.build_once(folder, "done.json", build, "a test model") == folder
    assert model_cache.build_once(folder, "done.json", build, "a test model") == folder
    assert len(builds) == 1 and builds[0] != folder and (folder / "weights.bin").read_bytes() == b"w"


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    def build(out: Path) -> None:
        (out / "half.bin").write_bytes(b"x")
        raise RuntimeError("the disk is full")

    with pytest.raises(RuntimeError, match="the disk is full"):
        model_cache.build_once(tmp_path / "m", "done.json", build, "a test model")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".m.lock"], left


@contextlib.contextmanager
def _umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _modes(folder: Path) -> dict:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.iterdir()]}


@pytest.mark.parametrize("shards", [None, "100KB"])
def test_cached_checkpoint_is_readable_by_everyone(tmp_path, shards):
    # transformers writes weights -rw-------; a shared cache needs them 0o644.
    with _umask(0o022):
        folder = ensure_tiny_model(tmp_path, max_shard_size=shards)
    modes = _modes(folder)
    weights = [n for n in modes if n.endswith(".safetensors")]
    assert weights and (len(weights) > 1) == (shards is not None)
    assert modes.pop(folder.name) == 0o755
    assert modes and set(modes.values()) == {0o644}, modes


def test_shared_modes_follow_the_umask(tmp_path):
    (tmp_path / "sub").mkdir(mode=0o700)
    for name in ("model.safetensors", "sub/shard.bin"):
        (tmp_path / name).write_bytes(b"x")
        os.chmod(tmp_path / name, 0o600)
    with _umask(0o002):
        assert model_cache.current_umask() == 0o002
        model_cache.share_modes(tmp_path)
        assert os.umask(0o002) == 0o002, "reading the umask must not change it"
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o775
    assert stat.S_IMODE((tmp_path / "sub").stat().st_mode) == 0o775
    assert stat.S_IMODE((tmp_path / "model.safetensors").stat().st_mode) == 0o664
    assert stat.S_IMODE((tmp_path / "sub" / "shard.bin").stat().st_mode) == 0o664


@pytest.mark.slow
def test_concurrent_processes_share_one_build(tmp_path):
    code = (
        "import json, sys\n"
        "from hyport_lib.models.tiny import MARKER_FILE, ensure_tiny_model\n"
        "p = ensure_tiny_model(sys.argv[1])\n"
        "print(p, json.loads((p / MARKER_FILE).read_text())['pid'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err[-2000:]
    lines = [out.strip().splitlines()[-1].split() for out, _ in results]
    assert lines[0] == lines[1], "both saw the same folder, built by the same process"
    assert int(lines[0][1]) in {proc.pid for proc in procs}
    leftovers = [p.name for p in tmp_path.iterdir() if ".build-" in p.name]
    assert leftovers == []
