"""``hyport train`` packed on a model whose layers mix packed samples: refused before launch,
naming the layer, however small the leak is at initialisation (issue 40's must-show)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from leaky_convolution_model import packed_vs_alone, write_leaky_lfm2


@pytest.mark.slow  # a fresh hyport process: torch and transformers imported, the proof run
def test_a_convolution_leaking_1e_4_refuses_packing_before_launch(zoo, tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "lfm2"
    folder.mkdir()
    model = write_leaky_lfm2(folder, zoo["llama"])
    assert 2e-5 < packed_vs_alone(model, list(range(10, 40)), list(range(50, 75))) < 5e-4  # < the 1e-3 on logits
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "hyport_lib", "train", "--model-path", str(folder),
                           "--packing", "true", "--max-steps", "1", "--output-dir", str(out), "--no-record"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "packing=True: layer 0 (model.layers.0.conv, class Lfm2ShortConv) mixes tokens across samples" in line
    assert "train with packing=False" in line
    assert "torchrun" not in done.stdout + done.stderr and not (out / "logs").exists()
