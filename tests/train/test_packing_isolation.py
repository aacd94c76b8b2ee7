"""``hyport train`` packed on a model whose layers mix packed samples: refused before launch,
naming the layer, however small the leak is at initialisation (issue 40's must-show)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch

#: The convolution's weights scaled until a sample in a packed row differs from itself run
#: alone by about 1e-4: a tenth of the swap proof's logits tolerance.
CONV_SCALE = 0.2


def _leaky_checkpoint(zoo, folder):
    """An LFM2 (short convolution, then attention) with the zoo's Llama tokenizer."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(zoo["llama"] / name, folder / name)
    config = Lfm2Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, layer_types=["conv", "full_attention"],
                        bos_token_id=0, eos_token_id=1, pad_token_id=2)
    torch.manual_seed(0)
    model = Lfm2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("conv.conv.weight"):
                parameter.mul_(CONV_SCALE)
    model.save_pretrained(folder)
    return model


def _packed_vs_alone(model, first: list[int], second: list[int]) -> float:
    ids = torch.tensor([first + second])
    positions = torch.tensor([list(range(len(first))) + list(range(len(second)))])
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=positions, use_cache=False).logits[0, len(first):]
        alone = model(input_ids=torch.tensor([second]), use_cache=False).logits[0]
    return float((packed - alone).abs().max())


@pytest.mark.slow  # a fresh hyport process: torch and transformers imported, the proof run
def test_a_convolution_leaking_1e_4_refuses_packing_before_launch(zoo, tmp_path, monkeypatch):
    monkeypatch.setenv("HYPORT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "lfm2"
    folder.mkdir()
    model = _leaky_checkpoint(zoo, folder)
    leak = _packed_vs_alone(model, list(range(10, 40)), list(range(50, 75)))
    assert 2e-5 < leak < 5e-4  # below the swap proof's 1e-3 on logits
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "hyport_lib", "train", "--model-path", str(folder),
                           "--packing", "true", "--max-steps", "1", "--output-dir", str(out), "--no-record"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "packing=True: layer 0 (model.layers.0.conv, class Lfm2ShortConv) mixes tokens across samples" in line
    assert "train with packing=False" in line
    assert "torchrun" not in done.stdout + done.stderr and not (out / "logs").exists()
